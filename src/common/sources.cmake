add_library(dslcommon STATIC
  ${CMAKE_CURRENT_LIST_DIR}/error.c
  ${CMAKE_CURRENT_LIST_DIR}/xalloc.c
  ${CMAKE_CURRENT_LIST_DIR}/strvec.c
  ${CMAKE_CURRENT_LIST_DIR}/dynbuf.c
  ${CMAKE_CURRENT_LIST_DIR}/parse.c
  ${CMAKE_CURRENT_LIST_DIR}/log.c
  ${CMAKE_CURRENT_LIST_DIR}/net.c
  ${CMAKE_CURRENT_LIST_DIR}/sha256.c)
target_link_libraries(dslcommon PUBLIC dsl_flags m)
target_compile_options(dslcommon PRIVATE ${DSL_SRC_WARNINGS})
