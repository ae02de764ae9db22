# `dslaunch doctor`: a flow test on this machine alone, and the cluster tests (version
# mismatch, NCCL_SOCKET_IFNAME, a blocked master port) against the namespace cluster.
# The unit tests of the report and the pure checks are tests/tools/test_doctor.c.
add_test(NAME flow_doctor
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/doctor_flow.sh $<TARGET_FILE:dslaunch>
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(flow_doctor PROPERTIES LABELS flow TIMEOUT 120)
add_test(NAME cluster_doctor
         COMMAND ${dsl_with_cluster} 2
                 bash ${CMAKE_CURRENT_LIST_DIR}/doctor_cluster.sh $<TARGET_FILE:dslaunch>
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(cluster_doctor PROPERTIES LABELS cluster TIMEOUT 300)
