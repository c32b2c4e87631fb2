// Pipeline schedules as data (design invariant 3): the ordered actions one stage performs in
// one training step. One executor runs any schedule; the schedules are tested on their own.
// Legend: p stages, s this stage (0-based), m micro-batches.
#pragma once

#include <string>
#include <vector>

namespace feast {

enum class ScheduleKind { kOneFOneB, kGPipe };

// Parses "1f1b" or "gpipe"; throws ConfigError naming the value otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string to_string(ScheduleKind kind);

enum class ActionType {
  kRecvActivation,  // receive micro-batch k's input activation from stage s - 1
  kForward,         // forward of micro-batch k (keeps its activations until its backward)
  kSendActivation,  // send micro-batch k's output activation to stage s + 1
  kRecvGrad,        // receive the gradient of micro-batch k's output from stage s + 1
  kBackward,        // backward of micro-batch k (frees its activations)
  kSendGrad,        // send the gradient of micro-batch k's input to stage s - 1
};

struct Action {
  ActionType type;
  int micro_batch;
  // A send issued together with the receive that follows it, from the same neighbour: 1F1B's
  // steady state sends activation k while receiving gradient j, and sends gradient j while
  // receiving activation k + 1, and the neighbour pairs the same two transfers the other way
  // round. NCCL runs one group's transfers in order and a send waits for its receive, so issued
  // apart, two neighbours that both send first would wait for each other.
  bool with_next = false;
  bool operator==(const Action&) const = default;
};

// The actions of stage s. Receives and sends appear only where a neighbour exists (none before
// the first stage's forwards, none after the last stage's); each receive comes right before the
// compute that needs it and each send right after the compute that made it, which is
// deadlock-free when sends are non-blocking and receives blocking. 1F1B: min(p - s - 1, m) warm-up
// forwards, then one-forward-one-backward, then the cool-down backwards. GPipe: all forwards,
// then all backwards (in the same micro-batch order).
std::vector<Action> build_schedule(ScheduleKind kind, int stages, int stage, int micro_batches);

// The most micro-batches whose activations are held at once (forwarded, not yet backwarded).
int max_in_flight(const std::vector<Action>& actions);

// Idle fraction of the ideal timeline of all p stages running their schedules, forwards and
// backwards taking one time unit each and communication none, each action starting as soon as
// its dependencies allow: idle = 1 - busy / (p * makespan). For 1F1B and GPipe it equals
// (p - 1) / (m + p - 1).
double ideal_idle_fraction(ScheduleKind kind, int stages, int micro_batches);

}  // namespace feast
