# `dslaunch ssh-setup`: unit tests of the authorized_keys / known_hosts / config line
# logic and the permission rules, and the cluster test (password-only sshds, --mesh,
# idempotence, a wrong password on one host) against the namespace cluster.
dsl_unit_test(test_authkeys SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_authkeys.c LIBS dsllaunch)
if(DSL_WITH_SSH)
  add_test(NAME cluster_sshsetup
           COMMAND ${PROJECT_SOURCE_DIR}/tests/cluster/with_cluster.sh 3
                   bash ${CMAKE_CURRENT_LIST_DIR}/sshsetup_cluster.sh $<TARGET_FILE:dslaunch>
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(cluster_sshsetup PROPERTIES LABELS cluster TIMEOUT 300)
endif()
