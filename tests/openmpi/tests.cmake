# `dslaunch --launcher openmpi` (mpirun starts one agent per node, which connects back)
# against the namespace cluster of tests/cluster. Label: cluster. Needs openmpi-bin.
add_test(NAME cluster_openmpi_launch
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cluster/with_cluster.sh 2
                 bash ${PROJECT_SOURCE_DIR}/tests/multinode/openmpi.sh $<TARGET_FILE:dslaunch>
                 $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
set_tests_properties(cluster_openmpi_launch PROPERTIES LABELS cluster TIMEOUT 600)
