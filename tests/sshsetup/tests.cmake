# `dslaunch ssh-setup`: unit tests of the authorized_keys / known_hosts / config line
# logic and the permission rules, and the cluster test (password-only sshds, --mesh,
# idempotence, a wrong password on one host) against the namespace cluster.
dsl_unit_test(test_authkeys SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_authkeys.c LIBS dsllaunch)
