# Layers: each against double-precision loops and central differences (label unit), and
# on cuda:0 against the CPU backend (label gpu: skipped without a device).
gridnn_add_test(test_layers_module LABEL unit SOURCES layers/test_module.cpp)
gridnn_add_test(test_layers_conv3d LABEL unit SOURCES layers/test_conv3d.cpp)
gridnn_add_test(test_pool3d LABEL unit SOURCES layers/test_pool3d.cpp)
gridnn_add_test(test_batchnorm3d LABEL unit SOURCES layers/test_batchnorm3d.cpp)
gridnn_add_test(test_layers_attention LABEL unit SOURCES layers/test_attention.cpp)
gridnn_add_test(test_layers_linear_loss LABEL unit SOURCES layers/test_linear_loss.cpp)
gridnn_add_test(test_layers_dropout LABEL unit SOURCES layers/test_dropout.cpp)
gridnn_add_test(test_gpu_conv3d LABEL gpu SOURCES gpu/test_gpu_conv3d.cpp)
gridnn_add_test(test_gpu_pool_norm LABEL gpu SOURCES gpu/test_gpu_pool_norm.cpp)
gridnn_add_test(test_gpu_softmax_attention LABEL gpu SOURCES gpu/test_gpu_softmax_attention.cpp)
gridnn_add_test(test_layers_parity LABEL unit SOURCES layers/test_parity.cpp)
gridnn_add_test(test_layers_precision LABEL unit SOURCES layers/test_precision.cpp)
