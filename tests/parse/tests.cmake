# Launcher input parsing: hostfile, host ranges, placement and world-info encoding,
# exported environment, shell quoting.
dsl_unit_test(test_hostfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hostfile.c LIBS dsltools)
dsl_unit_test(test_placement SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_placement.c LIBS dsltools)
dsl_unit_test(test_envexport SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envexport.c LIBS dsltools)
dsl_unit_test(test_shellquote SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shellquote.c LIBS dsltools)
dsl_fuzz_target(fuzz_hostfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_hostfile.c LIBS dsltools)
dsl_fuzz_target(fuzz_filter SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_filter.c LIBS dsltools)
dsl_fuzz_target(fuzz_envfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_envfile.c LIBS dsltools)
