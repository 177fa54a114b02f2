# The training loop, checkpoints, metrics and progress output.
target_sources(gridnn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/whole_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/progress.cpp
  ${CMAKE_CURRENT_LIST_DIR}/datasets.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gradient_sync.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grid_batch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grid_choice.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_on_grid.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pipeline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stage_placement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer.cpp)
