#include "parallel/data_parallel/grad_sync.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/timer.h"

namespace feast {

std::vector<GradBucket> gradient_buckets(const std::vector<GradRange>& ranges, size_t bucket_elems) {
  std::vector<GradRange> order = ranges;
  std::sort(order.begin(), order.end(), [](const GradRange& a, const GradRange& b) { return a.begin > b.begin; });
  std::vector<GradBucket> buckets;
  for (const GradRange& r : order) {
    GradBucket* last = buckets.empty() ? nullptr : &buckets.back();
    if (last && !r.standalone && !last->standalone && last->chunk == r.chunk && last->expert == r.expert &&
        last->begin == r.end && last->end - last->begin < bucket_elems) {
      last->begin = r.begin;
      ++last->ranges;
    } else {
      buckets.push_back({r.begin, r.end, 1, r.uses, r.standalone, r.tied, r.chunk, r.expert});
    }
  }
  return buckets;
}

GradBufferSizes gradient_buffer_sizes(const std::vector<GradBucket>& buckets, bool embedding_group) {
  GradBufferSizes z;
  z.dedicated_begin = SIZE_MAX;
  for (const GradBucket& b : buckets) {
    z.largest = std::max(z.largest, b.end - b.begin);
    if (b.dedicated(embedding_group)) {
      z.dedicated_begin = std::min(z.dedicated_begin, b.begin);
      z.dedicated_end = std::max(z.dedicated_end, b.end);
    } else {
      z.slot_elems = std::max(z.slot_elems, b.end - b.begin);
    }
  }
  if (z.dedicated_end == 0) z.dedicated_begin = 0;
  return z;
}

GradientSync::GradientSync(Backend& backend, size_t total, const std::vector<GradRange>& ranges, int zero_stage,
                           size_t bucket_elems, Communicator* dp, Communicator* embedding, DType wire,
                           Communicator* experts)
    : total_(total), backend_(backend), zero_stage_(zero_stage), dp_(dp), embedding_(embedding), experts_(experts) {
  FEAST_CHECK(wire == DType::kFloat32 || wire == DType::kBFloat16,
              "gradients travel in float32 or bfloat16, not " << dtype_name(wire));
  FEAST_CHECK(zero_stage >= 0 && zero_stage <= 3, "parallel.zero_stage must be 0, 1, 2 or 3");
  FEAST_CHECK(!experts_ || dp_, "expert parallelism needs data-parallel ranks");
  // The shards are cut over the data-parallel group, or under expert parallelism over the ranks
  // that hold the same experts (every rank of an ep group then has the same share).
  sharding_ = experts_ ? experts_ : dp_;
  if (sharding_) {
    shard_ranks_ = sharding_->size();
    shard_rank_ = sharding_->rank();
  }
  // With one rank to shard over there is nothing to shard: every stage is ZeRO 0.
  if (shard_ranks_ == 1) zero_stage_ = 0;
  shard_ = shard_range(total, shard_ranks_, shard_rank_);
  const bool embedding_group = embedding_ != nullptr;
  const std::vector<GradBucket> merged = gradient_buckets(ranges, bucket_elems);
  size_t covered = 0;
  for (const GradBucket& g : merged) {
    covered += g.end - g.begin;
    Bucket b{g.begin, g.end};
    b.ranges = g.ranges;
    b.deferred = g.deferred(embedding_group);
    b.uses_per_backward = g.uses;
    b.shared = zero_stage_ >= 2 && g.uses > 1 && !b.deferred;
    b.expert = g.expert;
    buckets_.push_back(b);
  }
  const GradBufferSizes sizes = gradient_buffer_sizes(merged, embedding_group);
  slot_elems_ = sizes.slot_elems;
  dedicated_begin_ = sizes.dedicated_begin;
  FEAST_CHECK(covered == total, "gradient ranges cover " << covered << " of " << total << " elements");

  if (zero_stage_ < 2) {
    full_ = backend.allocate(DType::kFloat32, total);
  } else {
    slots_ = backend.allocate(DType::kFloat32, slot_elems_ * kGradStagingSlots);
    for (int s = 0; s < kGradStagingSlots; ++s) free_slots_.push_back(s);
    if (sizes.dedicated_elems() > 0) dedicated_ = backend.allocate(DType::kFloat32, sizes.dedicated_elems());
  }
  // ZeRO 1 reduces in place into the shard's part of full_; ZeRO 2 needs the shard apart.
  if (zero_stage_ >= 2) shard_acc_ = backend.allocate(DType::kFloat32, shard_.size());
  if (wire == DType::kBFloat16 && dp_) {
    wire_dtype_ = wire;
    wire_slot_elems_ = sizes.largest;
    wire_ = backend.allocate(DType::kBFloat16, wire_slot_elems_ * kGradWireSlots);
    for (int s = 0; s < kGradWireSlots; ++s) free_wire_.push_back(s);
  }
}

int GradientSync::bucket_of(size_t begin) const {
  // buckets_ descend by offset: the first one starting at or before `begin` holds it.
  const auto it = std::partition_point(buckets_.begin(), buckets_.end(), [&](const Bucket& b) { return b.begin > begin; });
  FEAST_CHECK(it != buckets_.end() && begin < it->end, "no gradient bucket holds flat offset " << begin);
  return int(it - buckets_.begin());
}

TensorView GradientSync::staging(const Bucket& b) const {
  const size_t n = b.end - b.begin;
  if (zero_stage_ < 2) return full_.view().slice(b.begin, n);
  if (b.dedicated()) return dedicated_.view().slice(b.begin - dedicated_begin_, n);
  return slots_.view().slice(size_t(b.slot) * slot_elems_, n);
}

void GradientSync::begin_step() {
  FEAST_CHECK(pending_.empty(), "a gradient reduction is still in flight at the start of a step");
  for (const Tensor* t : {&full_, &shard_acc_, &dedicated_}) backend_.zero(t->view());
  for (Bucket& b : buckets_) {
    b.released = b.uses = 0;
    b.open = false;
  }
  step_clock_ = Timer();
  spans_.clear();
  device_seconds_ = exposed_seconds_ = 0;
  device_timed_ = false;
}

void GradientSync::drain(int bucket) {
  while (std::any_of(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.bucket == bucket; }))
    complete_oldest();
}

