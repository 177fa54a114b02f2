# Optimizers and learning-rate schedules: against double-precision reference loops, closed
# forms and PyTorch fixtures (label unit); the CUDA update against the CPU one (label gpu:
# skipped without a device).
gridnn_add_test(test_optim LABEL unit SOURCES optim/test_optim.cpp)
gridnn_add_test(test_gpu_optim LABEL gpu SOURCES gpu/test_gpu_optim.cpp)
