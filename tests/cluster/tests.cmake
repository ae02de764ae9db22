# The cluster tier: real sshd in network namespaces (tests/cluster/cluster.sh; falls
# back to sshd on 127.0.0.x without CAP_NET_ADMIN). Each test brings its own cluster up
# and down through with_cluster.sh. Label: cluster. Run: ctest -L cluster
set(dsl_cluster_dir ${CMAKE_CURRENT_SOURCE_DIR}/cluster)
add_test(NAME cluster_selftest
         COMMAND ${dsl_cluster_dir}/with_cluster.sh 3 ${dsl_cluster_dir}/selftest.sh)
set_tests_properties(cluster_selftest PROPERTIES LABELS cluster TIMEOUT 300)
if(DSL_WITH_SSH)
  add_test(NAME cluster_ssh_transport
           COMMAND ${dsl_cluster_dir}/with_cluster.sh 3 $<TARGET_FILE:test_ssh_transport>)
  set_tests_properties(cluster_ssh_transport PROPERTIES LABELS cluster TIMEOUT 300)
endif()
add_test(NAME cluster_pdsh_openmpi_transports
         COMMAND ${dsl_cluster_dir}/with_cluster.sh 3 $<TARGET_FILE:test_pdsh_transport>)
set_tests_properties(cluster_pdsh_openmpi_transports PROPERTIES LABELS cluster TIMEOUT 300)
