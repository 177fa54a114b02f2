# Distributed layers (DESIGN §4): on the Communicator interface only, so they build with
# or without MPI.
target_sources(gridnn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/batchnorm3d.cpp
  ${CMAKE_CURRENT_LIST_DIR}/global_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear.cpp)
