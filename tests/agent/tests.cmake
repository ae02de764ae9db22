# dslagent: the ranks' containment (cgroup paths, /proc parsing) and why a rank died.
dsl_unit_test(test_contain SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_contain.c LIBS dslagent)
# the plan's device ids as places in the GPUs Slurm gave an agent's step
dsl_unit_test(test_devmap SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_devmap.c LIBS dslagent)
dsl_fuzz_target(fuzz_devmap SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_devmap.c LIBS dslagent)
# the kernel texts the agent reads (/proc/PID/stat, meminfo, kernel log lines,
# mountinfo with /proc/self/cgroup).
dsl_fuzz_target(fuzz_procfs SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_procfs.c LIBS dslagent)
