# Rendezvous store and collectives (issue 5).
dsl_unit_test(comm_world1_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_world1_test.c LIBS dslcomm)
dsl_unit_test(comm_mp_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_mp_test.c LIBS dslcomm
              LABELS flow)
dsl_unit_test(comm_mp_failure_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_mp_failure_test.c
              LIBS dslcomm LABELS flow)
if(DSL_HAVE_CUDA)
  dsl_unit_tests(GPU LIBS dslcomm TESTS comm_nccl_gpu_test comm_nccl_gpu_test.c)
endif()
dsl_unit_test(store_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/store_test.c LIBS dslcomm)
dsl_fuzz_target(fuzz_store_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_store_proto.c
                LIBS dslcomm)
# the tcp backend's peer hello: the first bytes anyone reaching a rank's mesh port sends
dsl_fuzz_target(fuzz_tcp_hello SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tcp_hello.c LIBS dslcomm)
