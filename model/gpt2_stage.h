// One rank's part of GPT-2 on the CPU backend: a pipeline stage (a range of blocks, plus the
// embedding on the first stage and the final LayerNorm, tied head and cross-entropy on the last)
// of one tensor-parallel slice (Megatron style: column-parallel QKV and FC, row-parallel
// projections, vocab-parallel embedding and loss). With StageSpec::whole it is the whole model
// on one rank. It owns the flat parameter buffer and one set of activations per pipeline slot
// (micro-batches in flight), sized once: the step never allocates.
// Legend: B batch, T time, C channels, t tp degree, NH heads, Vp padded vocabulary, Vl = Vp / t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/communicator.h"
#include "model/gradient_sink.h"
#include "model/model_config.h"
#include "model/parameters.h"
#include "model/stage_spec.h"

namespace feast {

class GPT2Stage {
 public:
  // Activations for `slots` micro-batches of up to max_batch x max_seq tokens. tp_comm is the
  // tensor-parallel group (null when spec.tp == 1).
  GPT2Stage(const ModelConfig& config, const StageSpec& spec, int max_batch, int max_seq, int slots,
            Communicator* tp_comm);
  GPT2Stage(const GPT2Stage&) = delete;
  GPT2Stage& operator=(const GPT2Stage&) = delete;

  const ModelConfig& config() const { return config_; }
  const LocalTable& table() const { return table_; }
  float* params() { return params_.data(); }
  size_t num_params() const { return params_.size(); }
  size_t activation_bytes() const { return (acts_.size() + scratch_.size()) * sizeof(float); }
  int slots() const { return slots_; }

  // Where backward adds parameter gradients; must be set before the first backward (the caller
  // owns gradient memory: a full buffer, or ZeRO-2's staging).
  void set_gradient_sink(GradientSink* sink) { sink_ = sink; }

  // The token embedding's gradient is acquired in chunks of whole rows of at most max_elems
  // elements (it is the largest tensor: a ZeRO-2 bucket should not have to hold all of it).
  // Call before gradient_ranges(); the default is one chunk.
  void set_gradient_range_limit(size_t max_elems);

  // The ranges of the flat buffer that backward acquires from the sink (each layer, ln_f, wpe,
  // the token-embedding chunks), and the token-embedding chunks alone with how many times one
  // backward acquires each (the head and the embedding each do once).
  std::vector<FlatRange> gradient_ranges() const;
  const std::vector<FlatRange>& wte_ranges() const { return wte_chunks_; }
  int wte_uses_per_backward() const { return int(spec_.has_head) + int(spec_.has_embedding); }

  // Pipeline I/O, each (B, T, C): the activation a non-first stage receives into before
  // forward(slot); the activation a non-last stage sends after forward(slot); the gradient a
  // non-last stage receives into before backward (one buffer: backward consumes it at once);
  // the gradient of the input a non-first stage sends after backward.
  float* input(int slot) { return slot_acts_[slot].input; }
  const float* output(int slot) const;
  float* output_grad() { return dres_; }
  const float* input_grad() const { return dres_; }

  // Forward of one micro-batch into `slot`. The first stage reads tokens (B, T); the last reads
  // targets (B, T), computes the loss and, when loss_scale != 0, already turns the logits into
  // their gradient for d(loss_scale * sum of token losses). Returns the micro-batch's mean
  // token loss on the last stage, 0 elsewhere.
  float forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale);

  // Backward of the micro-batch in `slot` (forwarded with a non-zero loss_scale). Non-last
  // stages first receive the output gradient into output_grad(). Parameter gradients are added
  // through the sink; non-first stages leave the input gradient in input_grad().
  void backward(int slot, const int32_t* tokens, int B, int T);

  // This rank's (B*T, Vl) logits of `slot` after a forward with loss_scale == 0 (tests).
  const float* logits(int slot) const { return slot_acts_[size_t(slot)].logits; }

