# Flow tests: the real dslaunch binary against fake workers (worker.c), on the local
# transport. TAP output; the script's exit status is the verdict.
find_package(Threads REQUIRED) # the worker's "hold": a multi-threaded rank
dsl_test_executable(flow_worker SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker.c LIBS Threads::Threads)
add_test(NAME flow_launch
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/flow.sh $<TARGET_FILE:dslaunch>
                 $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
# RUN_SERIAL: one case holds the default master port 29500, which any other job of
# the suite (whose rank 0 listens there) would otherwise race for.
set_tests_properties(flow_launch PROPERTIES LABELS flow TIMEOUT 600 RUN_SERIAL TRUE)
# Restarts (--max-restarts, --exclude-failed-nodes, --min-nodes) with the same worker.
add_test(NAME flow_restart
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/restart.sh $<TARGET_FILE:dslaunch>
                 $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
set_tests_properties(flow_restart PROPERTIES LABELS flow TIMEOUT 300)
# Bad numbers and hostile text on the command lines of dslaunch and dstrain (refused
# before anything starts, with the allowed range and the input escaped).
if(TARGET dstrain)
  add_test(NAME flow_numbers
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/numbers.sh $<TARGET_FILE:dslaunch>
                   $<TARGET_FILE:dstrain> ${PROJECT_SOURCE_DIR})
  set_tests_properties(flow_numbers PROPERTIES LABELS flow TIMEOUT 120)
endif()
# --dry-run --emit jobset: the manifest read by a YAML parser (python3-yaml, else those
# cases skip), its command run as a two-node no-ssh job on loopback.
add_test(NAME flow_emit_jobset
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/emit_jobset.sh $<TARGET_FILE:dslaunch>
                 $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
set_tests_properties(flow_emit_jobset PROPERTIES LABELS flow TIMEOUT 120)
# --dry-run --emit sbatch: the warning signal and requeue follow every way the ranks'
# saving on SIGUSR1 is turned on (the flag, the --config files), and the script's
# comments say what could not be known.
if(TARGET dstrain)
  add_test(NAME flow_emit_sbatch
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/emit_sbatch.sh $<TARGET_FILE:dslaunch>
                   $<TARGET_FILE:dstrain> ${PROJECT_SOURCE_DIR})
  set_tests_properties(flow_emit_sbatch PROPERTIES LABELS flow TIMEOUT 120)
endif()
# What a new user meets in the second week (issue 33): the user's own 'train' on PATH,
# --oversubscribe, --log-dir across runs and restarts, a config error said once.
add_test(NAME flow_new_user
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/newuser.sh $<TARGET_FILE:dslaunch>
                 $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR}
                 $<$<TARGET_EXISTS:dstrain>:$<TARGET_FILE:dstrain>>)
set_tests_properties(flow_new_user PROPERTIES LABELS flow TIMEOUT 120)
