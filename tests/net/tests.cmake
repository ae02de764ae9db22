# Multi-node pieces: quoting, network facts, the ssh transport (unit: loopback only;
# cluster: against the namespace cluster of tests/cluster). The sources are compiled in
# directly so these tests do not depend on the rest of the launcher library.
set(dsl_net_src ${PROJECT_SOURCE_DIR}/src/launch/netinfo.c
    ${PROJECT_SOURCE_DIR}/src/launch/shellquote.c
    ${PROJECT_SOURCE_DIR}/src/launch/connectback.c
    ${PROJECT_SOURCE_DIR}/src/launch/transport_pdsh.c
    ${PROJECT_SOURCE_DIR}/src/launch/transport_openmpi.c)
set(dsl_net_libs dslcommon)
if(DSL_WITH_SSH)
  list(APPEND dsl_net_src ${PROJECT_SOURCE_DIR}/src/launch/transport_ssh.c
       ${PROJECT_SOURCE_DIR}/src/launch/sshsession.c)
  list(APPEND dsl_net_libs PkgConfig::LIBSSH)
endif()
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
