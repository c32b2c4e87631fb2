#include "model/gpt2_stage.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "model/cpu/attention.h"
#include "model/cpu/cross_entropy.h"
#include "model/cpu/encoder.h"
#include "model/cpu/gelu.h"
#include "model/cpu/layernorm.h"
#include "model/cpu/matmul.h"
#include "model/cpu/residual.h"

namespace feast {

GPT2Stage::GPT2Stage(const ModelConfig& config, const StageSpec& spec, int max_batch, int max_seq, int slots,
                     Communicator* tp_comm)
    : config_(config),
      spec_(spec),
      logical_(gpt2_param_table(config)),
      table_(logical_, spec),
      max_batch_(max_batch),
      max_seq_(max_seq),
      slots_(slots),
      tp_(tp_comm) {
  FEAST_CHECK(config.n_embd % config.n_head == 0, "model.n_embd must be divisible by model.n_head");
  FEAST_CHECK(max_seq <= config.max_seq_len,
              "sequence length " << max_seq << " exceeds model.max_seq_len " << config.max_seq_len);
  FEAST_CHECK(spec.tp == 1 || (tp_comm && tp_comm->size() == spec.tp),
              "a tensor-parallel stage needs its tp communicator of size " << spec.tp);
  if (config.n_head % spec.tp != 0)
    throw ConfigError("parallel.tp = " + std::to_string(spec.tp) + " does not divide model.n_head = " +
                      std::to_string(config.n_head));
  C_ = config.n_embd;
  Cl_ = C_ / spec.tp;
  NHl_ = config.n_head / spec.tp;
  Vl_ = config.padded_vocab() / spec.tp;
  vocab_begin_ = spec.tp_rank * Vl_;
  params_ = Buffer<float>(table_.total_numel());

  const size_t BT = size_t(max_batch) * max_seq, C = C_, Cl = Cl_;
  const size_t att = size_t(max_batch) * NHl_ * max_seq * max_seq;
  const size_t per_layer = BT * (C + 2 + 3 * Cl + Cl + C + C + 2 + 4 * Cl + 4 * Cl + C) + att;
  const size_t head = spec.has_head ? BT * (C + 2 + size_t(Vl_) + 1) : 0;
  acts_ = Buffer<float>(size_t(slots) * (BT * C + size_t(spec.num_layers) * per_layer + head));
  float* p = acts_.data();
  auto take = [&p](size_t n) {
    float* view = p;
    p += n;
    return view;
  };
  slot_acts_.resize(size_t(slots));
  for (SlotActs& s : slot_acts_) {
    s.input = take(BT * C);
    s.layers.resize(size_t(spec.num_layers));
    for (LayerActs& a : s.layers) {
      a.ln1 = take(BT * C);
      a.ln1_mean = take(BT);
      a.ln1_rstd = take(BT);
      a.qkv = take(BT * 3 * Cl);
      a.atty = take(BT * Cl);
      a.att = take(att);
      a.res2 = take(BT * C);
      a.ln2 = take(BT * C);
      a.ln2_mean = take(BT);
      a.ln2_rstd = take(BT);
      a.fch = take(BT * 4 * Cl);
      a.fch_gelu = take(BT * 4 * Cl);
      a.res3 = take(BT * C);
    }
    if (spec.has_head) {
      s.lnf = take(BT * C);
      s.lnf_mean = take(BT);
      s.lnf_rstd = take(BT);
      s.logits = take(BT * size_t(Vl_));
      s.losses = take(BT);
    }
  }

  const size_t att_scratch = static_cast<size_t>(cpu::attention_scratch_size(max_seq));
  scratch_ = Buffer<float>(BT * (C + C + 4 * Cl + 3 * Cl + Cl + 3) + att_scratch);
  p = scratch_.data();
  tmp_ = take(BT * C);
  dres_ = take(BT * C);
  dbig_ = take(BT * 4 * Cl);
  dqkv_ = take(BT * 3 * Cl);
  dy_ = take(BT * Cl);
  ce_max_ = take(BT);
  ce_partials_ = take(2 * BT);
  att_scratch_ = take(att_scratch);
  dln_ = tmp_;  // the forward's temporary is free during the backward

  for (int i = 0; i < spec.num_layers; ++i) {
    const std::string prefix = "layers." + std::to_string(spec.first_layer + i) + ".";
    auto at = [&](const char* name) { return table_.at(prefix + name).offset; };
    const LocalParam& last = table_.at(prefix + "mlp.proj.bias");
    layer_offsets_.push_back({at("ln_1.weight"), at("ln_1.bias"), at("attn.qkv.weight"), at("attn.qkv.bias"),
                              at("attn.proj.weight"), at("attn.proj.bias"), at("ln_2.weight"), at("ln_2.bias"),
                              at("mlp.fc.weight"), at("mlp.fc.bias"), at("mlp.proj.weight"), at("mlp.proj.bias"),
                              last.offset + last.numel});
    layer_w_.push_back(layer_params(layer_offsets_.back()));
  }
  auto range_of = [&](const char* name) {
    if (!table_.contains(name)) return FlatRange{};
    const LocalParam& lp = table_.at(name);
    return FlatRange{lp.offset, lp.offset + lp.numel};
  };
  wte_range_ = range_of("wte.weight");
  wpe_range_ = range_of("wpe.weight");
  const FlatRange lnf_w = range_of("ln_f.weight"), lnf_b = range_of("ln_f.bias");
  lnf_range_ = {lnf_w.begin, lnf_b.end};
  lnf_bias_ = lnf_b.begin;
  set_gradient_range_limit(wte_range_.end - wte_range_.begin);
}

void GPT2Stage::set_gradient_range_limit(size_t max_elems) {
  wte_chunks_.clear();
  if (wte_range_.end == wte_range_.begin) return;
  const size_t row = size_t(C_), rows = std::max<size_t>(1, max_elems / row);
  for (size_t b = wte_range_.begin; b < wte_range_.end; b += rows * row)
    wte_chunks_.push_back({b, std::min(wte_range_.end, b + rows * row)});
}

std::vector<FlatRange> GPT2Stage::gradient_ranges() const {
  std::vector<FlatRange> out = wte_chunks_;
  for (const FlatRange& r : {wpe_range_, lnf_range_})
    if (r.end > r.begin) out.push_back(r);
  for (const LayerOffsets& o : layer_offsets_)
    for (const FlatRange& r : {FlatRange{o.ln1_w, o.qkv_w}, FlatRange{o.qkv_w, o.proj_w}, FlatRange{o.proj_w, o.ln2_w},
                               FlatRange{o.ln2_w, o.fc_w}, FlatRange{o.fc_w, o.fcproj_w}, FlatRange{o.fcproj_w, o.end}})
      out.push_back(r);
  return out;
}

std::pair<int, int> GPT2Stage::wte_rows(const FlatRange& chunk) const {
  return {int((chunk.begin - wte_range_.begin) / size_t(C_)), int((chunk.end - wte_range_.begin) / size_t(C_))};
}

GPT2Stage::LayerParams GPT2Stage::layer_params(const LayerOffsets& o) {
  float* p = params_.data();
  return {p + o.ln1_w, p + o.ln1_b, p + o.qkv_w,    p + o.qkv_b,  p + o.proj_w,   p + o.proj_b,
          p + o.ln2_w, p + o.ln2_b, p + o.fc_w,     p + o.fc_b,   p + o.fcproj_w, p + o.fcproj_b};
}

GPT2Stage::OpGrads::OpGrads(GradientSink& s, size_t weight, size_t bias, size_t e)
    : sink(s), begin(weight), end(e), w(s.acquire(weight, e)), b(w + (bias - weight)) {}

const float* GPT2Stage::output(int slot) const {
  const SlotActs& s = slot_acts_[size_t(slot)];
  return s.layers.empty() ? s.input : s.layers.back().res3;
}

void GPT2Stage::tp_allreduce(float* data, size_t count, ReduceOp op) {
  if (!tp_) return;
  Timer t;
  CollectiveOptions opts;
  opts.op = op;
  tp_->allreduce(data, count, DType::kFloat32, opts)->wait();
  tp_comm_seconds_ += t.seconds();
}

double GPT2Stage::take_tp_comm_seconds() {
  const double s = tp_comm_seconds_;
  tp_comm_seconds_ = 0;
  return s;
}

float GPT2Stage::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale) {
  FEAST_CHECK(slot >= 0 && slot < slots_ && B >= 1 && B <= max_batch_ && T >= 1 && T <= max_seq_,
              "micro-batch " << B << "x" << T << " in slot " << slot << " exceeds the allocated " << slots_
                             << " x " << max_batch_ << "x" << max_seq_);
  SlotActs& s = slot_acts_[size_t(slot)];
  const int BT = B * T, C = C_, Cl = Cl_;
  if (spec_.has_embedding) {
    // Vocab-parallel: each rank embeds its own rows; one rank adds positions; the sum is the
    // embedding.
    const float* wpe = spec_.tp_rank == 0 ? param_at(wpe_range_.begin) : nullptr;
    cpu::encoder_forward(s.input, tokens, param_at(wte_range_.begin), wpe, B, T, C, vocab_begin_, vocab_begin_ + Vl_);
    reduce_from_tp_forward(s.input, BT);
  }
  const float* x = s.input;
  for (int i = 0; i < spec_.num_layers; ++i) {
    const LayerParams& w = layer_w_[size_t(i)];
    LayerActs& a = s.layers[size_t(i)];
    // Row-parallel projections add their (replicated) bias on one rank before the sum.
    const bool bias_rank = spec_.tp_rank == 0;
    cpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, BT, C);
    cpu::matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, BT, C, 3 * Cl);
    cpu::attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl_);
    cpu::matmul_forward(tmp_, a.atty, w.proj_w, bias_rank ? w.proj_b : nullptr, BT, Cl, C);
    reduce_from_tp_forward(tmp_, BT);
    cpu::residual_forward(a.res2, x, tmp_, size_t(BT) * C);
    cpu::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, BT, C);
    cpu::matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, BT, C, 4 * Cl);
    cpu::gelu_forward(a.fch_gelu, a.fch, size_t(BT) * 4 * Cl);
    cpu::matmul_forward(tmp_, a.fch_gelu, w.fcproj_w, bias_rank ? w.fcproj_b : nullptr, BT, 4 * Cl, C);
    reduce_from_tp_forward(tmp_, BT);
    cpu::residual_forward(a.res3, a.res2, tmp_, size_t(BT) * C);
    x = a.res3;
  }
  if (!spec_.has_head) return 0.0f;

  cpu::layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, param_at(lnf_range_.begin), param_at(lnf_bias_), BT, C);
  cpu::matmul_forward(s.logits, s.lnf, param_at(wte_range_.begin), static_cast<const float*>(nullptr), BT, C, Vl_);
  // Vocab-parallel cross-entropy: reduce the row maxima, then the sums of exponentials and the
  // target logits, never the logits themselves.
  const int V = config_.vocab_size;
  cpu::cross_entropy_row_max(ce_max_, s.logits, BT, Vl_, vocab_begin_, V);
  tp_allreduce(ce_max_, size_t(BT), ReduceOp::kMax);
  float* sum_exp = ce_partials_;
  float* target_logit = ce_partials_ + BT;
  cpu::cross_entropy_partials(sum_exp, target_logit, s.logits, ce_max_, targets, BT, Vl_, vocab_begin_, V,
                              loss_scale != 0.0f);
  tp_allreduce(ce_partials_, size_t(2) * BT);  // sum_exp and target_logit are adjacent
  cpu::cross_entropy_finish(s.logits, s.losses, ce_max_, sum_exp, target_logit, targets, BT, Vl_, vocab_begin_, V,
                            loss_scale);
  double sum = 0;
  for (int i = 0; i < BT; ++i) sum += s.losses[i];
  return static_cast<float>(sum / BT);
}

