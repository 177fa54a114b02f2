# gridnn-plan: the α–β cost model's grid planner (DESIGN §6). The model itself
# (parallel/cost_model.cpp) is pure computation and goes into the library.
target_sources(gridnn PRIVATE ${PROJECT_SOURCE_DIR}/parallel/cost_model.cpp)

add_executable(gridnn-plan gridnn_plan.cpp)
target_link_libraries(gridnn-plan PRIVATE gridnn CLI11::CLI11 gridnn_warnings)
