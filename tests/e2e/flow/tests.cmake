# Flow tests: the real dslaunch binary against fake workers (worker.c), on the local
# transport. TAP output; the script's exit status is the verdict.
find_package(Threads REQUIRED) # the worker's "hold": a multi-threaded rank
dsl_test_executable(flow_worker SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker.c LIBS Threads::Threads)
# flow_launch: the env contract, arguments, usage errors, hostfiles, output, --dry-run;
# flow_signals: stopping a job (SIGINT/TERM/HUP/KILL of dslaunch, SIGUSR1 to the ranks);
# flow_contain: nothing a rank starts survives, agents going quiet, OOM kills.
# RUN_SERIAL: one case of flow_launch holds the default master port 29500, which any
# other job of the suite (whose rank 0 listens there) would otherwise race for; the
# stops, freezes and OOM kills of the other two have bounds that should not compete
# with other suites for the cores, as flow_hang's do.
foreach(part launch:flow signals:signals contain:contain)
  string(REPLACE ":" ";" part ${part})
  list(GET part 0 name)
  list(GET part 1 script)
  add_test(NAME flow_${name}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/${script}.sh $<TARGET_FILE:dslaunch>
                   $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
  set_tests_properties(flow_${name} PROPERTIES LABELS flow TIMEOUT 600 RUN_SERIAL TRUE)
endforeach()
# Restarts (--max-restarts, --exclude-failed-nodes, --min-nodes) with the same worker.
dsl_script_test(flow_restart LABEL flow TIMEOUT 300
                COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/restart.sh $<TARGET_FILE:dslaunch>
                        $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
# Bad numbers and hostile text on the command lines of dslaunch and dstrain (refused
# before anything starts, with the allowed range and the input escaped).
if(TARGET dstrain)
  dsl_script_test(flow_numbers LABEL flow TIMEOUT 120
                  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/numbers.sh $<TARGET_FILE:dslaunch>
                          $<TARGET_FILE:dstrain> ${PROJECT_SOURCE_DIR})
endif()
# --dry-run --emit jobset: the manifest read by a YAML parser (python3-yaml, else those
# cases skip), its command run as a two-node no-ssh job on loopback.
dsl_script_test(flow_emit_jobset LABEL flow TIMEOUT 120
                COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/emit_jobset.sh
                        $<TARGET_FILE:dslaunch> $<TARGET_FILE:flow_worker>
                        ${PROJECT_SOURCE_DIR})
# --dry-run --emit sbatch: the warning signal and requeue follow every way the ranks'
# saving on SIGUSR1 is turned on (the flag, the --config files), and the script's
# comments say what could not be known.
if(TARGET dstrain)
  dsl_script_test(flow_emit_sbatch LABEL flow TIMEOUT 120
                  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/emit_sbatch.sh
                          $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>
                          ${PROJECT_SOURCE_DIR})
endif()
# What a new user meets in the second week (issue 33): the user's own 'train' on PATH,
# --oversubscribe, --log-dir across runs and restarts, a config error said once.
dsl_script_test(flow_new_user LABEL flow TIMEOUT 120
                COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/newuser.sh $<TARGET_FILE:dslaunch>
                        $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR}
                        $<$<TARGET_EXISTS:dstrain>:$<TARGET_FILE:dstrain>>)
