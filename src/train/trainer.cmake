# The trainer (issue 6): model, data, optimizer and the data-parallel loop (library
# dsltrain) and the dstrain executable, built beside dslaunch so that `train` resolves.
add_library(dsltrain STATIC
  ${CMAKE_CURRENT_LIST_DIR}/model_mlp.c
  ${CMAKE_CURRENT_LIST_DIR}/model_mlp_layout.c
  ${CMAKE_CURRENT_LIST_DIR}/data.c
  ${CMAKE_CURRENT_LIST_DIR}/optimizer.c
  ${CMAKE_CURRENT_LIST_DIR}/device_cpu.c
  ${CMAKE_CURRENT_LIST_DIR}/cpupool.c
  ${CMAKE_CURRENT_LIST_DIR}/trainer.c
  ${CMAKE_CURRENT_LIST_DIR}/trainer_setup.c
  ${CMAKE_CURRENT_LIST_DIR}/trainer_mixed.c
  ${CMAKE_CURRENT_LIST_DIR}/trainer_state.c
  ${CMAKE_CURRENT_LIST_DIR}/trainer_run.c
  ${CMAKE_CURRENT_LIST_DIR}/blascore.c)
# dslconfig: the fp16 loss scaler (lossscale.c) that the step runs
target_link_libraries(dsltrain PUBLIC dslcomm dslconfig dslcommon PkgConfig::OPENBLAS
                      PkgConfig::ZLIB m PRIVATE dsl_flags)
target_compile_options(dsltrain PRIVATE $<$<COMPILE_LANGUAGE:C>:${DSL_SRC_WARNINGS}>)
# The elementwise loops (Adam, ReLU, bias) need the vectorizer; it changes no result
# bits because they contain no reductions and C11 mode keeps -ffp-contract=off.
# (C only: nvcc takes neither flag.)
target_compile_options(dsltrain PRIVATE $<$<COMPILE_LANGUAGE:C>:$<$<NOT:$<CONFIG:Debug>>:-O3>>
                       $<$<COMPILE_LANGUAGE:C>:-fno-math-errno>)
# The GPU path (CUDA device, CUDA MLP): C files over the CUDA runtime and cuBLAS, and
# the kernels in .cu files (nvcc, CMAKE_CUDA_ARCHITECTURES from the top level). The
# kernels keep nvcc's IEEE defaults (no --use_fast_math): the CPU loops are their
# test oracles (house style 21).
if(DSL_HAVE_CUDA)
  target_sources(dsltrain PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/device_cuda.c
    ${CMAKE_CURRENT_LIST_DIR}/device_kernels.cu
    ${CMAKE_CURRENT_LIST_DIR}/model_mlp_cuda.c
    ${CMAKE_CURRENT_LIST_DIR}/model_mlp_kernels.cu)
  target_link_libraries(dsltrain PUBLIC CUDA::cublas CUDA::cudart)
  set(dsl_cuda_warn -Xcompiler=-Wall,-Wextra)
  if(DSL_WERROR)
    list(APPEND dsl_cuda_warn -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(dsltrain PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${dsl_cuda_warn}>")
endif()

# dstrain's settings and the bridge to the config module and checkpoints
add_library(dsltrainmain STATIC
  ${CMAKE_CURRENT_LIST_DIR}/trainer_settings.c
  ${CMAKE_CURRENT_LIST_DIR}/trainer_ckpt.c)
target_link_libraries(dsltrainmain PUBLIC dsltrain PRIVATE dsl_flags)
target_compile_options(dsltrainmain PRIVATE ${DSL_SRC_WARNINGS})
if(TARGET dslconfig)
  target_link_libraries(dsltrainmain PUBLIC dslconfig)
endif()

if(TARGET dslconfig AND EXISTS ${PROJECT_SOURCE_DIR}/launcher/dstrain.c)
  add_executable(dstrain ${PROJECT_SOURCE_DIR}/launcher/dstrain.c)
  target_link_libraries(dstrain PRIVATE dsltrainmain dsl_flags)
  set_target_properties(dstrain PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
