// Context parallelism (Megatron-LM's; ring attention, Liu et al. 2023): the cp ranks of a group
// share every sequence. Its T tokens are cut into 2 cp chunks of T / (2 cp); rank r holds chunks
// r and 2 cp - 1 - r, so under the causal mask every rank has the same work (an early chunk,
// with little to attend to, beside a late one, with much). Everything but attention works token
// by token and runs on the rank's own T / cp tokens; positions (rotary tables, learned position
// rows) are the tokens' places in the whole sequence.
//
// Attention runs as a ring over the group: each rank's keys and values travel once round it,
// passed to rank r + 1 while the block that arrived last is computed (FlashAttention's online
// softmax merges the blocks; Backend::ring_attention_*). In the backward the key/value blocks
// go round again, each followed by its gradient accumulator: a rank computes its share of a
// block's gradient while the accumulated share of the ranks before it arrives, adds the two and
// passes the sum on; after the last step each rank holds its own block's whole gradient.
// Legend: B batch, T this rank's tokens of a sequence (T_whole / cp), N = B T, NH / NKV this
// rank's query / key-value heads, hs head size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/tensor.h"

namespace feast {

// The stage's buffers for the ring, shared by its layers (one runs at a time).
struct RingScratch {
  TensorView kv[2];      // (N, 2 NKV hs), compute dtype: the block being computed, the one arriving
  TensorView dkv[2];     // (N, 2 NKV hs), float32: the gradient travelling with a block, the arriving one
  TensorView dkv_block;  // (N, 2 NKV hs), float32: this rank's share of a block's gradient, computed
                         // while the share of the ranks before it arrives
  TensorView acc;        // (N, NH hs), float32: the running output; in the backward, dq
  TensorView workspace;  // float32, Backend::ring_attention_workspace_size
};

// What the ring moved and waited for since the last take.
struct RingTraffic {
  double seconds = 0;       // in the ring's attention: block computations, transfers and waits
  double wait_seconds = 0;  // of which blocked on a transfer the block computations did not hide
  double bytes_sent = 0;
  RingTraffic& operator+=(const RingTraffic& o) {
    seconds += o.seconds;
    wait_seconds += o.wait_seconds;
    bytes_sent += o.bytes_sent;
    return *this;
  }
};

// The global chunk indices (of 2 cp per sequence) group rank r of cp holds: r and 2 cp - 1 - r.
inline std::array<int, 2> context_chunks(int r, int cp) { return {r, 2 * cp - 1 - r}; }

// Group rank `rank`'s T_whole / cp tokens of each of B rows of T_whole (row-major, both): its two
// chunks. Throws when 2 cp does not divide T_whole.
void take_context_share(const int32_t* whole, int32_t* local, int B, int T_whole, int rank, int cp);

class ContextParallel {
 public:
  // group: the context-parallel communicator, null when size == 1.
  ContextParallel(Communicator* group, int rank, int size);

  bool active() const { return size_ > 1; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // The place in the whole sequence of this rank's token t (of its T per sequence).
  int position(int t, int T) const;

  // y (N, NH hs) = causal attention of this rank's queries over the whole sequence's keys, from
  // qkv (N, (NH + 2 NKV) hs); lse (B, NH, T) float32 kept for the backward.
  void attention_forward(Backend& backend, const RingScratch& ring, const TensorView& y, const TensorView& lse,
                         const TensorView& qkv, const AttentionShape& s);
  // dqkv (N, (NH + 2 NKV) hs) from dy, with the forward's y and lse.
  void attention_backward(Backend& backend, const RingScratch& ring, const TensorView& dqkv, const TensorView& dy,
                          const TensorView& y, const TensorView& lse, const TensorView& qkv, const AttentionShape& s);

  RingTraffic take_traffic();

 private:
  RingBlock block(const AttentionShape& s, int step) const;
  // Posts the send of `out` to the next rank and the receive of `in` from the previous one.
  WorkHandle pass_on(const TensorView& out, const TensorView& in, int tag);
  // Waits for a transfer, timing only what the block computations did not hide: the device's
  // queued work is finished first (on a GPU the transfer is ordered after the block before it).
  void wait(Backend& backend, WorkHandle& work);

  Communicator* group_;
  int rank_, size_;
  RingTraffic traffic_;
};

}  // namespace feast
