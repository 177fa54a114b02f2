# Domain parallelism (DESIGN §4): the depth split's halo exchange and the layers on it.
# halo.cpp uses only the Communicator interface, so these build without MPI too.
target_sources(gridnn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/../../parallel/halo.cpp
  ${CMAKE_CURRENT_LIST_DIR}/conv3d.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pool3d.cpp)
