# `dslaunch doctor`: a flow test on this machine alone, and the cluster tests (version
# mismatch, NCCL_SOCKET_IFNAME, a blocked master port) against the namespace cluster.
# The unit tests of the report and the pure checks are tests/tools/test_doctor.c.
dsl_script_test(flow_doctor LABEL flow TIMEOUT 120
                COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/doctor_flow.sh
                        $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR})
dsl_script_test(cluster_doctor LABEL cluster TIMEOUT 300
                COMMAND ${dsl_with_cluster} 2 bash
                        ${CMAKE_CURRENT_LIST_DIR}/doctor_cluster.sh $<TARGET_FILE:dslaunch>
                        ${PROJECT_SOURCE_DIR})
