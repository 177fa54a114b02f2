// For MPI tests (linked with test/support/mpi_main.cpp): this process's world rank and the
// job's size.
#pragma once

namespace gridnn::test {
int world_rank();
int world_size();
}  // namespace gridnn::test
