gridnn_add_test(test_layers_module LABEL unit SOURCES layers/test_module.cpp)
foreach(area conv3d pool_norm softmax_attention)
  include(${CMAKE_CURRENT_LIST_DIR}/${area}.cmake OPTIONAL)
endforeach()
