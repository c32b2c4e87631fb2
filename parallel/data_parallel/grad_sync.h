// Data-parallel gradient reduction for ZeRO stages 0, 1 and 2, and the tied-embedding sum over
// the first and last pipeline stage. It is the stage's GradientSink: the stage writes each
// range's gradients through it, and it reduces them in buckets (contiguous runs of ranges) with
// non-blocking collectives as soon as backward has produced them, so communication overlaps
// the rest of the backward.
//   ZeRO 0: one full gradient buffer; buckets all-reduced during the last micro-batch's backward.
//   ZeRO 1: one full gradient buffer; buckets reduce-scattered in place during the last
//           micro-batch's backward, each rank's part landing where its shard lies in the buffer
//           (so ZeRO 1 needs no more gradient memory than ZeRO 0).
//   ZeRO 2: no full buffer: each bucket is staged in one of a few bucket-sized slots while
//           backward writes it and reduce-scattered after every micro-batch straight into the
//           shard (the owner first adds what its shard has accumulated into its own
//           contribution), so a rank keeps gradients it does not own for a few buckets at most.
//           The exception is a token embedding that a tied head on the same stage also writes
//           (pp = 1): the head writes it at the start of the backward and the embedding at the
//           end, so its chunks keep their own buffer through the backward and are reduced once
//           per micro-batch, after both, rather than twice.
//   ZeRO 3: gradients as ZeRO 2; the parameters are sharded too (sharded_parameters.h), so
//           there is no all-gather after the update.
// With a bf16 wire dtype (parallel.grad_reduce_dtype) the data-parallel reductions carry bf16:
// each bucket is cast into one of a few bucket-sized bf16 buffers, reduced there in bf16 (half
// the bytes), and the result cast back into the float32 gradients when it lands; accumulation
// over micro-batches stays float32.
// A tied tensor held by two stages (the token embedding and a tied head, pp > 1) is summed over
// the embedding group before its data-parallel reduction (Megatron-LM #844), at the end of the
// step: summing it earlier would make the last stage wait for the first stage's backward inside
// its own.
// Expert parallelism (parallel.ep > 1): each rank holds only its ep rank's experts, so an
// expert's gradient is summed over the data-parallel ranks that hold the same experts (dp / ep
// of them: Megatron-LM's expert-data-parallel group), and ZeRO cuts its shards over that group:
// the ep ranks of an ep group have the same share, of dense tensors and of their own experts.
// The dense tensors' buckets, summed over every data-parallel rank, are then all-reduced whole
// (each rank keeping its share) rather than reduce-scattered, and their optimizer state is
// sharded over dp / ep ranks rather than dp: one contiguous shard per rank keeps the optimizer,
// the checkpoints and ZeRO 3 as they are, at the price of ep copies of the dense tensors' state.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "backend/backend.h"
#include "model/pipeline_stage.h"
#include "parallel/data_parallel/zero_shard.h"

namespace feast {

// ZeRO 2's staging slots: a bucket being written, one being reduced, one spare.
inline constexpr int kGradStagingSlots = 3;
// bf16 traffic: buckets in flight at once, each in a bf16 copy of its own (more would overlap
// longer backwards; each costs the largest bucket's size in bf16).
inline constexpr int kGradWireSlots = 4;

class GradientSync;

// The buckets GradientSync reduces: a stage's gradient ranges in the order backward produces
// them (descending offsets), merged while contiguous and below bucket_elems. Chunks of
// vocabulary-sized tensors stay buckets of their own: they may be written twice per backward
// (tied head and embedding) and may be tied across stages.
struct GradBucket {
  size_t begin, end;
  int ranges = 1;           // ranges merged into it
  int uses = 1;             // completions per backward (2: a token embedding a tied head also writes)
  bool standalone = false;  // a vocabulary-sized tensor's chunk
  bool tied = false;        // shared with another stage
  int chunk = 0;            // the model chunk whose backward writes it (GradRange::chunk)
  bool expert = false;      // an expert's tensors (GradRange::expert)
  // Reduced at the step's end, after the sum over the embedding group (a tie across stages).
  bool deferred(bool embedding_group) const { return tied && embedding_group; }
  // ZeRO 2 keeps it in a buffer of its own through the backward rather than a staging slot: it
  // is deferred, or written twice per micro-batch (reduced once, after both writes).
  bool dedicated(bool embedding_group) const { return deferred(embedding_group) || uses > 1; }
};
std::vector<GradBucket> gradient_buckets(const std::vector<GradRange>& ranges, size_t bucket_elems);

// What GradientSync allocates by, from its buckets (the planner counts the same): ZeRO 2's
// staging slots hold the largest bucket not dedicated; the dedicated ones share one buffer
// spanning [dedicated_begin, dedicated_end); a bf16 wire buffer holds the largest bucket.
struct GradBufferSizes {
  size_t slot_elems = 0, largest = 0;
  size_t dedicated_begin = 0, dedicated_end = 0;  // empty when none is dedicated
  size_t dedicated_elems() const { return dedicated_end - dedicated_begin; }
};
GradBufferSizes gradient_buffer_sizes(const std::vector<GradBucket>& buckets, bool embedding_group);

// One step's data-parallel gradient reductions, timed: how long they ran against how long the
// rank waited for them, which together show how much of them the backward hid.
struct ReductionTimes {
  // While at least one ran, merged where they overlap: each from its launch until it was seen
  // finished (GradientSync tests the reductions in flight whenever the backward hands over
  // gradients, and waits for the rest). Where the library times its own operations (NCCL, on
  // the communication stream) the sum of those times instead: the host launches them long
  // before the GPU gets to them.
  double in_flight = 0;
  // Blocked waiting for them: the part the backward did not hide.
  double exposed = 0;
};

// The length of the union of [from, to) spans: how long at least one of them lasted.
double covered_seconds(std::vector<std::pair<double, double>> spans);

// How a stage's data-parallel replicas combine their gradients and share the updated weights,
// as one training step sees it: collectives (all-reduce or ZeRO's reduce-scatter and all-gather:
// GradientSync) or a parameter server (parallel/data_parallel/parameter_server.h). A step runs begin_step,
// the backward into sink(), finish_step, the optimizer over optimizer_range() with
// optimizer_grads(), and share_update.
class DataParallelSync {
 public:
  virtual ~DataParallelSync() = default;

