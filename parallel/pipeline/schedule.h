// Pipeline schedules as data (design invariant 3): the ordered actions one stage performs in
// one training step. One executor runs any schedule; the schedules are tested on their own.
// Legend: p stages, s this stage (0-based), m micro-batches.
#pragma once

#include <string>
#include <vector>

namespace feast {

// kZeroBubble: ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B's forwards,
// input-gradient backwards and transfers, in 1F1B's order, with each backward's weight-gradient
// half (W) split off and deferred into the time a stage would otherwise wait, at most p
// micro-batches held (1F1B's peak, the first stage's) on every stage.
enum class ScheduleKind { kOneFOneB, kGPipe, kZeroBubble };

// Parses "1f1b", "gpipe" or "zero-bubble"; throws ConfigError naming the value otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string to_string(ScheduleKind kind);

enum class ActionType {
  kRecvActivation,  // receive micro-batch k's input activation from stage s - 1
  kForward,         // forward of micro-batch k (keeps its activations until its backward)
  kSendActivation,  // send micro-batch k's output activation to stage s + 1
  kRecvGrad,        // receive the gradient of micro-batch k's output from stage s + 1
  kBackward,        // backward of micro-batch k (frees its activations)
  kSendGrad,        // send the gradient of micro-batch k's input to stage s - 1
  // Zero-bubble's halves of kBackward: the input gradient (what stage s - 1 waits for; it keeps
  // the output gradients its weight gradients need), and later the weight gradients (frees the
  // micro-batch's activations).
  kBackwardInput,
  kBackwardWeight,
};

// Whether an action computes (rather than transfers).
bool is_compute(ActionType type);

struct Action {
  ActionType type;
  int micro_batch;
  // A send issued together with the receive that follows it, from the same neighbour: 1F1B's
  // steady state sends activation k while receiving gradient j, and sends gradient j while
  // receiving activation k + 1, and the neighbour pairs the same two transfers the other way
  // round. NCCL runs one group's transfers in order and a send waits for its receive, so issued
  // apart, two neighbours that both send first would wait for each other. The receive is the
  // next transfer of the list; zero-bubble places weight-gradient passes between the two, which
  // run while the exchange is in flight.
  bool with_next = false;
  bool operator==(const Action&) const = default;
};

// The actions of stage s. Receives and sends appear only where a neighbour exists (none before
// the first stage's forwards, none after the last stage's); each receive comes right before the
// compute that needs it and each send right after the compute that made it, which is
// deadlock-free when sends are non-blocking and receives blocking. 1F1B: min(p - s - 1, m) warm-up
// forwards, then one-forward-one-backward, then the cool-down backwards. GPipe: all forwards,
// then all backwards (in the same micro-batch order). Zero-bubble: 1F1B's list with each
// backward an input-gradient pass, and the weight-gradient passes (in micro-batch order) placed
// where the ideal timeline below has the stage waiting for its next input at least one unit, or
// where a forward would otherwise hold more than p micro-batches, and the rest at the end; a
// weight pass goes in front of the receive before the compute it precedes. The transfers are
// exactly 1F1B's, in 1F1B's order.
std::vector<Action> build_schedule(ScheduleKind kind, int stages, int stage, int micro_batches);

// The most micro-batches whose activations are held at once (forwarded, not yet through their
// backward or, split, their weight-gradient pass).
int max_in_flight(const std::vector<Action>& actions);

// Idle fraction of the ideal timeline of all p stages running their schedules, a forward taking
// one time unit, a backward two (its input and weight gradients, one each) and communication
// none, each action starting as soon as its dependencies allow: idle = 1 - busy / (p *
// makespan). For 1F1B and GPipe it equals (p - 1) / (m + p - 1); for zero-bubble with m >= p,
// (p - 1) / (3m + p - 1).
double ideal_idle_fraction(ScheduleKind kind, int stages, int micro_batches);

// The idle share by the schedule's formula: (p - 1)/(m + p - 1) for 1F1B and GPipe; for
// zero-bubble (p - 1)/(3m + p - 1) when m >= p (1F1B's bubble of (p - 1)(F + B + W) shrinks to
// (p - 1)(F + B - W)), and below that, where the formula does not hold, its ideal timeline's.
double idle_fraction_formula(ScheduleKind kind, int stages, int micro_batches);
// That formula as text: "(p-1)/(m+p-1)" or "(p-1)/(3m+p-1)", or what stands in for the latter
// when m < p. Without p and m: the formula itself.
const char* idle_fraction_formula_text(ScheduleKind kind, int stages = 1, int micro_batches = 1);

}  // namespace feast
