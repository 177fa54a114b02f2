gridnn_add_test(test_kernels LABEL unit SOURCES
  kernels/test_elementwise.cpp
  kernels/test_reduce.cpp
  kernels/test_gemm.cpp
  kernels/test_random.cpp
  kernels/test_grad_check.cpp)
gridnn_add_test(test_kernel_sweeps LABEL slow SOURCES kernels/test_sweep.cpp)
