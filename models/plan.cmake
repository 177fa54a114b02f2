# gridnn-plan: the α–β cost model's grid planner (DESIGN §6). The model itself
# (parallel/cost_model.cpp) is pure computation and goes into the library.
target_sources(gridnn PRIVATE ${PROJECT_SOURCE_DIR}/parallel/cost_model.cpp)

add_executable(gridnn-plan gridnn_plan.cpp)
target_link_libraries(gridnn-plan PRIVATE gridnn CLI11::CLI11 gridnn_warnings)

# Pipeline placement (GABRA, DESIGN §7) and the cost model's calibration: each in its own file.
include(${CMAKE_CURRENT_LIST_DIR}/place.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/calibrate.cmake OPTIONAL)
