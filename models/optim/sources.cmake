# Optimizers (SGD, Adam, AdamW) and learning-rate schedules (included by models/CMakeLists.txt).
target_sources(gridnn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/param_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sgd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/adam.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule.cpp)
