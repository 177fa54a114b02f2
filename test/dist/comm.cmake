# The MPI communicator and the process grid (label mpi), at 1, 2 and 4 ranks. Small sizes:
# 4 ranks share 2 cores (DESIGN §11).
gridnn_add_mpi_test(test_dist_comm SOURCES dist/test_comm.cpp NP 1 2 4 TIMEOUT 120)
gridnn_add_mpi_test(test_dist_grid SOURCES dist/test_grid.cpp NP 1 2 4 TIMEOUT 120)
