# Layer sources, one fragment per area.
foreach(area conv3d pool_norm softmax_attention)
  include(${CMAKE_CURRENT_LIST_DIR}/${area}.cmake OPTIONAL)
endforeach()
