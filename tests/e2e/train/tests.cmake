# dsl_train_script(NAME SCRIPT [LABEL label] [ARGS args...] [CASES cases...]): the shell
# script SCRIPT beside this file run with ARGS (exit 77: skipped), under LABEL (flow
# unless given); with CASES one test NAME_<case> per case, the case its last argument.
function(dsl_train_script name script)
  cmake_parse_arguments(T "" "LABEL" "ARGS;CASES" ${ARGN})
  if(NOT T_LABEL)
    set(T_LABEL flow)
  endif()
  set(cmd sh ${CMAKE_CURRENT_LIST_DIR}/${script} ${T_ARGS})
  if(NOT T_CASES)
    dsl_script_test(${name} LABEL ${T_LABEL} TIMEOUT 300 COMMAND ${cmd}
                    PROPERTIES SKIP_RETURN_CODE 77)
  endif()
  foreach(t ${T_CASES})
    dsl_script_test(${name}_${t} LABEL ${T_LABEL} TIMEOUT 300 COMMAND ${cmd} ${t}
                    PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

# Multi-rank runs of the real dstrain driven by ranks.sh (ranks started by hand with the
# env contract, so they do not depend on the launcher). Label: flow.
if(TARGET dstrain)
  dsl_train_script(train_ranks ranks.sh ARGS $<TARGET_FILE:dstrain>
                   CASES cli names stages worlds memory accum batch killed resume consolidate
                         signal fmnist fp16 half)
endif()
# dstrain under dslaunch --max-restarts: killed once, restarted, resumed, bit for bit.
if(TARGET dstrain AND TARGET dslaunch)
  dsl_train_script(train_restart restart.sh
                   ARGS $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>)
endif()
# The store against strangers and the master port against a second job (store.sh).
if(TARGET dstrain AND TARGET dslaunch)
  dsl_train_script(train_store store.sh ARGS $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>
                   CASES pairs given handoff flood ulimit token loopback)
  # pairs holds the default master port 29500, as one case of flow_launch does
  set_tests_properties(train_store_pairs PROPERTIES RUN_SERIAL TRUE)
endif()
# The GPT with the MLP's guarantees (gpt.sh): training under dslaunch, determinism
# across worlds, stages and threads, resume and reshard, GPT-2's tensor names, and
# (skipped without python3-torch) the forward against PyTorch; inputs: a new user's
# edge cases (resumes, shapes, prompts, names, killed runs), a second or two; zero3*:
# ZeRO stage 3's bits, memory and checkpoints.
if(TARGET dstrain AND TARGET dslaunch)
  dsl_train_script(train_gpt gpt.sh ARGS $<TARGET_FILE:dslaunch> $<TARGET_FILE:dstrain>
                   CASES launch worlds resume torch inputs monitors zero3 zero3mem zero3ck)
endif()
# GPT-2 BPE (bpe.sh): tokenize against GPT-2's encoder.py (skipped without
# python3-regex), and training and sampling on BPE shards.
if(TARGET dstrain)
  dsl_train_script(train_bpe bpe.sh ARGS $<TARGET_FILE:dstrain> CASES reference train)
endif()
# One binary for CPU and GPU nodes (nogpu.sh): no NEEDED entry for the GPU's libraries,
# tcp and auto train with them out of reach, nccl says which are missing (exit 3).
if(TARGET dstrain AND TARGET dsbench)
  dsl_train_script(train_nogpu nogpu.sh ARGS $<TARGET_FILE:dstrain> $<TARGET_FILE:dsbench>)
endif()
# The GPT on the GPU (gpt_gpu.sh, label gpu): dstrain --backend nccl at world 1 in fp32
# and bf16 against the CPU run, loss falling, two runs bit-identical; skips without a GPU.
if(TARGET dstrain AND DSL_HAVE_CUDA)
  dsl_train_script(train_gpt_gpu gpt_gpu.sh LABEL gpu ARGS $<TARGET_FILE:dstrain>)
endif()
# The determinism cases again under every OpenBLAS kernel family the CPU runs (worlds,
# stages, accumulation, resume, 16-bit parameters, a restart, the GPT's worlds, resume
# and stage 3): the same bits must not depend on which kernels OpenBLAS picked.
if(TARGET dstrain AND TARGET dslaunch)
  foreach(t stages worlds accum resume half)
    dsl_blas_variants(train_ranks_${t} LABELS flow
                      COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ranks.sh $<TARGET_FILE:dstrain> ${t})
  endforeach()
  foreach(t worlds resume zero3 zero3ck)
    dsl_blas_variants(train_gpt_${t} LABELS flow
                      COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/gpt.sh $<TARGET_FILE:dslaunch>
                              $<TARGET_FILE:dstrain> ${t})
  endforeach()
  dsl_blas_variants(train_restart LABELS flow
                    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/restart.sh $<TARGET_FILE:dslaunch>
                            $<TARGET_FILE:dstrain>)
endif()
