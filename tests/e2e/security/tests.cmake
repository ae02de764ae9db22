# Trust boundaries of the control channel against the namespace cluster (label
# cluster): a capture on a node's interface during a pdsh job shows no plaintext of
# exported, inherited or argv canaries or the run token; `ps` shows no secret; a fake
# launcher and an agent the launcher did not start are refused; hostile --ssh-config /
# --ssh-identity paths run nothing on the ssh, pdsh and openmpi transports.
dsl_script_test(cluster_security LABEL cluster TIMEOUT 600
                COMMAND ${dsl_with_cluster} 2 bash ${CMAKE_CURRENT_LIST_DIR}/security.sh
                        $<TARGET_FILE:dslaunch> $<TARGET_FILE:flow_worker>
                        ${PROJECT_SOURCE_DIR})
