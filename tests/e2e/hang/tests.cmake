# Hang detection end to end: dslaunch with dstrain, the flow worker and a Python
# heartbeat (tests/e2e/hang/hang.sh). RUN_SERIAL: its timing bounds (hang, comm and
# capture timeouts) should not compete with other suites for the cores, and its jobs
# take the default master port as flow_launch's do.
if(TARGET dstrain)
  dsl_script_test(flow_hang LABEL flow TIMEOUT 600
                  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/hang.sh $<TARGET_FILE:dslaunch>
                          $<TARGET_FILE:dstrain> $<TARGET_FILE:flow_worker>
                          ${PROJECT_SOURCE_DIR}
                  PROPERTIES RUN_SERIAL TRUE)
endif()
# The same across nodes: world 6 on a 3-node namespace cluster over SSH (label cluster).
if(TARGET dstrain)
  dsl_script_test(cluster_hang LABEL cluster TIMEOUT 600
                  COMMAND ${dsl_with_cluster} 3 bash
                          ${CMAKE_CURRENT_LIST_DIR}/cluster_hang.sh $<TARGET_FILE:dslaunch>
                          $<TARGET_FILE:dstrain> ${PROJECT_SOURCE_DIR}
                  PROPERTIES RUN_SERIAL TRUE)
endif()
# PyTorch DDP programs (Debian's python3-torch, Gloo) that report no progress: healthy
# jobs run to their end, each culprit is named alone (torch_hang.sh; skips without
# torch). RUN_SERIAL as flow_hang: its jobs must not be starved into a verdict.
# Label torch too: the ASan tier leaves it out (its ranks are Python; dslaunch's own
# hang path runs under the sanitizers in flow_hang), which keeps CI within its time.
add_test(NAME flow_torch_hang
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/torch_hang.sh $<TARGET_FILE:dslaunch>
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(flow_torch_hang PROPERTIES LABELS "flow;torch" TIMEOUT 300 RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77)
# The same across nodes: one rank on each of 2 namespace nodes over SSH (label cluster).
dsl_script_test(cluster_torch_hang LABEL cluster TIMEOUT 300
                COMMAND ${dsl_with_cluster} 2 bash ${CMAKE_CURRENT_LIST_DIR}/torch_hang.sh
                        $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR} cluster
                PROPERTIES RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
