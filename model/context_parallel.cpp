#include "model/context_parallel.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace feast {

ContextParallel::ContextParallel(Communicator* group, int rank, int size) : group_(group), rank_(rank), size_(size) {
  FEAST_CHECK(size >= 1 && rank >= 0 && rank < size, "context-parallel rank " << rank << " of " << size);
  FEAST_CHECK(size == 1 || (group && group->size() == size && group->rank() == rank),
              "the context-parallel group does not match rank " << rank << " of " << size);
}

int ContextParallel::position(int t, int T) const {
  const int c = T / 2;  // this rank's tokens are two chunks of c
  const std::array<int, 2> mine = context_chunks(rank_, size_);
  return mine[size_t(t / c)] * c + t % c;
}

void take_context_share(const int32_t* whole, int32_t* local, int B, int T_whole, int rank, int cp) {
  FEAST_CHECK(T_whole % (2 * cp) == 0,
              "a sequence of " << T_whole << " tokens does not split into " << 2 * cp << " equal chunks");
  const int T = T_whole / cp, c = T / 2;
  const std::array<int, 2> mine = context_chunks(rank, cp);
  for (int b = 0; b < B; ++b)
    for (int half = 0; half < 2; ++half) {
      const int32_t* from = whole + size_t(b) * T_whole + size_t(mine[size_t(half)]) * c;
      std::copy(from, from + c, local + size_t(b) * T + size_t(half) * c);
    }
}

RingBlock ContextParallel::block(const AttentionShape& s, int step) const {
  // At step k a rank computes with the keys and values of group rank r - k (they came round).
  const int from = (rank_ - step + size_) % size_;
  const std::array<int, 2> q = context_chunks(rank_, size_), kv = context_chunks(from, size_);
  return RingBlock{s, {q[0], q[1]}, {kv[0], kv[1]}};
}

WorkHandle ContextParallel::pass_on(const TensorView& out, const TensorView& in, int tag) {
  traffic_.bytes_sent += double(out.bytes());
  return group_->sendrecv(out.data, out.numel, (rank_ + 1) % size_, tag, in.data, in.numel,
                          (rank_ - 1 + size_) % size_, tag, out.dtype);
}

void ContextParallel::wait(Backend& backend, WorkHandle& work) {
  if (!work) return;
  // The block computation queued before it is compute, not waiting: the device finishes it first
  // so the timer sees only the transfer. A transfer already done needs neither (and the device
  // keeps its queue).
  if (!work->test()) backend.stream().synchronize();
  Timer t;
  work->wait();
  work.reset();
  traffic_.wait_seconds += t.seconds();
}

void ContextParallel::attention_forward(Backend& backend, const RingScratch& ring, const TensorView& y,
                                        const TensorView& lse, const TensorView& qkv, const AttentionShape& s) {
  const Timer span;
  const size_t kv_numel = s.rows() * size_t(s.kv_width());
  const TensorView kv[2] = {ring.kv[0].first(kv_numel), ring.kv[1].first(kv_numel)};
  const TensorView acc = ring.acc.first(s.rows() * size_t(s.out_width()));
  backend.ring_attention_pack(kv[0], qkv, s);
  for (int step = 0; step < size_; ++step) {
    // The next block travels while this one computes; it lands in the buffer the previous
    // step computed with (its reads are queued before the receive).
    WorkHandle next;
    if (step + 1 < size_) next = pass_on(kv[step % 2], kv[(step + 1) % 2], step);
    backend.ring_attention_forward(acc, lse, qkv, kv[step % 2], ring.workspace, block(s, step), step == 0);
    wait(backend, next);
  }
  backend.cast(y.first(acc.numel), acc);
  traffic_.seconds += span.seconds();
}

void ContextParallel::attention_backward(Backend& backend, const RingScratch& ring, const TensorView& dqkv,
                                         const TensorView& dy, const TensorView& y, const TensorView& lse,
                                         const TensorView& qkv, const AttentionShape& s) {
  const Timer span;
  const size_t kv_numel = s.rows() * size_t(s.kv_width());
  const TensorView kv[2] = {ring.kv[0].first(kv_numel), ring.kv[1].first(kv_numel)};
  const TensorView dkv[2] = {ring.dkv[0].first(kv_numel), ring.dkv[1].first(kv_numel)};
  const TensorView mine = ring.dkv_block.first(kv_numel);
  const TensorView dq = ring.acc.first(s.rows() * size_t(s.out_width()));
  backend.ring_attention_pack(kv[0], qkv, s);
  backend.zero(dq);
  backend.zero(dkv[0]);
  // At step k this rank holds the keys and values of rank r - k, and the gradient of that block
  // summed over the ranks it has visited arrives in dkv[k % 2] (posted at the end of step k - 1)
  // while this rank computes its own share into `mine`; the two are added and passed on. The
  // block goes on ahead meanwhile. Step 0's block is this rank's own: its gradient starts here.
  WorkHandle grad;
  for (int step = 0; step < size_; ++step) {
    const int cur = step % 2, other = (step + 1) % 2;
    WorkHandle next;
    if (step + 1 < size_) next = pass_on(kv[cur], kv[other], 2 * step);
    const RingBlock b = block(s, step);
    if (step == 0) {
      backend.ring_attention_backward(dq, dkv[cur], dy, y, lse, qkv, kv[cur], ring.workspace, b);
    } else {
      backend.zero(mine);
      backend.ring_attention_backward(dq, mine, dy, y, lse, qkv, kv[cur], ring.workspace, b);
      wait(backend, grad);
      backend.add(dkv[cur], dkv[cur], mine, kv_numel);
    }
    wait(backend, next);
    // The block's gradient follows it; after the last step each rank receives its own block's.
    grad = pass_on(dkv[cur], dkv[other], 2 * step + 1);
  }
  wait(backend, grad);
  backend.ring_attention_unpack(dqkv, dq, dkv[size_ % 2], s);
  traffic_.seconds += span.seconds();
}

RingTraffic ContextParallel::take_traffic() {
  const RingTraffic t = traffic_;
  traffic_ = {};
  return t;
}

}  // namespace feast
