add_library(dsllaunch STATIC
  ${CMAKE_CURRENT_LIST_DIR}/hostfile.c
  ${CMAKE_CURRENT_LIST_DIR}/placement.c)
target_link_libraries(dsllaunch PUBLIC dslcommon)
target_compile_options(dsllaunch PRIVATE ${DSL_SRC_WARNINGS})
