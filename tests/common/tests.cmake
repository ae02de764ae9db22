# dslcommon: the option parser every program uses.
dsl_unit_test(test_opt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_opt.c LIBS dslcommon)
# dslcommon: the progress record (writer and reader).
dsl_unit_test(test_progress SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_progress.c LIBS dslcommon)
# dslcommon: files made without following links (log dirs, logs, temp files, readers).
dsl_unit_test(test_file SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_file.c LIBS dslcommon)
# dslcommon: user text made safe for messages (quote.h), in dsl_seterr and excerpts.
dsl_unit_test(test_quote SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quote.c LIBS dslcommon)
# dslcommon: spawning children (the fd a child keeps across its exec).
dsl_unit_test(test_spawn SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_spawn.c LIBS dslcommon)
# dslcommon: host lists and the rank environment of srun, mpirun and PMIx.
dsl_unit_test(test_rankenv SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rankenv.c LIBS dslcommon)
dsl_fuzz_target(fuzz_slurmlist SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_slurmlist.c LIBS dslcommon)
dsl_unit_test(test_cpubind SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpubind.c LIBS dslcommon)
# dslcommon: which GPU a rank takes (srun, torchrun, oversubscribed nodes).
dsl_unit_test(test_gpupick SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpupick.c LIBS dslcommon)
dsl_fuzz_target(fuzz_gpupick SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_gpupick.c LIBS dslcommon)
# dslcommon: the exact limb sums of the gradient norm (fixedsum.h).
dsl_unit_test(test_fixedsum SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fixedsum.c LIBS dslcommon)
# dslcommon: a rank's progress file as the agent reads it (record or text).
dsl_fuzz_target(fuzz_progress SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_progress.c LIBS dslcommon)
# dslcommon: the checked number parsers and the core lists (--bind_core_list, sysfs).
dsl_fuzz_target(fuzz_parse SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_parse.c LIBS dslcommon)
# dslcommon: the rank environment of srun, mpirun and PMIx as dstrain adopts it.
dsl_fuzz_target(fuzz_rankenv SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_rankenv.c LIBS dslcommon)