  // What backward writes into (the pipeline executor tells it which micro-batch is the last).
  virtual GradientSync& sink() = 0;
  // Starts a step: clears the gradients.
  virtual void begin_step() = 0;
  // Ends the backward: afterwards shard_grads() holds this rank's shard of the gradient summed
  // over dp (and the embedding group), and optimizer_grads() the gradients of optimizer_range().
  virtual void finish_step() = 0;
  // After the optimizer updated optimizer_range() of `params` (the stage's compute parameters):
  // the ranks exchange what they updated, so every copy a forward reads is current.
  virtual void share_update(const TensorView& params) = 0;

  // This rank's shard of the flat buffer (the whole buffer when dp = 1): its part of the
  // gradient norm, and the elements it owns in a checkpoint.
  virtual ShardRange shard() const = 0;
  virtual TensorView shard_grads() const = 0;
  // What this rank's optimizer updates, and its gradients after finish_step.
  virtual ShardRange optimizer_range() const = 0;
  virtual TensorView optimizer_grads() const = 0;
  // Bytes of gradients (accumulated and reduced), and of buffers that only carry traffic (bf16
  // copies on the wire, a parameter server's received shard).
  virtual size_t gradient_bytes() const = 0;
  virtual size_t communication_bytes() const = 0;
  // Tests the reductions in flight without waiting (moves MPI on, and notes which finished):
  // for a caller about to wait on something else, such as the pipeline's cool-down.
  virtual void progress() = 0;
  // Seconds spent waiting for reductions since the last call.
  virtual double take_wait_seconds() = 0;
  // This step's data-parallel gradient reductions so far (none for a parameter server, whose
  // workers push and pull instead).
  virtual ReductionTimes reduction_times() const = 0;
  // For the start-up report: "ZeRO 1", "parameter server".
  virtual std::string describe() const = 0;
};

class GradientSync final : public GradientSink, public DataParallelSync {
 public:
  // ranges: every range the stage acquires (disjoint, covering the flat buffer of `total`
  // elements), with how often one backward acquires each, which stand alone and which are tied
  // to another stage. embedding: the group of the two stages that hold a tied tensor (null
  // unless a tie spans stages); dp: the data-parallel group (null when dp = 1). Gradient memory
  // comes from `backend`, float32.
  // wire: the dtype the data-parallel reductions carry (kBFloat16: buckets travel and are
  // summed as bf16; micro-batches still accumulate in float32).
  // experts (expert parallelism, parallel.ep > 1): the data-parallel ranks that hold the same
  // experts (dp / ep of them, perhaps 1); null without it.
  GradientSync(Backend& backend, size_t total, const std::vector<GradRange>& ranges, int zero_stage,
               size_t bucket_elems, Communicator* dp, Communicator* embedding, DType wire = DType::kFloat32,
               Communicator* experts = nullptr);

  GradientSync& sink() override { return *this; }
  // Starts a step: clears the gradients.
  void begin_step() override;
  // Tells which micro-batch's backward comes next; ZeRO 0 and 1 reduce during the last one.
  void set_last_micro_batch(bool last) { last_micro_batch_ = last; }
  // Ends a step: reduces what is deferred and waits for every reduction (see DataParallelSync).
  void finish_step() override;
  // ZeRO 1 and 2: all-gathers every rank's updated shard over dp; nothing under ZeRO 0 (every
  // rank updated the whole buffer) and ZeRO 3 (blocks are gathered when they run).
  void share_update(const TensorView& params) override;

