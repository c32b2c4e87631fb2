// The watchdog's side channel: when a wait times out, the rank asks every other rank, over a
// private duplicate of MPI_COMM_WORLD, whether it is alive and what it is waiting for. Ranks
// answer from their own wait loops, so within a short grace period the asker knows which ranks
// are stuck in communication (and where) and which did not answer at all: stalled in compute,
// hung, or dead. That turns "allreduce did not complete" into "rank 3 is late".
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace feast::watchdog {

// Collective over MPI_COMM_WORLD (make_mpi_world calls it once); until then, and on threads
// other than the one that called it, the functions below do nothing.
void start();

// Answers the ranks that asked since the last call; `waiting_on` says what this rank waits for.
void serve(const std::string& waiting_on);

// After this rank's wait on `group_world_ranks` (world ranks of the group) timed out: asks
// everyone, collects answers for `grace`, and returns a sentence naming the ranks of the group
// that did not answer and what the answering ones wait for ("" when it learned nothing).
std::string survey(const std::vector<int>& group_world_ranks, const std::string& waiting_on,
                   std::chrono::milliseconds grace);

// How long a wait that timed out after `timeout` asks the others: a quarter of it, within 0.2 s
// and 5 s.
inline std::chrono::milliseconds grace_for(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(200), std::chrono::milliseconds(5000));
}

// World ranks of the members of `comm`, in its rank order.
std::vector<int> world_ranks_of(MPI_Comm comm);

}  // namespace feast::watchdog
