# Multi-rank runs of the real dstrain driven by ranks.sh (ranks started by hand with the
# env contract, so they do not depend on the launcher). Label: flow.
if(TARGET dstrain)
  foreach(t cli names stages worlds memory accum batch killed resume consolidate signal fmnist fp16 half)
    dsl_script_test(train_ranks_${t} LABEL flow TIMEOUT 300
                    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ranks.sh $<TARGET_FILE:dstrain>
                            ${t}
                    PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()
# dstrain under dslaunch --max-restarts: killed once, restarted, resumed, bit for bit.
if(TARGET dstrain AND TARGET dslaunch)
  dsl_script_test(train_restart LABEL flow TIMEOUT 300
                  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/restart.sh $<TARGET_FILE:dslaunch>
                          $<TARGET_FILE:dstrain>
                  PROPERTIES SKIP_RETURN_CODE 77)
endif()
# The store against strangers and the master port against a second job (store.sh).
if(TARGET dstrain AND TARGET dslaunch)
  foreach(t pairs given handoff flood ulimit token loopback)
    dsl_script_test(train_store_${t} LABEL flow TIMEOUT 300
                    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/store.sh $<TARGET_FILE:dslaunch>
                            $<TARGET_FILE:dstrain> ${t}
                    PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
  # pairs holds the default master port 29500, as one case of flow_launch does
  set_tests_properties(train_store_pairs PROPERTIES RUN_SERIAL TRUE)
endif()
# The GPT with the MLP's guarantees (gpt.sh): training under dslaunch, determinism
# across worlds, stages and threads, resume and reshard, GPT-2's tensor names, and
# (skipped without python3-torch) the forward against PyTorch; inputs: a new user's
# edge cases (resumes, shapes, prompts, names, killed runs), a second or two; zero3*:
# ZeRO stage 3's bits, memory and checkpoints.
if(TARGET dstrain AND TARGET dslaunch)
  foreach(t launch worlds resume torch inputs monitors zero3 zero3mem zero3ck)
    dsl_script_test(train_gpt_${t} LABEL flow TIMEOUT 300
                    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/gpt.sh $<TARGET_FILE:dslaunch>
                            $<TARGET_FILE:dstrain> ${t}
                    PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()
# GPT-2 BPE (bpe.sh): tokenize against GPT-2's encoder.py (skipped without
# python3-regex), and training and sampling on BPE shards.
if(TARGET dstrain)
  foreach(t reference train)
    dsl_script_test(train_bpe_${t} LABEL flow TIMEOUT 300
                    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/bpe.sh $<TARGET_FILE:dstrain> ${t}
                    PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()
# One binary for CPU and GPU nodes (nogpu.sh): no NEEDED entry for the GPU's libraries,
# tcp and auto train with them out of reach, nccl says which are missing (exit 3).
if(TARGET dstrain AND TARGET dsbench)
  dsl_script_test(train_nogpu LABEL flow TIMEOUT 300
                  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/nogpu.sh $<TARGET_FILE:dstrain>
                          $<TARGET_FILE:dsbench>
                  PROPERTIES SKIP_RETURN_CODE 77)
endif()
# The GPT on the GPU (gpt_gpu.sh, label gpu): dstrain --backend nccl at world 1 in fp32
# and bf16 against the CPU run, loss falling, two runs bit-identical; skips without a GPU.
if(TARGET dstrain AND DSL_HAVE_CUDA)
  dsl_script_test(train_gpt_gpu LABEL gpu TIMEOUT 300
                  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/gpt_gpu.sh $<TARGET_FILE:dstrain>
                  PROPERTIES SKIP_RETURN_CODE 77)
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
