# dslmodel: the MLP, its data and optimizer (test_train_model), the CPU thread pool and
# the CPU device's ops on it (test_train_cpupool), the BLAS check (test_train_blascore).
# The CTest names keep their test_train_ prefix from when they lived with the trainer.
dsl_unit_test(test_train_model SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model.c LIBS dslmodel)
dsl_unit_test(test_train_cpupool SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpupool.c
              LIBS dslmodel)
dsl_unit_test(test_train_blascore SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_blascore.c
              LIBS dslmodel)
# The idx reader (Fashion-MNIST's format) on arbitrary files, plain and gzip.
dsl_fuzz_target(fuzz_idx SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_idx.c LIBS dslmodel)
# The GPT: gradient check, determinism over segments and threads, names, overfitting.
dsl_unit_test(test_model_gpt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt.c LIBS dslmodel)
# The GPT's data: llm.c token shards, text files, windows.
dsl_unit_test(test_model_tokens SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokens.c LIBS dslmodel)
# llm.c's token shard header and reader on arbitrary files.
dsl_fuzz_target(fuzz_tokens SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tokens.c LIBS dslmodel)
# The products the CPU models share (cpugemm.h): bf16 against a reference, any cut.
dsl_unit_test(test_model_cpugemm SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpugemm.c LIBS dslmodel)
# The bit-identity guarantees under every OpenBLAS kernel family the CPU runs.
foreach(t test_train_model test_model_gpt test_model_cpugemm)
  dsl_blas_variants(${t} LABELS unit COMMAND $<TARGET_FILE:${t}>)
endforeach()
# The bf16 products' guarantees under each oneDNN kernel family that has them
# (ONEDNN_MAX_CPU_ISA caps what oneDNN dispatches to; on a CPU without bf16 the test
# says that the path is refused, as the plain run does).
if(DSL_HAVE_DNNL)
  foreach(isa AVX512_CORE_BF16 AVX512_CORE_AMX)
    add_test(NAME test_model_cpugemm@onednn-${isa} COMMAND test_model_cpugemm bf16)
    set_tests_properties(test_model_cpugemm@onednn-${isa} PROPERTIES
                         LABELS "unit;blascore" TIMEOUT 300
                         ENVIRONMENT ONEDNN_MAX_CPU_ISA=${isa})
  endforeach()
endif()
