// The host threads' loop for work that is not OpenMP's (reading files, tokenizing documents):
// items claimed in order from a shared counter by a pool of std::threads.
#pragma once

#include <cstddef>
#include <functional>

namespace feast {

// Runs work(i) for every i in [0, n) on up to `threads` threads (0: one per core). While they
// run, the calling thread runs `tick` (when given) five times a second: a progress display. The
// first exception any item throws stops the others from starting new items and is rethrown once
// every thread has stopped.
void parallel_for(size_t n, int threads, const std::function<void(size_t)>& work,
                  const std::function<void()>& tick = {});

}  // namespace feast
