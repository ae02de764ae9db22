# Config semantics, LR schedules, loss scaling and checkpoints (issue 6, dsltrain).
dsl_unit_test(test_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config.c LIBS dsltrain)
target_compile_definitions(test_config PRIVATE
  DSL_CONFIGS_DIR="${PROJECT_SOURCE_DIR}/configs")
dsl_unit_test(test_sched SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sched.c LIBS dsltrain m)
dsl_unit_test(test_checkpoint SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_checkpoint.c
              LIBS dsltrain)

dsl_fuzz_target(fuzz_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_config.c LIBS dsltrain)
dsl_fuzz_target(fuzz_safetensors SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_safetensors.c
                LIBS dsltrain)
