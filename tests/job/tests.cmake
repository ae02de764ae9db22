# dsljob: no-ssh mode's hello check.
dsl_unit_test(test_nossh_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nossh_check.c LIBS dsljob)
# the launcher's console queue: never blocks, drops whole lines, reports EPIPE
dsl_unit_test(test_errfold SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_errfold.c LIBS dsljob)
dsl_unit_test(test_output SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_output.c LIBS dsljob)
# dsljob: hang verdicts (pure functions).
dsl_unit_test(test_hang SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hang.c LIBS dsljob)