  TensorView acquire(size_t begin, size_t end) override;
  void release(size_t begin, size_t end) override;

  // This rank's ZeRO shard of the flat buffer (the whole buffer when dp = 1).
  ShardRange shard() const override { return shard_; }
  TensorView shard_grads() const override;
  // What this rank's optimizer updates: the whole buffer under ZeRO 0, the shard otherwise.
  ShardRange optimizer_range() const override { return zero_stage_ == 0 ? ShardRange{0, total_} : shard_; }
  TensorView optimizer_grads() const override { return zero_stage_ == 0 ? full_.view() : shard_grads(); }
  int zero_stage() const { return zero_stage_; }
  size_t gradient_bytes() const override;
  size_t communication_bytes() const override { return wire_.bytes(); }
  void progress() override { poll(); }
  double take_wait_seconds() override;
  ReductionTimes reduction_times() const override;
  std::string describe() const override { return "ZeRO " + std::to_string(zero_stage_); }

 private:
  struct Bucket {
    size_t begin, end;
    int ranges = 1;             // ranges in this bucket
    int released = 0;           // ranges released since the bucket was last complete
    int uses = 0;               // completions in the current backward
    int uses_per_backward = 1;  // 2 for a token embedding written by both head and embedding
    bool deferred = false;      // a tied tensor: reduced at finish_step
    bool shared = false;        // ZeRO 2: written by the head and the embedding of this stage
    bool expert = false;        // an expert's tensors: reduced over experts_ (expert parallelism)
    bool open = false;          // ZeRO 2, shared: written in this micro-batch, not yet reduced
    int slot = -1;              // ZeRO 2: staging slot while being written or reduced
    // ZeRO 2: staged in dedicated_ (not a slot) for the whole backward.
    bool dedicated() const { return deferred || shared; }
  };
  struct Pending {
    int bucket;
    WorkHandle work;
    int slot;                // ZeRO 2 staging slot to free when done, or -1
    int wire_slot;           // bf16 traffic: the wire buffer to cast back from and free, or -1
    TensorView result;       // the float32 gradients the reduction yields
    TensorView wire_result;  // bf16 traffic: where the reduction leaves them in the wire buffer
    TensorView landing;      // bf16 traffic, ZeRO 2: fp32 room to widen them into before adding to result
    double launched = 0;     // step clock, seconds
    double finished = -1;    // step clock, once seen finished
  };

  int bucket_of(size_t begin) const;
  // Counts a released range towards its bucket and launches the bucket's reduction when due.
  void release_bucket_range(size_t begin);
  TensorView staging(const Bucket& b) const;
  void launch(int bucket);
  void complete_oldest();
  // Tests the reductions in flight, so that MPI moves them on while the backward computes, and
  // notes when each is seen finished.
  void poll();
  // Completes reductions, oldest first, until none of `bucket` is in flight.
  void drain(int bucket);
  int take_slot();
  int take_wire_slot();

  size_t total_;
  Backend& backend_;
  int zero_stage_;
  Communicator* dp_;
  Communicator* embedding_;
  Communicator* experts_ = nullptr;   // expert parallelism: the ranks holding the same experts
  Communicator* sharding_ = nullptr;  // the group ZeRO shards over: experts_, or dp_
  int shard_ranks_ = 1, shard_rank_ = 0;  // sharding_'s size and this rank's place in it
  ShardRange shard_;
  std::vector<Bucket> buckets_;  // in descending order of offset (the order backward writes them)
  bool last_micro_batch_ = true;
  Tensor full_;       // ZeRO 0 and 1: every gradient
  Tensor shard_acc_;  // ZeRO 2: the reduced shard
  Tensor slots_;      // ZeRO 2: staging slots, slot_elems_ each
  Tensor dedicated_;  // ZeRO 2: the buffer of buckets kept through the backward (Bucket::dedicated)
  size_t dedicated_begin_ = 0;  // flat offset of dedicated_'s first element
  size_t slot_elems_ = 0;
  DType wire_dtype_ = DType::kFloat32;
  Tensor wire_;  // bf16 traffic: kWireSlots buffers of wire_slot_elems_ bf16 values
  size_t wire_slot_elems_ = 0;
  std::vector<int> free_wire_;
  std::vector<int> free_slots_;
  std::deque<Pending> pending_;
  double wait_seconds_ = 0;
  // This step's reductions, for reduction_times(): the step clock starts at begin_step.
  Timer step_clock_;
  std::vector<std::pair<double, double>> spans_;  // [launched, finished) of each one done
  double device_seconds_ = 0;                     // their own times, where the library measured them
  bool device_timed_ = false;
  double exposed_seconds_ = 0;
};

}  // namespace feast
