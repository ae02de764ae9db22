# dslproto: the control protocol between the launcher and its node agents.
dsl_unit_test(test_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proto.c LIBS dslproto)
dsl_fuzz_target(fuzz_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_proto.c LIBS dslproto)
# the progress and stack messages
dsl_unit_test(test_proto_hang SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proto_hang.c LIBS dslproto)
# every message type: the bytes of protocol version 1, round trips, refusals
dsl_unit_test(test_proto_types SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proto_types.c
              LIBS dslproto PkgConfig::CJSON)
