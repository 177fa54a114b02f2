# Single-process checks of the grid and communicator code (label unit; MPI or not).
gridnn_add_test(test_dist_unit LABEL unit SOURCES dist/test_grid_unit.cpp)
