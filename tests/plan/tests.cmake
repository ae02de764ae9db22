# dslplan: the command line, hostfile and host ranges, placement and world-info
# encoding, the exported environment.
dsl_unit_test(test_hostfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hostfile.c LIBS dslplan)
dsl_unit_test(test_placement SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_placement.c LIBS dslplan)
dsl_unit_test(test_envexport SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envexport.c LIBS dslplan)
dsl_unit_test(test_options SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_options.c LIBS dslplan)
dsl_fuzz_target(fuzz_hostfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_hostfile.c LIBS dslplan)
dsl_fuzz_target(fuzz_filter SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_filter.c LIBS dslplan)
dsl_fuzz_target(fuzz_envfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_envfile.c LIBS dslplan)
# dslplan: a Slurm allocation as the job's hosts.
dsl_unit_test(test_allocation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_allocation.c LIBS dslplan)
# dslplan: the srun command line of the slurm transport.
dsl_unit_test(test_srun SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_srun.c LIBS dslplan)
# dslplan: no-ssh mode's settings (options, PET_*, JOB_COMPLETION_INDEX, the secret).
dsl_unit_test(test_nossh SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nossh.c LIBS dslplan)
# dslplan: dslaunch's whole command line (parse only), no-ssh mode's settings from it and
# the environment, the --launcher_args splitter.
dsl_fuzz_target(fuzz_options SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_options.c LIBS dslplan)
# dslplan: a Slurm allocation's environment as the job's hosts.
dsl_fuzz_target(fuzz_allocation SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_allocation.c LIBS dslplan)
