# Multi-node pieces: quoting, network facts, the ssh transport (unit: loopback only;
# cluster: against the namespace cluster of tests/cluster). They link the remote library
# alone, not the rest of the launcher.
set(dsl_net_src)
set(dsl_net_libs dslremote)
dsl_unit_test(test_net SOURCES net/test_net.c ${dsl_net_src} LIBS ${dsl_net_libs})
if(DSL_WITH_SSH)
  # run by the cluster tier (tests/cluster/tests.cmake), not on its own
  add_executable(test_ssh_transport net/test_ssh_transport.c net/cluster_conn.c
                 ${dsl_net_src})
  target_link_libraries(test_ssh_transport PRIVATE ${dsl_net_libs} dsl_flags)
  target_include_directories(test_ssh_transport PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
endif()
# pdsh transport: the test binary doubles as the connect-back "agent" on the nodes
add_executable(test_pdsh_transport net/test_pdsh_transport.c net/cluster_conn.c
               ${dsl_net_src})
target_link_libraries(test_pdsh_transport PRIVATE ${dsl_net_libs} dsl_flags)
target_include_directories(test_pdsh_transport PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
if(DSL_WITH_SSH)
  # benchmark helper (bench/launch_multinode.sh): the ssh transport alone, N at once
  add_executable(dsl_ssh_fanout net/ssh_fanout.c ${dsl_net_src})
  target_link_libraries(dsl_ssh_fanout PRIVATE ${dsl_net_libs} dsl_flags)
endif()
