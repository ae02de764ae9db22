# dslmodel: the MLP and its data (test_train_model; the CTest name keeps its test_train_
# prefix from when it lived with the trainer).
dsl_unit_test(test_train_model SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model.c LIBS dslmodel)
# The idx reader (Fashion-MNIST's format) on arbitrary files, plain and gzip.
dsl_fuzz_target(fuzz_idx SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_idx.c LIBS dslmodel)
# The GPT: gradient check, determinism over segments and threads, names, overfitting.
dsl_unit_test(test_model_gpt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt.c LIBS dslmodel)
# The GPT's data: llm.c token shards, text files, windows.
dsl_unit_test(test_model_tokens SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokens.c LIBS dslmodel)
# llm.c's token shard header and reader on arbitrary files.
dsl_fuzz_target(fuzz_tokens SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tokens.c LIBS dslmodel)
# The bit-identity guarantees under every OpenBLAS kernel family the CPU runs.
foreach(t test_train_model test_model_gpt)
  dsl_blas_variants(${t} LABELS unit COMMAND $<TARGET_FILE:${t}>)
endforeach()
