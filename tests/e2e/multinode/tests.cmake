# Multi-node flows of the real dslaunch against the namespace cluster (label cluster):
# env contract across nodes, first-failure teardown, lost network, refused hosts,
# host keys, Ctrl-C and SIGKILL of the launcher or of an agent (descendants that left
# their rank's session included), quoting, and the pdsh transport.
dsl_script_test(cluster_launch LABEL cluster TIMEOUT 900
                COMMAND ${dsl_with_cluster} 2 bash ${CMAKE_CURRENT_LIST_DIR}/launch.sh
                        $<TARGET_FILE:dslaunch> $<TARGET_FILE:flow_worker>
                        ${PROJECT_SOURCE_DIR})
# Restarts across 3 nodes: a failed node left out (--exclude-failed-nodes), node 0
# lost and MASTER_ADDR moved, --min-nodes, and dstrain resuming at a smaller world.
dsl_script_test(cluster_restart LABEL cluster TIMEOUT 600
                COMMAND ${dsl_with_cluster} 3 bash ${CMAKE_CURRENT_LIST_DIR}/restart.sh
                        $<TARGET_FILE:dslaunch> $<TARGET_FILE:flow_worker>
                        $<TARGET_FILE:dstrain> ${PROJECT_SOURCE_DIR})
# No-ssh mode: a dslaunch per node in two namespaces, node2's dialling in to node1's
# (env contract, PET_* variables, a wrong secret refused, either launcher killed, uneven
# slots and fail-fast, restarts, hang detection,
# dstrain at world 4).
dsl_script_test(cluster_nossh LABEL cluster TIMEOUT 300
                COMMAND ${dsl_with_cluster} 2 bash ${CMAKE_CURRENT_LIST_DIR}/nossh.sh
                        $<TARGET_FILE:dslaunch> $<TARGET_FILE:flow_worker>
                        $<TARGET_FILE:dstrain> ${PROJECT_SOURCE_DIR})
# An activated Python venv on the launching host (issue 33): exported to every rank when
# every node has it at the same path, a node without it named by the preflight.
dsl_script_test(cluster_venv LABEL cluster TIMEOUT 300
                COMMAND ${dsl_with_cluster} 2 bash ${CMAKE_CURRENT_LIST_DIR}/venv.sh
                        $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR})
