# GABRA against round-robin, greedy and exhaustive placement on simulated heterogeneous
# clusters (plain main; DESIGN §7, issue 7).
add_executable(bench_placement bench_placement.cpp)
target_link_libraries(bench_placement PRIVATE gridnn gridnn_warnings)
