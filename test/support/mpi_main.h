// For MPI tests (linked with test/support/mpi_main.cpp): this process's world rank and the
// job's size, and a temporary folder every rank shares.
#pragma once

#include <string>

#include "test/support/temp_dir.h"

namespace gridnn::test {
int world_rank();
int world_size();
// One folder for the whole job (every rank calls it: it broadcasts): rank 0 makes it
// (TempDir(what)) and removes it when its TempDir goes, the other ranks borrow its path.
// Keep the ranks apart from it until rank 0 has written what they read (a barrier), and
// rank 0's TempDir alive until they are done with it.
TempDir shared_temp_dir(const std::string& what);
}  // namespace gridnn::test
