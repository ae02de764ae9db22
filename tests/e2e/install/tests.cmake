# The installed tree (cmake --install) run as a user would, away from the build tree:
# train and dsbench through the installed dslaunch, man pages, bash completion. Label flow.
if(TARGET dslaunch AND TARGET dstrain AND TARGET dsbench)
  dsl_script_test(flow_install LABEL flow TIMEOUT 300
                  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/install.sh ${CMAKE_BINARY_DIR}
                          ${PROJECT_SOURCE_DIR})
endif()
