# dsljob: the ranks' containment (cgroup paths, /proc parsing) and why a rank died;
# no-ssh mode's hello check.
dsl_unit_test(test_nossh_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nossh_check.c LIBS dsljob)
# the launcher's console queue: never blocks, drops whole lines, reports EPIPE
dsl_unit_test(test_output SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_output.c LIBS dsljob)
# the plan's device ids as places in the GPUs Slurm gave an agent's step
dsl_unit_test(test_devmap SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_devmap.c LIBS dsljob)
dsl_fuzz_target(fuzz_devmap SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_devmap.c LIBS dsljob)
dsl_unit_test(test_contain SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_contain.c LIBS dsljob)
# dsljob: hang verdicts (pure functions).
dsl_unit_test(test_hang SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hang.c LIBS dsljob)
# dsljob: the kernel texts the agent reads (/proc/PID/stat, meminfo, kernel log lines,
# mountinfo with /proc/self/cgroup).
dsl_fuzz_target(fuzz_procfs SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_procfs.c LIBS dsljob)
