# Domain parallelism (DESIGN §4): the depth split's halo exchange, DistConv3d and the
# distributed poolings against the single-process layers, at 1, 2 and 4 ranks.
gridnn_add_mpi_test(test_dist_domain SOURCES dist/test_domain.cpp NP 1 2 4)
