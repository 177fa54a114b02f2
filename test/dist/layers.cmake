# The distributed layers (models/dist: attention, synchronized batch norm, global pooling,
# 1.5D linear) against the single-process layers on the grids of 1, 2 and 4 ranks.
gridnn_add_mpi_test(test_dist_layers SOURCES dist/test_dist_layers.cpp NP 1 2 4)
