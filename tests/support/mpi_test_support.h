// Helpers for GoogleTest binaries that run under mpirun.
#pragma once

#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/prepare.h"

namespace feast::testing {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A fresh temporary directory that every rank agrees on, holding the synthetic corpus rank 0
// prepared in it (train_*.bin, val_*.bin). Collective.
inline std::string make_shared_corpus(const std::string& prefix) {
  char path[256] = {};
  if (world_rank() == 0) {
    std::snprintf(path, sizeof path, "%s",
                  (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).c_str());
    if (!mkdtemp(path)) std::abort();
    PrepareOptions o;
    o.out_dir = path;
    prepare_synthetic(60'000, 3, o);
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

}  // namespace feast::testing
