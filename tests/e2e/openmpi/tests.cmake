# `dslaunch --launcher openmpi` (mpirun starts one agent per node, which connects back)
# against the namespace cluster of tests/e2e/cluster. Label: cluster. Needs openmpi-bin.
dsl_script_test(cluster_openmpi_launch LABEL cluster TIMEOUT 600
                COMMAND ${dsl_with_cluster} 2 bash ${CMAKE_CURRENT_LIST_DIR}/openmpi.sh
                        $<TARGET_FILE:dslaunch> $<TARGET_FILE:flow_worker>
                        ${PROJECT_SOURCE_DIR})
# dstrain and dsbench started by mpirun itself (no dslaunch), on this machine. Label: flow.
if(TARGET dstrain AND TARGET dsbench)
  dsl_script_test(openmpi_ranks LABEL flow TIMEOUT 300
                  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ranks.sh $<TARGET_FILE:dslaunch>
                          $<TARGET_FILE:dstrain> $<TARGET_FILE:dsbench>
                          ${PROJECT_SOURCE_DIR}
                  PROPERTIES SKIP_RETURN_CODE 77)
endif()
