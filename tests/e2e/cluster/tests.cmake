# The cluster tier: real sshd in network namespaces (tests/e2e/cluster/cluster.sh; falls
# back to sshd on 127.0.0.x without CAP_NET_ADMIN). Each test brings its own cluster up
# and down through with_cluster.sh. Label: cluster. Run: ctest -L cluster
# This is the cluster's own test; the transports' cluster tests are in tests/remote.
dsl_script_test(cluster_selftest LABEL cluster TIMEOUT 300
                COMMAND ${dsl_with_cluster} 3 ${CMAKE_CURRENT_LIST_DIR}/selftest.sh)
