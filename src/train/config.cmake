# Configuration and the pure training arithmetic (issue 6): ds_config.json (the only
# user of cJSON), learning-rate schedules, the fp16 loss scaler and checkpoints
# (safetensors, crc32 from zlib). Library dslconfig.
add_library(dslconfig STATIC
  ${CMAKE_CURRENT_LIST_DIR}/config.c
  ${CMAKE_CURRENT_LIST_DIR}/scheduler.c
  ${CMAKE_CURRENT_LIST_DIR}/lossscale.c
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.c
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint.c)
target_link_libraries(dslconfig PUBLIC dslcommon PRIVATE PkgConfig::CJSON PkgConfig::ZLIB m)
target_compile_options(dslconfig PRIVATE ${DSL_SRC_WARNINGS})