void GPT2Stage::backward(int slot, const int32_t* tokens, int B, int T) {
  FEAST_CHECK(sink_, "GPT2Stage::backward needs a gradient sink");
  SlotActs& s = slot_acts_[size_t(slot)];
  const int BT = B * T, C = C_, Cl = Cl_;
  // Gradient views: base pointers into the sink's memory for one range at a time.
  if (spec_.has_head) {
    const float* wte = param_at(wte_range_.begin);
    // Tied head: dwte += dlogits^T lnf, chunk by chunk of rows; dlnf = dlogits @ wte (partial
    // over the vocabulary slices).
    for (const FlatRange& c : wte_chunks_) {
      const auto [r0, r1] = wte_rows(c);
      cpu::matmul_backward_weight_rows(sink_->acquire(c.begin, c.end), s.logits, s.lnf, BT, C, Vl_, r0, r1);
      sink_->release(c.begin, c.end);
    }
    cpu::matmul_backward_input(dln_, s.logits, wte, BT, C, Vl_);
    float* glnf = sink_->acquire(lnf_range_.begin, lnf_range_.end);
    const float* x_last = s.layers.empty() ? s.input : s.layers.back().res3;
    copy_to_tp_backward(dln_, BT);
    std::fill(dres_, dres_ + size_t(BT) * C, 0.0f);
    cpu::layernorm_backward(dres_, glnf, glnf + (lnf_bias_ - lnf_range_.begin), dln_, x_last,
                            param_at(lnf_range_.begin), s.lnf_mean, s.lnf_rstd, BT, C);
    sink_->release(lnf_range_.begin, lnf_range_.end);
  }
  // dres_ carries d loss / d (residual stream) backwards through the blocks (on non-last
  // stages it arrives from the next stage).
  for (int i = spec_.num_layers - 1; i >= 0; --i) {
    const LayerOffsets& o = layer_offsets_[size_t(i)];
    const LayerParams& w = layer_w_[size_t(i)];
    const LayerActs& a = s.layers[size_t(i)];
    const float* x = i > 0 ? s.layers[size_t(i) - 1].res3 : s.input;
    // Each op's gradients are acquired just before it writes them and released right after,
    // so a ZeRO-2 sink can reduce them while the rest of the backward runs.
    // MLP: the residual gradient is also the gradient of the row-parallel projection's output.
    OpGrads fcproj(*sink_, o.fcproj_w, o.fcproj_b, o.end);
    cpu::matmul_backward(dbig_, fcproj.w, fcproj.b, dres_, a.fch_gelu, w.fcproj_w, BT, 4 * Cl, C);
    fcproj.release();
    cpu::gelu_backward(dbig_, a.fch, dbig_, size_t(BT) * 4 * Cl);
    OpGrads fc(*sink_, o.fc_w, o.fc_b, o.fcproj_w);
    cpu::matmul_backward(dln_, fc.w, fc.b, dbig_, a.ln2, w.fc_w, BT, C, 4 * Cl);
    fc.release();
    copy_to_tp_backward(dln_, BT);
    OpGrads ln2(*sink_, o.ln2_w, o.ln2_b, o.fc_w);
    cpu::layernorm_backward(dres_, ln2.w, ln2.b, dln_, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, BT, C);
    ln2.release();
    // Attention.
    OpGrads proj(*sink_, o.proj_w, o.proj_b, o.ln2_w);
    cpu::matmul_backward(dy_, proj.w, proj.b, dres_, a.atty, w.proj_w, BT, Cl, C);
    proj.release();
    cpu::attention_backward(dqkv_, dy_, a.qkv, a.att, B, T, Cl, NHl_, att_scratch_);
    OpGrads qkv(*sink_, o.qkv_w, o.qkv_b, o.proj_w);
    cpu::matmul_backward(dln_, qkv.w, qkv.b, dqkv_, a.ln1, w.qkv_w, BT, C, 3 * Cl);
    qkv.release();
    copy_to_tp_backward(dln_, BT);
    OpGrads ln1(*sink_, o.ln1_w, o.ln1_b, o.qkv_w);
    cpu::layernorm_backward(dres_, ln1.w, ln1.b, dln_, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, BT, C);
    ln1.release();
  }
  if (spec_.has_embedding) {
    // wpe's gradient is the same on every tp rank (dres_ is replicated); it is added with the
    // first chunk of token rows. Each chunk takes the tokens in its rows.
    float* gwpe = sink_->acquire(wpe_range_.begin, wpe_range_.end);
    for (const FlatRange& c : wte_chunks_) {
      const auto [r0, r1] = wte_rows(c);
      cpu::encoder_backward(sink_->acquire(c.begin, c.end), c.begin == wte_range_.begin ? gwpe : nullptr, dres_, tokens,
                            B, T, C, vocab_begin_ + r0, vocab_begin_ + r1);
      sink_->release(c.begin, c.end);
    }
    sink_->release(wpe_range_.begin, wpe_range_.end);
  }
}

}  // namespace feast
