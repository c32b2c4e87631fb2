// All-reduce written in feast over a Communicator's send and recv, to set the textbook's
// algorithms beside the library's in `trainer bench comm`: a ring (reduce-scatter then
// all-gather, bandwidth-optimal) and a parameter server (every worker's data through one rank).
// Training uses the library's allreduce; these exist to be measured and predicted.
#pragma once

#include <cstddef>

#include "comm/communicator.h"

namespace feast {

// In place: data (count floats) becomes the sum over the group. The data is cut into size()
// chunks (the first count % size() one element longer); in 2(N-1) steps each rank sends one
// chunk to the next rank and receives one from the previous: N-1 steps add the received chunk
// into its own (reduce-scatter), N-1 more pass the finished chunks on (all-gather). Every rank
// sends and receives 2(N-1)/N of the data, so with latency a and seconds per byte b of a link,
// T = 2(N-1)·a + 2(N-1)/N·P·b for P bytes. A group of one returns at once.
void ring_allreduce(Communicator& group, float* data, size_t count);

// In place: data becomes the sum over the group, through rank `server`: every other rank sends
// its data to the server, which adds them in rank order (the "update" is the identity here) and
// sends the sum back to each. The server's link carries N-1 messages of P bytes in and N-1 out,
// one after the other, so T = 2(N-1)·(a + P·b): N times the ring's bandwidth term, the reason
// parameter servers shard their state.
void parameter_server_allreduce(Communicator& group, float* data, size_t count, int server = 0);

}  // namespace feast
