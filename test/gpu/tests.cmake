# GPU tests (label gpu): every op on cuda:0 against the CPU backend, device memory, the
# caching allocator, streams and events. Always built, also without CUDA: each test skips
# itself when no CUDA device is usable, so a CPU machine reports them as skipped.
gridnn_add_test(test_gpu_ops LABEL gpu SOURCES gpu/test_gpu_ops.cpp)
gridnn_add_test(test_gpu_core LABEL gpu SOURCES gpu/test_gpu_core.cpp)
gridnn_add_test(test_gpu_precision LABEL gpu SOURCES gpu/test_gpu_precision.cpp)
gridnn_add_test(test_gpu_nccl LABEL gpu SOURCES gpu/test_gpu_nccl.cpp)