  // Seconds spent in tensor-parallel communication since the last call (for the time split).
  double take_tp_comm_seconds();

 private:
  struct LayerParams {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  };
  struct LayerActs {
    float* ln1;       // (B, T, C)
    float* ln1_mean;  // (B, T)
    float* ln1_rstd;  // (B, T)
    float* qkv;       // (B, T, 3C/t) this rank's heads: [q | k | v]
    float* atty;      // (B, T, C/t) attention output before the projection
    float* att;       // (B, NH/t, T, T) softmax probabilities
    float* res2;      // (B, T, C) residual stream after attention
    float* ln2;       // (B, T, C)
    float* ln2_mean;  // (B, T)
    float* ln2_rstd;  // (B, T)
    float* fch;       // (B, T, 4C/t) MLP pre-activation
    float* fch_gelu;  // (B, T, 4C/t)
    float* res3;      // (B, T, C) the block's output
  };
  struct SlotActs {
    float* input;  // (B, T, C) embedding output or received activation
    std::vector<LayerActs> layers;
    float *lnf, *lnf_mean, *lnf_rstd;  // (B, T, C), (B, T), (B, T)
    float* logits;                     // (B, T, Vl); becomes dlogits in a training forward
    float* losses;                     // (B, T)
  };

  // Flat offsets of one layer's tensors in table order; each op's weight and bias are adjacent,
  // so [w, next op's w) is the range of that op's gradients.
  struct LayerOffsets {
    size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b, end;
  };
  // One op's gradient range acquired from the sink: weight and bias views, handed back with
  // release() (explicitly, not in a destructor: a ZeRO-2 release may wait and throw).
  struct OpGrads {
    OpGrads(GradientSink& sink, size_t weight, size_t bias, size_t end);
    void release() { sink.release(begin, end); }
    GradientSink& sink;
    size_t begin, end;
    float* w;
    float* b;
  };

  LayerParams layer_params(const LayerOffsets& o);
  // The local token-embedding rows [first, last) a gradient chunk covers.
  std::pair<int, int> wte_rows(const FlatRange& chunk) const;
  float* param_at(size_t offset) { return params_.data() + offset; }
  void tp_allreduce(float* data, size_t count, ReduceOp op = ReduceOp::kSum);
  // Megatron's conjugate pair, (B*T, C) activations: reduce-from-tp sums the partial outputs of
  // a row-parallel layer in the forward (identity in the backward); copy-to-tp is the identity
  // in the forward and sums the partial input gradients of a column-parallel layer in the
  // backward.
  void reduce_from_tp_forward(float* x, int BT) { tp_allreduce(x, size_t(BT) * size_t(C_)); }
  void copy_to_tp_backward(float* dx, int BT) { tp_allreduce(dx, size_t(BT) * size_t(C_)); }

  ModelConfig config_;
  StageSpec spec_;
  ParamTable logical_;
  LocalTable table_;
  int max_batch_, max_seq_, slots_;
  Communicator* tp_;
  int C_, Cl_, NHl_, Vl_, vocab_begin_;  // full and local widths
  Buffer<float> params_;
  GradientSink* sink_ = nullptr;
  Buffer<float> acts_, scratch_;
  std::vector<SlotActs> slot_acts_;
  std::vector<LayerParams> layer_w_;  // per local layer, views into params_
  std::vector<LayerOffsets> layer_offsets_;
  FlatRange wte_range_, wpe_range_, lnf_range_;  // lnf_range_: ln_f.weight then ln_f.bias
  size_t lnf_bias_ = 0;                          // offset of ln_f.bias
  std::vector<FlatRange> wte_chunks_;  // wte_range_ in gradient chunks of whole rows
  float *tmp_, *dres_, *dln_, *dbig_, *dqkv_, *dy_, *att_scratch_;
  float *ce_max_, *ce_partials_;  // (B*T), (2, B*T): vocab-parallel loss reductions
  double tp_comm_seconds_ = 0;
};

}  // namespace feast
