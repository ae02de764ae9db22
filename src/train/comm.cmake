# The rendezvous store and the collectives (issue 5): library dslcomm and dsbench.
add_library(dslcomm STATIC
  ${CMAKE_CURRENT_LIST_DIR}/store.c
  ${CMAKE_CURRENT_LIST_DIR}/store_server.c
  ${CMAKE_CURRENT_LIST_DIR}/comm.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_tcp.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_cma.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_shmbuf.c
  ${CMAKE_CURRENT_LIST_DIR}/halfconv.c)
target_link_libraries(dslcomm PUBLIC dslcommon Threads::Threads)
target_compile_options(dslcomm PRIVATE ${DSL_SRC_WARNINGS})
# The reductions (dsl_comm_combine) are elementwise loops whose operands may alias, so
# GCC vectorizes them only at -O3 (versioned for aliasing); -O2's cheap cost model leaves
# them scalar. No result bit changes: each element is one addition either way (for
# fp16/bf16 one widened addition and one rounding, halfvec.h).
target_compile_options(dslcomm PRIVATE $<$<NOT:$<CONFIG:Debug>>:-O3> -fno-math-errno)
if(DSL_HAVE_CUDA)
  target_sources(dslcomm PRIVATE ${CMAKE_CURRENT_LIST_DIR}/comm_nccl.c)
  target_include_directories(dslcomm PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(dslcomm PUBLIC CUDA::cudart ${NCCL_LIBRARY})
endif()

if(EXISTS ${PROJECT_SOURCE_DIR}/launcher/dsbench.c)
  add_executable(dsbench ${PROJECT_SOURCE_DIR}/launcher/dsbench.c)
  target_link_libraries(dsbench PRIVATE dslcomm dsl_flags)
  set_target_properties(dsbench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(DSL_HAVE_CUDA)
    target_link_libraries(dsbench PRIVATE CUDA::cudart)
  endif()
endif()