int GradientSync::take_slot() {
  while (free_slots_.empty()) {
    FEAST_CHECK(!pending_.empty(), "ZeRO-2 staging slots exhausted with no reduction in flight");
    complete_oldest();
  }
  const int s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

TensorView GradientSync::acquire(size_t begin, size_t end) {
  Bucket& b = buckets_[size_t(bucket_of(begin))];
  FEAST_CHECK(end <= b.end, "gradient range crosses a bucket");
  if (zero_stage_ >= 2 && !b.dedicated() && b.slot < 0) {
    b.slot = take_slot();
    backend_.zero(staging(b));
  }
  if (b.shared && !b.open) {  // a new micro-batch: the last one's reduction must have read it
    const int i = int(&b - buckets_.data());
    drain(i);
    backend_.zero(staging(b));
    b.open = true;
  }
  return staging(b).slice(begin - b.begin, end - begin);
}

void GradientSync::release(size_t begin, size_t) {
  release_bucket_range(begin);
  poll();  // after any launch, so that the new reduction is under way at once
}

void GradientSync::release_bucket_range(size_t begin) {
  const int i = bucket_of(begin);
  Bucket& b = buckets_[size_t(i)];
  if (++b.released < b.ranges) return;
  b.released = 0;
  if (b.deferred) return;  // summed over the embedding group first, at finish_step
  if (b.shared) {
    if (++b.uses < b.uses_per_backward) return;  // the embedding still adds its part
    b.uses = 0;
    b.open = false;
    launch(i);  // once per micro-batch, with both parts
  } else if (zero_stage_ >= 2) {
    launch(i);  // every micro-batch: the staging slot must be freed
  } else if (++b.uses == b.uses_per_backward) {
    b.uses = 0;
    // ZeRO 0 and 1 accumulate micro-batches in place and reduce once, during the last backward
    // (after the bucket's last write of that backward).
    if (last_micro_batch_) launch(i);
  }
}

int GradientSync::take_wire_slot() {
  while (free_wire_.empty()) complete_oldest();
  const int s = free_wire_.back();
  free_wire_.pop_back();
  return s;
}

void GradientSync::launch(int i) {
  Bucket& b = buckets_[size_t(i)];
  const TensorView data = staging(b);
  // Expert parallelism: an expert's gradient is summed over the ranks that hold the same experts
  // only, reduce-scattered over them like any gradient; a dense one over every data-parallel
  // rank, all-reduced whole, since the ep ranks that share a shard need the same sums.
  Communicator* group = b.expert && experts_ ? experts_ : dp_;
  if (!group || group->size() == 1) return;
  const bool whole = zero_stage_ == 0 || (experts_ && !b.expert);
  // What this rank receives: the whole bucket (ZeRO 0), or its part of the bucket, flat
  // offsets [lo, hi) (empty when the bucket lies outside the shard).
  const size_t lo = zero_stage_ == 0 ? b.begin : std::clamp(shard_.begin, b.begin, b.end);
  const size_t hi = zero_stage_ == 0 ? b.end : std::clamp(shard_.end, b.begin, b.end);
  // ZeRO 0 and 1: in place; ZeRO 2: into the shard (clamped into it so that an empty part's
  // view stays inside the buffer).
  const TensorView result =
      zero_stage_ < 2 ? full_.view().slice(lo, hi - lo)
                      : shard_acc_.view().slice(std::clamp(lo, shard_.begin, shard_.end) - shard_.begin, hi - lo);
  const bool bf16 = wire_dtype_ == DType::kBFloat16;
  Pending p{i, nullptr, -1, -1, result, {}, {}};
  if (zero_stage_ >= 2) {
    // ZeRO 2 reduces every micro-batch into the shard, which must keep accumulating in fp32.
    // With fp32 traffic the owner adds what the shard holds into its own contribution first
    // (after the previous reduction into that part has landed), and the reduction overwrites
    // the shard. With bf16 traffic that sum would travel in bf16, so instead the reduced part is
    // widened into this rank's part of the staging buffer when it lands and added there.
    // An all-reduce sums every rank's part of the shard, not only the owner's: there too the
    // reduced part is added where it lands.
    drain(i);
    const TensorView own = data.slice(lo - b.begin, result.numel);
    if (bf16 || whole) p.landing = own;
    else if (result.numel > 0) backend_.add(own, own, result, result.numel);
  }
  // The buffer that travels: the bucket itself, or its bf16 copy (the staging slot is then free
  // at once: the reduction reads the copy).
  TensorView travel = data;
  if (bf16) {
    p.wire_slot = take_wire_slot();
    travel = wire_.view().slice(size_t(p.wire_slot) * wire_slot_elems_, data.numel);
    backend_.cast(travel, data);
    p.wire_result = travel.slice(lo - b.begin, hi - lo);
  }
  CollectiveOptions timed;
  timed.timed = true;
  p.launched = step_clock_.seconds();
  if (whole) {
    p.work = group->allreduce(travel.data, travel.numel, travel.dtype, timed);
  } else {
    // Into this rank's block of the travelling buffer itself (in place) or of the shard.
    void* into = bf16 ? p.wire_result.data : result.data;
    if (zero_stage_ == 1 && !bf16) into = travel.slice(lo - b.begin, hi - lo).data;
    const std::vector<size_t> counts = shard_counts(total_, shard_ranks_, b.begin, b.end);
    p.work = group->reduce_scatter(travel.data, into, counts, travel.dtype, timed);
  }
  if (zero_stage_ >= 2 && !b.dedicated()) {
    p.slot = b.slot;  // the slot now belongs to the reduction (with bf16 traffic, to its landing)
    b.slot = -1;
  }
  pending_.push_back(std::move(p));
}

void GradientSync::poll() {
  // Reductions finish in about the order they started (on NCCL's stream exactly), so testing
  // stops at the first one still running: a poll costs one test plus one per reduction just
  // finished, however many are in flight (hundreds at the end of a large model's backward).
  // Over MPI that one test moves every request on.
  for (Pending& p : pending_) {
    if (p.finished >= 0) continue;
    if (!p.work->test()) return;
    p.finished = step_clock_.seconds();
  }
}

void GradientSync::complete_oldest() {
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  Timer t;
  p.work->wait();
  const double waited = t.seconds();
  wait_seconds_ += waited;
  if (p.finished < 0) {
    p.finished = step_clock_.seconds();
    exposed_seconds_ += waited;
  }
  spans_.emplace_back(p.launched, p.finished);
  if (const double d = p.work->device_seconds(); d >= 0) {
    device_seconds_ += d;
    device_timed_ = true;
  }
  if (p.wire_slot >= 0) {
    if (p.landing.data) {  // ZeRO 2: widen, then add to what the shard holds
      backend_.cast(p.landing, p.wire_result);
      if (p.result.numel > 0) backend_.add(p.result, p.result, p.landing, p.result.numel);
    } else {
      backend_.cast(p.result, p.wire_result);
    }
    free_wire_.push_back(p.wire_slot);
  } else if (p.landing.data && p.result.numel > 0) {  // ZeRO 2, all-reduced: add to what the shard holds
    backend_.add(p.result, p.result, p.landing, p.result.numel);
  }
  if (p.slot >= 0) free_slots_.push_back(p.slot);
}

void GradientSync::finish_step() {
  poll();  // what finished during the backward's last part was never waited for
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    if (!b.deferred) continue;
    const TensorView data = staging(b);
    Timer t;
    embedding_->allreduce(data.data, data.numel, DType::kFloat32)->wait();
    wait_seconds_ += t.seconds();
    launch(int(i));
  }
  while (!pending_.empty()) complete_oldest();
}

