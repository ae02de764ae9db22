# `dslaunch ssh-setup`: a flow test on this machine alone (usage, an unreachable host);
# and the cluster test (password-only sshds, --mesh, idempotence, a terminal, a wrong
# password on one host, --ssh_port) against the namespace cluster (root). The unit
# tests (test_authkeys, test_sshlocal) are in tests/tools.
if(DSL_WITH_SSH)
  dsl_script_test(flow_sshsetup LABEL flow TIMEOUT 120
                  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sshsetup_flow.sh
                          $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR})
  dsl_script_test(cluster_sshsetup LABEL cluster TIMEOUT 300
                  COMMAND ${dsl_with_cluster} 3 bash
                          ${CMAKE_CURRENT_LIST_DIR}/sshsetup_cluster.sh
                          $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR})
endif()
