# `dslaunch ssh-setup`: unit tests of the authorized_keys / known_hosts / config line
# logic and the permission rules (test_authkeys) and of the local key pair and file
# writes (test_sshlocal); a flow test on this machine alone (usage, an unreachable
# host); and the cluster test (password-only sshds, --mesh, idempotence, a terminal,
# a wrong password on one host, --ssh_port) against the namespace cluster (root).
dsl_unit_test(test_authkeys SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_authkeys.c LIBS dsltools)
if(DSL_WITH_SSH)
  dsl_unit_test(test_sshlocal SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sshlocal.c LIBS dsltools)
  add_test(NAME flow_sshsetup
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sshsetup_flow.sh $<TARGET_FILE:dslaunch>
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(flow_sshsetup PROPERTIES LABELS flow TIMEOUT 120)
  add_test(NAME cluster_sshsetup
           COMMAND ${PROJECT_SOURCE_DIR}/tests/cluster/with_cluster.sh 3
                   bash ${CMAKE_CURRENT_LIST_DIR}/sshsetup_cluster.sh $<TARGET_FILE:dslaunch>
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(cluster_sshsetup PROPERTIES LABELS cluster TIMEOUT 300)
endif()
