# The launcher core: control protocol, options, spawn.
dsl_unit_test(test_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proto.c LIBS dsltools)
dsl_unit_test(test_options SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_options.c LIBS dsltools)
dsl_fuzz_target(fuzz_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_proto.c LIBS dsltools)
