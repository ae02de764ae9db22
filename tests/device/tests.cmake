# dsldevice: the CPU thread pool and the CPU device's ops on it (test_train_cpupool), the
# BLAS check (test_train_blascore), the products the CPU models share (test_model_cpugemm),
# the optimizer update (test_device_optimizer) and the checked GEMM dimensions
# (test_device_gemm_dims). The CTest names of the first three keep the prefixes of the
# folders they lived in.
dsl_unit_tests(LIBS dsldevice TESTS
  test_train_cpupool test_cpupool.c
  test_train_blascore test_blascore.c
  test_device_optimizer test_optimizer.c
  test_device_gemm_dims test_gemm_dims.c
  # the products the CPU models share (cpugemm.h): bf16 against a reference, any cut
  test_model_cpugemm test_cpugemm.c)
# The bit-identity guarantees under every OpenBLAS kernel family the CPU runs.
dsl_blas_variants(test_model_cpugemm LABELS unit COMMAND $<TARGET_FILE:test_model_cpugemm>)
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
