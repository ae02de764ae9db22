# dslaunch sync against the namespace cluster (label cluster): every sshd gets a private
# tmpfs over the data directory, so each node's copy is real and checked on its own;
# the flow's temporary directory outside it is one directory all nodes share.
if(DSL_WITH_SSH)
  dsl_script_test(cluster_sync LABEL cluster TIMEOUT 300
                  COMMAND ${CMAKE_COMMAND} -E env
                          DSL_CLUSTER_PRIVATE_DIR=${CMAKE_BINARY_DIR}/sync-test-data
                          ${dsl_with_cluster} 3 bash ${CMAKE_CURRENT_LIST_DIR}/sync.sh
                          $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR})
endif()
