// The NCCL implementation of Communicator, for GPU buffers. It decorates the group's host
// communicator (MPI): NCCL's unique id travels over it, host buffers (losses, norms, host names)
// still go through it, and device buffers go through NCCL on a communication stream of its own,
// ordered after the work queued on the compute stream (an event), so a reduction starts while
// later compute is still queued. wait() polls the operation's completion under the deadline and
// NCCL's asynchronous error: a failed or stuck operation aborts the NCCL communicator
// (ncclCommAbort) and throws naming the operation and the group (CommTimeout for the deadline),
// never hangs. After wait() the compute stream is ordered after the operation. The communicator
// is non-blocking (ncclConfig_t::blocking = 0), so its initialisation and each call's launch
// (with the peer connections NCCL makes on first use) are waited for under the same deadline.
// It runs one all-reduce of a single value when made.
//
// Point-to-point: NCCL pairs a rank's sends to a peer with the peer's receives in the order they
// are posted, without tags, and runs a communicator's operations one after another on its
// stream, a send waiting for its receive. So a pipeline stage that sends and receives at once
// uses sendrecv (one NCCL group), as the schedule says (Action::with_next).
//
// Built only with FEAST_WITH_NCCL; NCCL itself is loaded at run time (comm/nccl_library.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace feast {

// Whether NCCL can be used in this build on this machine; the reason when not.
bool nccl_available(std::string* why);

// Whether NCCL_COMM_BLOCKING (NCCL's own override) makes the communicators' calls block, which
// takes the deadline off the peer connections NCCL makes on first use.
bool nccl_calls_forced_blocking();


// Collective over `host` (every rank of the group calls it): wraps it in a NCCL communicator of
// the same ranks, on the current CUDA device. compute_stream: the cudaStream_t whose queued work
// an operation's inputs come from. timeout: the deadline of the initialisation, of each call's
// launch and of a wait() that sets none.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, void* compute_stream,
                                                     std::chrono::milliseconds timeout);

}  // namespace feast
