gridnn_add_test(test_core LABEL unit SOURCES
  core/test_shape.cpp
  core/test_tensor.cpp
  core/test_half.cpp
  core/test_philox.cpp
  core/test_errors.cpp)
gridnn_add_test(test_safetensors LABEL unit SOURCES core/test_safetensors.cpp)
gridnn_add_test(test_backend_checks LABEL unit SOURCES core/test_backend_checks.cpp)
