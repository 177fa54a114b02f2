# Pipeline stages (DESIGN §7): with one micro-batch any Ps x Pr x Pc equals the 1x1 step
# (bitwise with one process per stage); micro-batches without batch norm too; placements from
# a file or GABRA; checkpoints resume across stage counts.
gridnn_add_mpi_test(test_pipeline SOURCES dist/test_pipeline.cpp NP 1 2 4 TIMEOUT 600)
