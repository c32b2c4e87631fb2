// Pipeline schedules as data (design invariant 3): the ordered actions one stage performs in
// one training step. One executor runs any schedule; the schedules are tested on their own.
// Legend: p stages, s this stage (0-based), m micro-batches, v virtual stages (model chunks) per
// stage: chunk c of stage s is virtual stage c·p + s of the V = v·p the model is cut into.
#pragma once

#include <string>
#include <vector>

namespace feast {

// kZeroBubble: ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B's forwards,
// input-gradient backwards and transfers, in 1F1B's order, with each backward's weight-gradient
// half (W) split off and deferred into the time a stage would otherwise wait, at most p
// micro-batches held (1F1B's peak, the first stage's) on every stage.
// kInterleaved: interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual pipeline): each
// stage holds v non-contiguous chunks of layers and runs 1F1B over (micro-batch, chunk) pairs,
// which cuts the bubble v-fold at v times the point-to-point traffic.
enum class ScheduleKind { kOneFOneB, kGPipe, kZeroBubble, kInterleaved };

// Parses "1f1b", "gpipe", "zero-bubble" or "interleaved-1f1b"; throws ConfigError naming the
// value otherwise.
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
  // The model chunk the action belongs to (interleaved 1F1B; 0 otherwise). A transfer's chunk
  // is that of the compute beside it on this stage: a received activation feeds chunk `chunk`,
  // a sent one left it.
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

// Stage s's neighbour for a transfer of chunk c: where its input activation comes from (stage
// s - 1, or for s = 0 the last stage's chunk c - 1) and where its output goes (s + 1, or for
// the last stage the first stage's chunk c + 1). -1 where there is none: the first virtual
// stage has no input, the last no output.
int upstream_stage(int stages, int stage, int chunk);
int downstream_stage(int stages, int stage, int chunk, int virtual_stages);
// The neighbour's chunk for those transfers: the same chunk, or across the wrap from the last
// stage to the first, the chunk before (upstream) or after (downstream).
int upstream_chunk(int stage, int chunk);
int downstream_chunk(int stages, int stage, int chunk);

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
// exactly 1F1B's, in 1F1B's order. Interleaved (v >= 2 chunks, m a multiple of p): Megatron-LM's
// order over the m·v (micro-batch, chunk) pairs: (p - s - 1)·2 + (v - 1)·p warm-up forwards,
// then one forward and one backward, then the cool-down backwards; forward k runs chunk
// (k / p) mod v of micro-batch (k / (p·v))·p + k mod p, and backward k the same micro-batch on
// chunk v - 1 - (k / p) mod v. No transfers are paired: they run on MPI (see the executor).
std::vector<Action> build_schedule(ScheduleKind kind, int stages, int stage, int micro_batches,
                                   int virtual_stages = 1);

// The most micro-batches of one chunk whose activations are held at once (forwarded, not yet
// through their backward or, split, their weight-gradient pass): the activation slots each of
// the stage's chunks needs.
int max_in_flight(const std::vector<Action>& actions);
// The same over all chunks together.
int max_in_flight_total(const std::vector<Action>& actions);

// Idle fraction of the ideal timeline of all p stages running their schedules, a forward taking
// one time unit, a backward two (its input and weight gradients, one each) and communication
// none, each action starting as soon as its dependencies allow: idle = 1 - busy / (p *
// makespan). For 1F1B and GPipe it equals (p - 1) / (m + p - 1); for zero-bubble with m >= p,
// (p - 1) / (3m + p - 1).
// Interleaved counts a chunk's forward as one unit: (p - 1) / (v·m + p - 1).
double ideal_idle_fraction(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1);

// The idle share by the schedule's formula: (p - 1)/(m + p - 1) for 1F1B and GPipe; for
// zero-bubble (p - 1)/(3m + p - 1) when m >= p (1F1B's bubble of (p - 1)(F + B + W) shrinks to
// (p - 1)(F + B - W)), and below that, where the formula does not hold, its ideal timeline's.
// Interleaved: (p - 1)/(v·m + p - 1), the bubble (p - 1)/v of a step's v·m chunk passes.
double idle_fraction_formula(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1);
// That formula as text: "(p-1)/(m+p-1)", "(p-1)/(3m+p-1)" or "(p-1)/(vm+p-1)", or what stands
// in for the zero-bubble one when m < p. Without p and m: the formula itself.
const char* idle_fraction_formula_text(ScheduleKind kind, int stages = 1, int micro_batches = 1);

}  // namespace feast
