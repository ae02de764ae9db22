# Rendezvous store and collectives (issue 5).
dsl_unit_test(comm_world1_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_world1_test.c LIBS dslcomm)
dsl_unit_test(comm_mp_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_mp_test.c LIBS dslcomm
              LABELS flow)
