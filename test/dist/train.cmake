# Grid invariance of training (DESIGN §4): a ResAttNet3D step, three trainer steps, and a
# run resumed on another grid, on every factorization of the job's size, against the
# single-process run; two runs on one grid bitwise equal.
gridnn_add_mpi_test(test_dist_train SOURCES dist/test_dist_train.cpp NP 1 2 4 TIMEOUT 600)
# Gradient all-reduce overlapping backward: bitwise the blocking one, every bucket started
# during backward; the non-blocking all-reduce bitwise the blocking one.
gridnn_add_mpi_test(test_grad_overlap SOURCES dist/test_grad_overlap.cpp NP 1 2 4 TIMEOUT 300)
# The cost model's words for gridnn's own distribution (plan::gridnn_calls) equal the words the
# communicators count in a step, rank by rank, on 1 x P, P x 1 and 2 x 2.
gridnn_add_mpi_test(test_dist_words SOURCES dist/test_words.cpp NP 2 4)
