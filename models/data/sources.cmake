# NIfTI volumes listed in a CSV manifest (included by models/CMakeLists.txt).
target_sources(gridnn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/nifti_volume.cpp
  ${CMAKE_CURRENT_LIST_DIR}/manifest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/volume_transforms.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nifti_dataset.cpp)
