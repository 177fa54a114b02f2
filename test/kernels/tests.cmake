gridnn_add_test(test_kernels LABELS unit SOURCES
  kernels/test_elementwise.cpp
  kernels/test_reduce.cpp
  kernels/test_gemm.cpp
  kernels/test_random.cpp
  kernels/test_grad_check.cpp)
gridnn_add_test(test_kernel_sweeps LABELS unit slow SOURCES kernels/test_sweep.cpp)
