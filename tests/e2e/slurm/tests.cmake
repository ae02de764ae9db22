# The Slurm tier: a real slurmctld and slurmd per node in network namespaces
# (tests/e2e/slurm/slurm_cluster.sh), brought up and down around each test by
# with_slurm.sh. Label: cluster. Skips (77, with the reason) only when not root or
# when the Slurm packages cannot be installed. Run: ctest -L cluster -R slurm
set(dsl_with_slurm ${CMAKE_CURRENT_LIST_DIR}/with_slurm.sh)
# dsl_slurm_test(NAME SCRIPT ARGS... [PROPERTIES ...]): bash SCRIPT (of this folder) ARGS...
# on the two-node cluster; 77 is the skip
function(dsl_slurm_test name script)
  cmake_parse_arguments(S "" "" "PROPERTIES" ${ARGN})
  dsl_script_test(${name} LABEL cluster TIMEOUT 300
                  COMMAND ${dsl_with_slurm} 2 bash ${CMAKE_CURRENT_LIST_DIR}/${script}
                          ${S_UNPARSED_ARGUMENTS}
                  PROPERTIES SKIP_RETURN_CODE 77 ${S_PROPERTIES})
endfunction()
dsl_slurm_test(slurm_selftest selftest.sh ${PROJECT_SOURCE_DIR})
# dstrain and dsbench started by srun itself (no dslaunch) on the Slurm cluster.
if(TARGET dstrain AND TARGET dsbench)
  dsl_slurm_test(slurm_srun_ranks srun_ranks.sh $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>
                 $<TARGET_FILE:dsbench> ${PROJECT_SOURCE_DIR})
endif()
# dslaunch inside a Slurm allocation (salloc, sbatch) with no hostfile: the plan.
dsl_slurm_test(slurm_allocation alloc.sh $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR})
if(TARGET dstrain)
  # --launcher slurm (and auto inside an allocation): one srun step of agents connecting
  # back; ranks, uneven slots, dstrain bit for bit, teardown on failure and scancel.
  dsl_slurm_test(slurm_transport transport.sh $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>
                 ${PROJECT_SOURCE_DIR})
  # Slurm's warning signal (SIGUSR1) stops dstrain --save-on-signal with a checkpoint and 138.
  dsl_slurm_test(slurm_signal signal.sh $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>
                 ${PROJECT_SOURCE_DIR})
  # --dry-run --emit sbatch: the script runs under sbatch as written (argv byte for byte),
  # and with --save-on-signal requeues itself and resumes bit for bit.
  dsl_slurm_test(slurm_emit emit.sh $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>
                 ${PROJECT_SOURCE_DIR})
endif()
# GPUs (4 gres "GPUs" a node, DSL_SLURM_GPUS): slots from each way a job asks for them,
# and every rank on the GPUs Slurm gave its node's step.
dsl_slurm_test(slurm_gpus gpus.sh $<TARGET_FILE:dslaunch> ${PROJECT_SOURCE_DIR}
               PROPERTIES ENVIRONMENT DSL_SLURM_GPUS=4)