void GradientSync::share_update(const TensorView& params) {
  // ZeRO 3 gathers parameters when a block runs (ShardedParameters), not after the update.
  if (zero_stage_ == 0 || zero_stage_ == 3) return;
  const std::vector<size_t> counts = shard_counts(total_, shard_ranks_, 0, total_);
  const TensorView mine = params.slice(shard_.begin, shard_.size());
  sharding_->allgather(mine.data, params.data, counts, params.dtype)->wait();
}

TensorView GradientSync::shard_grads() const {
  return zero_stage_ < 2 ? full_.view().slice(shard_.begin, shard_.size()) : shard_acc_.view();
}

size_t GradientSync::gradient_bytes() const {
  return full_.bytes() + shard_acc_.bytes() + slots_.bytes() + dedicated_.bytes();
}

double covered_seconds(std::vector<std::pair<double, double>> spans) {
  // Sorted by start, each span adds what reaches past the ones before it.
  std::sort(spans.begin(), spans.end());
  double covered = 0, reached = -std::numeric_limits<double>::infinity();
  for (const auto& [from, to] : spans) {
    covered += std::max(0.0, to - std::max(from, reached));
    reached = std::max(reached, to);
  }
  return covered;
}

ReductionTimes GradientSync::reduction_times() const {
  return {device_timed_ ? device_seconds_ : covered_seconds(spans_), exposed_seconds_};
}

double GradientSync::take_wait_seconds() {
  const double s = wait_seconds_;
  wait_seconds_ = 0;
  return s;
}

}  // namespace feast
