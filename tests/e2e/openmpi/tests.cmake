# `dslaunch --launcher openmpi` (mpirun starts one agent per node, which connects back)
# against the namespace cluster of tests/e2e/cluster. Label: cluster. Needs openmpi-bin.
add_test(NAME cluster_openmpi_launch
         COMMAND ${dsl_with_cluster} 2
                 bash ${CMAKE_CURRENT_LIST_DIR}/openmpi.sh $<TARGET_FILE:dslaunch>
                 $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
set_tests_properties(cluster_openmpi_launch PROPERTIES LABELS cluster TIMEOUT 600)
# dstrain and dsbench started by mpirun itself (no dslaunch), on this machine. Label: flow.
if(TARGET dstrain AND TARGET dsbench)
  add_test(NAME openmpi_ranks
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ranks.sh $<TARGET_FILE:dslaunch>
                   $<TARGET_FILE:dstrain> $<TARGET_FILE:dsbench> ${PROJECT_SOURCE_DIR})
  set_tests_properties(openmpi_ranks PROPERTIES LABELS flow TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
