# dsltrain: config semantics, LR schedules, loss scaling, checkpoints and safetensors,
# the trainer's step (fp32 and mixed precision). The multi-rank runs of the real dstrain
# are tests/e2e/train.
# ds_config.json by theme: the batch, the keys and their messages, the sections
dsl_unit_tests(LIBS dsltrain TESTS test_config_batch test_config_batch.c
               test_config_keys test_config_keys.c test_config_sections test_config_sections.c)
target_compile_definitions(test_config_keys PRIVATE
  DSL_CONFIGS_DIR="${PROJECT_SOURCE_DIR}/configs")
# the key table as docs/config.md's key tables (dstrain keys)
dsl_unit_test(test_config_doc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config_doc.c LIBS dsltrain)
# dstrain's flags reach the settings as typed (paths byte for byte)
# ZeRO-Offload's keys (test_offload): read, checked against the stage, a no-op on the
# CPU, refused on the GPU
dsl_unit_tests(LIBS dsltrain TESTS test_train_settings test_settings.c
  test_offload test_offload.c)
dsl_unit_test(test_sched SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sched.c LIBS dsltrain m)
dsl_unit_tests(LIBS dsltrain TESTS
  # checkpoints (ckpt_fixture.h): the round trip and failed saves, broken files,
  # integrity, ZeRO stage 3; the safetensors format on its own
  test_checkpoint test_checkpoint.c
  test_ckpt_corrupt test_ckpt_corrupt.c
  test_ckpt_integrity test_ckpt_integrity.c
  test_ckpt_zero3 test_ckpt_zero3.c
  test_safetensors test_safetensors.c
  # the trainer's step, loss scaling, mixed precision
  test_train_trainer test_trainer.c
  test_train_lossscale test_lossscale_step.c
  test_train_halfprec test_halfprec.c)
dsl_fuzz_target(fuzz_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_config.c LIBS dsltrain)
dsl_fuzz_target(fuzz_safetensors SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_safetensors.c
                LIBS dsltrain)
if(DSL_HAVE_CUDA)
  dsl_unit_tests(GPU LIBS dsltrain TESTS
    # the GPU path against the CPU path
    test_gpu_trainer test_gpu_trainer.c
    # the CUDA GPT against the CPU GPT (fp32, bf16, fp16, determinism, trainer steps)
    test_gpu_gpt test_gpu_gpt.c
    # world 2 and 4 on one GPU (the cuda-tcp backend) against the CPU trainer at the
    # same world: buckets, ZeRO-1/2 shards, uneven and padded shards, overlap
    test_gpu_worlds test_gpu_worlds.c)
endif()
# GPT-2's BPE against the real encoder.json and vocab.bpe (tests/data/gpt2, gzip).
dsl_unit_test(test_bpe SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bpe.c LIBS dsltrain)
target_compile_definitions(test_bpe PRIVATE
  DSL_GPT2_DIR="${PROJECT_SOURCE_DIR}/tests/data/gpt2")
dsl_fuzz_target(fuzz_bpe_encode SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_bpe_encode.c
                LIBS dsltrain)
target_compile_definitions(fuzz_bpe_encode PRIVATE
  DSL_GPT2_DIR="${PROJECT_SOURCE_DIR}/tests/data/gpt2")
dsl_fuzz_target(fuzz_bpe_files SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_bpe_files.c
                LIBS dsltrain)
# dstrain's command line (parse only): flags as config overrides, then the settings
dsl_fuzz_target(fuzz_settings SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_settings.c LIBS dsltrain)
# a whole checkpoint directory as the resume reads it (latest, model file, shards)
dsl_fuzz_target(fuzz_ckpt SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_ckpt.c LIBS dsltrain)
# a ZeRO stage 3 checkpoint directory (per-rank parameter shards), loaded and streamed
dsl_fuzz_target(fuzz_ckpt_zero3 SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_ckpt_zero3.c
                LIBS dsltrain)
# a metrics file as `dstrain plot` reads and draws it
dsl_fuzz_target(fuzz_plot SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_plot.c LIBS dsltrain)
# The stages' bit-identity under every OpenBLAS kernel family the CPU runs.
dsl_blas_variants(test_train_trainer LABELS unit COMMAND $<TARGET_FILE:test_train_trainer>)
# Checkpoint integrity with the real dstrain at world 1 (ckpt_integrity.sh): files
# without checksums, non-finite values, sparse files, stale .partial directories, in
# resume, consolidate and sample; a second or two.
# docs/config.md's key tables and docs/trainer.md's flag table are what `dstrain keys`
# prints (scripts/gen-docs.py; `cmake --build build --target docs` rewrites them).
find_package(Python3 COMPONENTS Interpreter)
if(TARGET dstrain AND Python3_Interpreter_FOUND)
  add_test(NAME docs_should_match_the_key_and_flag_tables
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen-docs.py --check
                   $<TARGET_FILE:dstrain> ${PROJECT_SOURCE_DIR}/docs/config.md
                   ${PROJECT_SOURCE_DIR}/docs/trainer.md)
  set_tests_properties(docs_should_match_the_key_and_flag_tables PROPERTIES LABELS unit)
endif()
if(TARGET dstrain)
  dsl_script_test(train_ckpt_integrity LABEL flow TIMEOUT 120
                  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ckpt_integrity.sh
                          $<TARGET_FILE:dstrain>
                  PROPERTIES SKIP_RETURN_CODE 77)
endif()
