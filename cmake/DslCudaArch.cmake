# Which GPU architectures nvcc builds for (docs/trainer.md, "GPU"):
#   1. an explicit -DCMAKE_CUDA_ARCHITECTURES=... (or the CUDAARCHS environment variable,
#      which CMake reads the same way) is used exactly as given;
#   2. otherwise, when the configuring machine has a GPU (nvidia-smi lists one), "native":
#      the architectures of the GPUs that are present;
#   3. otherwise DSL_CUDA_DEFAULT_ARCHS: every architecture CUDA 12 and 13 both build
#      for, as real code, plus PTX of the newest for GPUs after it.
# The choice is a pure function (dsl_cuda_choose_archs) so that tests/cmake/
# test_cuda_arch.cmake can check it with cmake -P on a machine without a GPU.

set(DSL_CUDA_DEFAULT_ARCHS "75-real;80-real;86-real;89-real;90-real;90-virtual")

# out: the variable to set; explicit: the user's value ("" if none); gpu_caps: what
# `nvidia-smi --query-gpu=compute_cap --format=csv,noheader` printed ("" if nothing).
function(dsl_cuda_choose_archs out explicit gpu_caps)
  if(NOT "${explicit}" STREQUAL "")
    set(${out} "${explicit}" PARENT_SCOPE)
  elseif(gpu_caps MATCHES "[0-9]+\\.[0-9]+")
    set(${out} "native" PARENT_SCOPE)
  else()
    set(${out} "${DSL_CUDA_DEFAULT_ARCHS}" PARENT_SCOPE)
  endif()
endfunction()

# The compute capabilities of this machine's GPUs, "" without a driver or a GPU.
function(dsl_cuda_probe_gpus out)
  set(caps "")
  find_program(DSL_NVIDIA_SMI nvidia-smi)
  if(DSL_NVIDIA_SMI)
    execute_process(COMMAND ${DSL_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    RESULT_VARIABLE rc OUTPUT_VARIABLE caps ERROR_QUIET TIMEOUT 20)
    if(NOT rc EQUAL 0)
      set(caps "")
    endif()
  endif()
  set(${out} "${caps}" PARENT_SCOPE)
endfunction()
