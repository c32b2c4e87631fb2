// Runs one stage's pipeline schedule (parallel/pipeline/schedule.h) for a training step or an
// evaluation: forwards and backwards on the stage, activations and their gradients to and from
// the neighbouring stages with tagged point-to-point messages on the pipeline group. Sends are
// non-blocking and completed before their buffer is reused; receives block (the time they wait
// is the pipeline's idle time plus transfer). A send followed by a receive from the same
// neighbour goes out as one exchange where the schedule says so (Action::with_next), which NCCL
// needs; the exchange is posted at the send and waited for at the receive, so the weight passes
// of a split backward (zero-bubble) placed between them run while it is in flight. Under
// interleaved 1F1B each action names its model chunk: the stage addresses the chunk through its
// slots (chunk c's slot j is c·slots/v + j), and the chunk's neighbours wrap from the last
// stage to the first (schedule.h's upstream_stage and downstream_stage).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/timer.h"
#include "model/pipeline_stage.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/pipeline/schedule.h"

namespace feast {

// Seconds of one or more steps, split by what the stage was doing.
struct StageTimes {
  double compute = 0;     // forward and backward, tensor-parallel communication excluded
  double tp_comm = 0;     // tensor-parallel all-reduces inside forward and backward
  double ep_comm = 0;     // expert parallelism's all-to-all exchanges inside forward and backward
  // Context parallelism's attention ring: its whole time (in compute but for its waits, which
  // are taken out), the waits and the bytes this rank sent.
  RingTraffic ring;
  double pp_wait = 0;     // blocked receiving from a neighbour stage (bubble + transfer)
  double send_wait = 0;   // completing sends
  double data = 0;        // filling micro-batches' tokens and targets (the data loader)
};

// Fills micro-batch k's tokens, targets and, under document masks, positions (each token's place
// in its document), each (B, T).
using BatchFill = std::function<void(int k, int32_t* tokens, int32_t* targets, int32_t* positions)>;

class PipelineExecutor {
 public:
  // pp: the pipeline group (null when pp = 1); micro_batches: per step on this data-parallel
  // rank; virtual_stages: the stage's model chunks (interleaved 1F1B). The stage must have been
  // built with at least max_in_flight(schedule) slots per chunk.
  PipelineExecutor(PipelineStage& stage, Communicator* pp, ScheduleKind kind, int micro_batches, int B, int T,
                   int virtual_stages = 1);

  // One training step's forwards and backwards. Gradients flow into `sync` (which is told
  // which backward is the last). Returns the sum of the micro-batches' mean losses on the last
  // stage, 0 elsewhere. Micro-batch k is at {step, first_sequence + k B} of the run
  // (MicroBatchPlace: LoRA dropout's masks); step_micro_batches: the step's micro-batches over
  // all data-parallel ranks (each one's share of the MoE auxiliary losses).
  double train(const BatchFill& fill, GradientSync& sync, float loss_scale, int64_t step = -1,
               int64_t first_sequence = 0, int64_t step_micro_batches = 1);

  // Forward only over n micro-batches (evaluation). Returns the sum of their mean losses on
  // the last stage, 0 elsewhere.
  double evaluate(int n, const BatchFill& fill);

  // Slots a stage needs for this schedule, per model chunk.
  static int slots_needed(ScheduleKind kind, int stages, int stage, int micro_batches, int virtual_stages = 1);

  StageTimes take_times();

 private:
  void wait_send(WorkHandle& h);
  // The seconds since `t` once the stage's queued device work has finished: on a GPU the
  // time split synchronises at each forward and backward, as Megatron-LM's timers do, so that
  // the work the host queued is counted where it ran.
  double compute_seconds(const Timer& t);
  void recv(const TensorView& into, int peer, int tag);
  // Posts a send of the first act_elems_ elements of `data`. The communicator orders it after
  // the compute that produced them (NCCL with an event; the staged path by waiting for the
  // device before it copies), so the host does not wait here.
  WorkHandle send(const TensorView& data, int peer, int tag);
  // The index of the first transfer after action `at` (a paired send's receive).
  size_t next_transfer(size_t at) const;
  // Posts the send of `out` to stage `to` and the receive of `into` from stage `from` as one
  // exchange, for the send at action `at`; finish_exchange(j) at the receive's action j waits
  // for both (and returns false at any other action).
  void post_exchange(size_t at, const TensorView& out, int to, int send_tag, const TensorView& into, int from,
                     int recv_tag);
  bool finish_exchange(size_t at);
  // Where the activation for `slot` is received: the slot's input, or with a split backward the
  // stage's arrival(), copied into the slot at its forward.
  TensorView arriving_activation(int slot);
  // The stage slot of micro-batch k of `chunk`.
  int slot_of(int k, int chunk) const { return chunk * slots_per_chunk_ + k % slots_per_chunk_; }
  // Tags keep micro-batches, chunks and directions apart on the pipeline group: a transfer
  // between virtual stages j and j + 1 is tagged by j's chunk.
  int activation_tag(int k, int chunk) const { return 2 * (chunk * micro_batches_ + k); }
  int gradient_tag(int k, int chunk) const { return 2 * (chunk * micro_batches_ + k) + 1; }
  // This stage's neighbours for `chunk`: the stage its input comes from and its output goes to.
  int upstream(int chunk) const { return upstream_stage(stages_, stage_index_, chunk); }
  int downstream(int chunk) const { return downstream_stage(stages_, stage_index_, chunk, virtual_stages_); }
  // The chunk of the virtual stage before this one's `chunk` (what tags its activations).
  int upstream_chunk(int chunk) const { return feast::upstream_chunk(stage_index_, chunk); }

  PipelineStage& stage_;
  Communicator* pp_;
  std::vector<Action> train_actions_;
  int micro_batches_, B_, T_, virtual_stages_, stages_ = 1, stage_index_ = 0, slots_per_chunk_ = 1;
  size_t act_elems_;                       // one micro-batch's (B, T, C) activation
  std::vector<int32_t> tokens_, targets_, positions_;  // (B, T): the micro-batch being filled
  std::vector<WorkHandle> act_sends_;      // per slot: the pending send of its output
  WorkHandle grad_send_;                   // the pending send of the input gradient
  // Interleaved 1F1B: input gradients leave from copies of their own, so that no receive or
  // backward waits for a send to complete. Its chunks' gradients cross in both directions
  // between the same two stages, and a wait for one's send (which completes only when the
  // neighbour posts the receive) could meet the neighbour waiting for the other's. A copy is
  // reused once its send has completed; there are as many as sends were ever in flight at once.
  struct OutgoingGrad {
    Tensor data;
    WorkHandle send;
  };
  std::vector<OutgoingGrad> outgoing_grads_;
  // Posts the send of the input gradient from a free copy (interleaved).
  void send_grad_copy(int peer, int tag);
  WorkHandle exchange_;                    // a paired send and receive in flight
  size_t exchange_at_ = 0;                 // the action of its receive
  bool split_ = false;                     // the schedule splits backwards (weight passes)
  StageTimes times_;
};

}  // namespace feast
