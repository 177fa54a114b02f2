# gridnn-place: pipeline placement by GABRA and its baselines (DESIGN §7, docs/placement.md).
# The simulator, the JSON files and the searches are pure computation and go into the library
# (gridnn-train --placement uses them too).
target_sources(gridnn PRIVATE ${PROJECT_SOURCE_DIR}/parallel/placement.cpp
                              ${PROJECT_SOURCE_DIR}/parallel/gabra.cpp)

add_executable(gridnn-place gridnn_place.cpp)
target_link_libraries(gridnn-place PRIVATE gridnn CLI11::CLI11 gridnn_warnings)
