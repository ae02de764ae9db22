# dsltools: the pure checks and the report of `dslaunch doctor` (test_doctor); the
# authorized_keys / known_hosts / config line logic and permission rules of ssh-setup
# (test_authkeys) and its local key pair and file writes (test_sshlocal); the SHA-256
# that sync compares files with (test_sha256). The flow and cluster tests of these
# tools are under tests/e2e.
dsl_unit_test(test_doctor SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_doctor.c LIBS dsltools)
dsl_unit_test(test_authkeys SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_authkeys.c LIBS dsltools)
if(DSL_WITH_SSH) # ssh-setup's local side and sync (with its sha256) need libssh
  dsl_unit_test(test_sshlocal SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sshlocal.c LIBS dsltools)
  dsl_unit_test(test_sha256 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sha256.c LIBS dsltools)
endif()
# dsltools: the texts the tools read from other hosts and programs (authorized_keys,
# known_hosts, ssh config, dsbench's output, sha256sum's output)
dsl_fuzz_target(fuzz_tooltext SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tooltext.c LIBS dsltools)
