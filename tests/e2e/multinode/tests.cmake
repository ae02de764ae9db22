# Multi-node flows of the real dslaunch against the namespace cluster (label cluster):
# env contract across nodes, first-failure teardown, lost network, refused hosts,
# host keys, Ctrl-C and SIGKILL of the launcher or of an agent (descendants that left
# their rank's session included), quoting, and the pdsh transport.
add_test(NAME cluster_launch
         COMMAND ${dsl_with_cluster} 2
                 bash ${CMAKE_CURRENT_LIST_DIR}/launch.sh $<TARGET_FILE:dslaunch>
                 $<TARGET_FILE:flow_worker> ${PROJECT_SOURCE_DIR})
set_tests_properties(cluster_launch PROPERTIES LABELS cluster TIMEOUT 900)
