# dslremote: shell quoting, network facts, connect-back and the transports (unit:
# loopback only; cluster: against the namespace cluster of tests/e2e/cluster). They
# link the remote library alone, not the rest of the launcher.
dsl_unit_test(test_shellquote SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shellquote.c
              LIBS dslremote)
dsl_unit_test(test_emit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emit.c LIBS dslremote)
dsl_unit_test(test_emit_jobset SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emit_jobset.c LIBS dslremote)
dsl_unit_test(test_net SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_net.c LIBS dslremote)

# The transports against a real cluster: these binaries run under with_cluster.sh,
# which hands them the cluster's directory, so they are cluster tests, not unit tests.
# dsl_transport_test(PROGRAM TEST): PROGRAM.c with cluster_conn.c, run as TEST.
function(dsl_transport_test program test)
  dsl_test_executable(${program} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${program}.c
                      ${CMAKE_CURRENT_LIST_DIR}/cluster_conn.c LIBS dslremote)
  dsl_script_test(${test} LABEL cluster TIMEOUT 300
                  COMMAND ${dsl_with_cluster} 3 $<TARGET_FILE:${program}>)
endfunction()
if(DSL_WITH_SSH)
  dsl_transport_test(test_ssh_transport cluster_ssh_transport)
endif()
# pdsh transport: the test binary doubles as the connect-back "agent" on the nodes
dsl_transport_test(test_pdsh_transport cluster_pdsh_openmpi_transports)
if(DSL_WITH_SSH)
  # benchmark helper (docs/multinode.md): the ssh transport alone, N sessions at once
  dsl_test_executable(dsl_ssh_fanout SOURCES ${CMAKE_CURRENT_LIST_DIR}/ssh_fanout.c
                      LIBS dslremote)
endif()
# the sealed control channel of pdsh/openmpi: handshake, frames, forged and tampered
# input (in memory); its fuzz target's seeds are replayed as a unit test
dsl_unit_test(test_seal SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_seal.c LIBS dslremote)
dsl_fuzz_target(fuzz_seal SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_seal.c LIBS dslremote)
# what reaches the launcher's end of a connect-back connection unproven: the agents' key
# lines in pdsh's/mpirun's output, a connection's first bytes, a socket before the
# handshake (cbstream.c)
dsl_fuzz_target(fuzz_cbstream SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_cbstream.c LIBS dslremote)
# the quoting of --emit jobset: every string reads back byte for byte
dsl_fuzz_target(fuzz_yamlquote SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_yamlquote.c LIBS dslremote)
# sinfo's gres text, read by --emit sbatch to know whether the cluster has GPUs
dsl_fuzz_target(fuzz_sinfo SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_sinfo.c LIBS dslremote)
# dslremote: the slurm agent's index and environment.
dsl_unit_test(test_slurm_agent SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_slurm_agent.c LIBS dslremote)
# dslremote: no-ssh mode's derived keys and coordinator listener, on loopback.
dsl_unit_test(test_join SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_join.c LIBS dslremote)
