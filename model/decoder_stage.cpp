#include "model/decoder_stage.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "core/error.h"
#include "model/rope.h"

namespace feast {
namespace {

// LoRA's base weights stored apart (model/quantized_base.h): in bfloat16 unless that is the
// compute dtype already, or in NF4; null when they stay in the frozen buffer.
std::unique_ptr<QuantizedBase> stored_apart_for(const ModelConfig& config, const StageSpec& spec,
                                                const LoraSpec& lora, Backend& backend) {
  if (!base_stored_apart(lora, backend.compute_dtype())) return nullptr;
  return std::make_unique<QuantizedBase>(config, spec, lora.base, lora.double_quant, backend);
}

// Whole rows of at most max_elems elements (at least one row) of a (rows, C) tensor's range.
std::vector<FlatRange> row_chunks(const LocalParam& p, size_t max_elems) {
  const size_t row = size_t(p.shape[1]), rows = std::max<size_t>(1, max_elems / row);
  const size_t begin = p.offset, end = p.offset + p.numel;
  std::vector<FlatRange> chunks;
  for (size_t b = begin; b < end; b += rows * row) chunks.push_back({b, std::min(end, b + rows * row)});
  return chunks;
}

}  // namespace

DecoderStage::DecoderStage(const ModelConfig& config, const StageSpec& spec, const StageShape& shape,
                           Backend& backend, Communicator* tp_comm, Communicator* cp_comm, const LoraSpec& lora)
    : config_(config),
      arch_(decoder_arch(config)),
      spec_(spec),
      shape_(shape),
      backend_(backend),
      tp_(spec.tp > 1 ? tp_comm : nullptr, spec.tp_rank, spec.tp, shape.sequence_parallel),
      cp_(shape.cp > 1 ? cp_comm : nullptr, shape.cp_rank, shape.cp),
      logical_(lora.enabled() ? lora_param_table(config, lora) : decoder_param_table(config)),
      table_(logical_, spec),
      apart_(stored_apart_for(config, spec, lora, backend)),
      frozen_logical_(!lora.enabled() ? ParamTable(std::vector<ParamSpec>{})
                      : apart_        ? without_stored_apart(decoder_param_table(config))
                                      : decoder_param_table(config)),
      units_(feast::parameter_units(table_)),
      activations_(backend, shape.slots, shape.split_backward) {
  FEAST_CHECK(shape.max_seq * shape.cp <= config.max_seq_len,
              "sequence length " << shape.max_seq * shape.cp << " exceeds model.max_seq_len " << config.max_seq_len);
  FEAST_CHECK(shape.cp == 1 || shape.max_seq % 2 == 0,
              "a context-parallel rank's " << shape.max_seq << " tokens per sequence are not two equal chunks");
  FEAST_CHECK(config.n_embd % config.n_head == 0, "model.n_embd must be divisible by model.n_head");
  const int t = spec.tp;
  if (config.n_head % t != 0)
    throw ConfigError("parallel.tp = " + std::to_string(t) + " does not divide model.n_head = " +
                      std::to_string(config.n_head));
  if (config.kv_heads() % t != 0)
    throw ConfigError("parallel.tp = " + std::to_string(t) + " does not divide model.n_kv_head = " +
                      std::to_string(config.kv_heads()));
  const int C = config.n_embd, Vl = config.padded_vocab() / t, vocab_begin = spec.tp_rank * Vl;
  const size_t rows = size_t(shape.max_batch) * size_t(shape.max_seq), NC = rows * size_t(C);
  // A sequence-parallel region's rows: the input, the norms, the residual stream.
  const size_t region_rows = size_t(tp_.local_rows(int(rows))), region_NC = region_rows * size_t(C);
  const DType dt = backend.compute_dtype();
  params_ = shape.reserved_parameters ? backend.reserve(dt, table_.total_numel()) : backend.allocate(dt, table_.total_numel());
  FEAST_CHECK(!lora.enabled() || !shape.reserved_parameters, "ZeRO 3 with LoRA");
  FEAST_CHECK(!lora.enabled() || !shape.split_backward, "a split backward with LoRA");
  if (lora.enabled()) {
    frozen_table_.emplace(frozen_logical_, spec);
    frozen_params_ = backend.allocate(dt, frozen_table_->total_numel());
  }
  // The layers read the model's tensors from the base source and LoRA's from the adapters'.
  const LayerParams layer_params{
      config,
      lora.enabled() ? ParamSource{&*frozen_table_, frozen_params_.view(), true, apart_.get()}
                     : ParamSource{&table_, params_.view(), false},
      lora.enabled() ? ParamSource{&table_, params_.view(), false} : ParamSource{},
      lora};

  if (!arch_.learned_positions && spec.num_layers() > 0) {
    std::vector<float> cos, sin;
    rope_tables(config, cos, sin);
    if (cp_.active()) {  // the rows of this rank's positions, so the rope op reads row t for token t
      const size_t half = size_t(config.head_dim() / 2);
      std::vector<float> local_cos(size_t(shape.max_seq) * half), local_sin(local_cos.size());
      for (int row = 0; row < shape.max_seq; ++row) {
        const size_t from = size_t(cp_.position(row, shape.max_seq)) * half, to = size_t(row) * half;
        std::copy_n(cos.begin() + long(from), half, local_cos.begin() + long(to));
        std::copy_n(sin.begin() + long(from), half, local_sin.begin() + long(to));
      }
      cos.swap(local_cos);
      sin.swap(local_sin);
    }
    rope_cos_ = backend.allocate(DType::kFloat32, cos.size());
    rope_sin_ = backend.allocate(DType::kFloat32, sin.size());
    backend.copy(rope_cos_.view(), host_view(cos.data(), cos.size()));
    backend.copy(rope_sin_.view(), host_view(sin.data(), sin.size()));
  }
  if (spec.has_embedding)
    embedding_ = std::make_unique<TokenEmbedding>(layer_params.base, arch_.learned_positions, C, vocab_begin);
  FEAST_CHECK(shape.recompute_layers >= 0, "recompute_layers must not be negative");
  FEAST_CHECK(!spec.chunks.empty() && (spec.chunks.size() == 1 || !shape.split_backward),
              "a stage of " << spec.chunks.size() << " model chunks runs whole backwards");
  blocks_.reserve(size_t(spec.num_layers()));
  const int local_moe_layers = spec.moe_layers(config.moe);
  if (config.moe.enabled()) {
    FEAST_CHECK(spec.chunks.size() == 1 && !shape.split_backward && !shape.sequence_parallel && shape.cp == 1 &&
                    !lora.enabled(),
                "mixture-of-experts blocks run with one model chunk per stage, whole backwards, no sequence or "
                "context parallelism and no LoRA");
    moe_ = std::make_unique<MoeRecorder>(config.moe, shape.slots, config.moe_layers(), local_moe_layers, spec.ep);
    moe_outgoing_.resize(size_t(shape.slots));
    moe_sends_.resize(size_t(shape.slots));
  }
  int moe_layer = 0;
  for (const LayerRange& chunk : spec.chunks) {
    chunk_begin_.push_back(int(blocks_.size()));
    for (int layer = chunk.first; layer < chunk.first + chunk.count; ++layer) {
      const int i = int(blocks_.size());
      const bool recomputed = shape.recompute_layers == 0 || i < shape.recompute_layers;
      activations_.begin_block();
      blocks_.emplace_back(config, arch_, layer_params, layer, t, region_rows, shape.max_batch, shape.max_seq,
                           activations_, recomputed ? shape.recompute : Recompute::kNone, rope_cos_.view(),
                           rope_sin_.view(), cp_.active(), moe_.get(), moe_layer);
      moe_layer += config.moe.is_moe_layer(layer) ? 1 : 0;
    }
  }
  chunk_begin_.push_back(int(blocks_.size()));
  if (spec.has_head) {
    final_norm_ = std::make_unique<Norm>(arch_.norm, float(config.norm_eps), layer_params.base, "ln_f", C,
                                         region_rows, activations_, true);
    head_ = std::make_unique<LmHead>(layer_params.base.table->at("lm_head.weight"), layer_params.base.values,
                                     layer_params.base.frozen, C, vocab_begin, config.vocab_size, rows, activations_);
  }
  for (size_t chunk = 0; chunk < spec.chunks.size(); ++chunk)
    for (const TensorView& v : activations_.take(true, dt, region_NC)) input_.push_back(v);
  if (spec.has_embedding) tokens_ = activations_.take(true, DType::kInt32, rows);
  if (spec.has_embedding) input_grad_kept_ = activations_.take_output_grads(dt, region_NC);
  if (spec.has_head) targets_ = activations_.take(true, DType::kInt32, rows);
  if (document_masks()) {  // every chunk's slots, in stage-slot order (as input_)
    FEAST_CHECK(shape.cp == 1, "document masks do not run under context parallelism");
    for (size_t chunk = 0; chunk < spec.chunks.size(); ++chunk)
      for (const TensorView& v : activations_.take(true, DType::kInt32, rows)) positions_.push_back(v);
  }

  // Scratch shared by the layers (one runs at a time).
  const int hs = config.head_dim(), NHl = config.n_head / t, NKVl = config.kv_heads() / t;
  // The dense MLP's width, or an MoE block's shared experts' where wider (the same scratch serves).
  const int Il = std::max(config.mlp_width(), config.shared_expert_width()) / t;
  const int Fl = arch_.mlp == MlpKind::kSwiGlu ? 2 * Il : Il;
  const AttentionShape att{shape.max_batch, shape.max_seq, NHl, NKVl, hs};
  auto take = [&](DType dtype, size_t n) {
    scratch_tensors_.push_back(backend.allocate(dtype, n));
    return scratch_tensors_.back().view();
  };
  scratch_.tmp = take(dt, region_NC);
  scratch_.dres = take(dt, region_NC);
  // A split backward keeps each slot's QKV gradient in the attention's own buffers instead.
  if (!shape.split_backward) scratch_.dqkv = take(dt, rows * size_t(att.qkv_width()));
  scratch_.dy = take(dt, rows * size_t(att.out_width()));
  scratch_.dbig = take(dt, rows * size_t(Fl));
  if (arch_.mlp == MlpKind::kSwiGlu) scratch_.dact = take(dt, rows * size_t(Il));
  if (local_moe_layers > 0) {
    const size_t E = size_t(config.moe.n_experts), Nk = rows * size_t(config.moe.top_k);
    const size_t Ie = size_t(config.expert_width() / t);
    const size_t R = expert_rows_bound(config.moe.capacity_factor, int(rows), config.moe.top_k, config.moe.n_experts,
                                       spec.ep);
    MoeScratch& m = scratch_.moe;
    m.logits = take(dt, rows * E);
    m.prob_sum = take(DType::kFloat32, E);
    m.rows = take(dt, Nk * size_t(C));
    m.drows = take(dt, Nk * size_t(C));
    m.dact = take(dt, R * Ie);
    m.dpre = take(dt, R * 2 * Ie);
    if (spec.ep > 1) {
      m.exchange_a = take(dt, R * size_t(C));
      m.exchange_b = take(dt, R * size_t(C));
    }
    m.dweight = take(DType::kFloat32, Nk);
    m.dprob = take(DType::kFloat32, E);
    m.part = take(dt, NC);
    if (config.shared_expert_width() > 0) {
      m.dshared = take(dt, NC);
      m.dgate = take(DType::kFloat32, rows);
      m.gate_logits = take(dt, rows);
    }
  }
  scratch_.ce_max = take(DType::kFloat32, rows);
  scratch_.ce_partials = take(DType::kFloat32, 2 * rows);
  if (!cp_.active()) scratch_.attention_workspace = take(dt, backend.attention_workspace_size(att));
  if (shape.sequence_parallel) {
    scratch_.gathered = take(dt, NC);
    scratch_.partial = take(dt, NC);
  }
  if (shape.sequence_parallel || shape.split_backward || lora.enabled())
    scratch_.norm_grads = take(DType::kFloat32, 2 * size_t(C));
  if (shape.split_backward && !spec.has_embedding) arrival_ = take(dt, region_NC);
  if (cp_.active() && spec.num_layers() > 0) {
    const size_t kv = rows * size_t(att.kv_width());
    for (int i = 0; i < 2; ++i) {
      scratch_.ring.kv[i] = take(dt, kv);
      scratch_.ring.dkv[i] = take(DType::kFloat32, kv);
    }
    scratch_.ring.dkv_block = take(DType::kFloat32, kv);
    scratch_.ring.acc = take(DType::kFloat32, rows * size_t(att.out_width()));
    scratch_.ring.workspace = take(DType::kFloat32, backend.ring_attention_workspace_size(att));
  }
  if (lora.enabled()) {
    const size_t widest = size_t(std::max({C, (config.n_head + 2 * config.kv_heads()) * hs, config.mlp_width()}));
    scratch_.lora_h = take(dt, rows * size_t(lora.rank));
    scratch_.lora_dh = take(dt, rows * size_t(lora.rank));
    scratch_.lora_grads = take(DType::kFloat32, widest * size_t(lora.rank));
    if (lora.dropout > 0) {
      // The widest adapter input: the block's width, or the MLP's rank-local width (down's).
      const size_t in = size_t(std::max(C, config.mlp_width() / t));
      scratch_.lora_dropped = take(dt, rows * in);
      scratch_.lora_dropped_grad = take(dt, rows * in);
    }
  }
  dropout_ = lora.enabled() ? lora.dropout : 0.0f;
  dropout_seed_ = lora.seed;
  places_.assign(size_t(slots()), SlotPlace{});
  if (apart_) scratch_.dequantized = take(dt, apart_->max_local_numel());
  if (shape.split_backward) {
    scratch_.norm_weight_stand_in = take(dt, size_t(C));
    backend.zero(scratch_.norm_weight_stand_in);
  }
}

size_t DecoderStage::frozen_bytes() { return frozen_params_.bytes() + (apart_ ? apart_->bytes() : 0); }

void DecoderStage::set_gradient_range_limit(size_t max_elems) {
  if (embedding_) embedding_->set_chunks(row_chunks(embedding_->token_table(), max_elems));
  if (head_) head_->set_chunks(row_chunks(head_->weight(), max_elems));
}

std::vector<GradRange> DecoderStage::gradient_ranges() const {
  std::vector<GradRange> out;
  // The vocabulary-sized tensors' chunks stand alone; a tied head on the embedding's stage is
  // the embedding itself, acquired by both in one backward.
  const bool shared = embedding_ && head_ && &head_->weight() == &embedding_->token_table();
  const int last = chunks() - 1;  // the head's chunk; the embedding's is 0
  // LoRA's frozen embedding, head and norms have none.
  const bool embedding = embedding_ && !embedding_->frozen(), head = head_ && !head_->frozen();
  if (embedding)
    for (const FlatRange& c : embedding_->chunks())
      out.push_back({c.begin, c.end, shared ? 2 : 1, true, embedding_->token_table().tied_across_stages, 0});
  if (head && !shared)
    for (const FlatRange& c : head_->chunks())
      out.push_back({c.begin, c.end, 1, true, head_->weight().tied_across_stages, last});
  if (embedding && embedding_->position_range().size() > 0) {
    const FlatRange r = embedding_->position_range();
    out.push_back({r.begin, r.end});
  }
  if (final_norm_)
    for (const FlatRange& r : final_norm_->grad_ranges()) out.push_back({r.begin, r.end, 1, false, false, last});
  std::set<size_t> experts;  // where the experts' tensors start
  for (const LocalParam& p : table().params())
    if (p.spec->expert >= 0) experts.insert(p.offset);
  for (int chunk = 0; chunk < chunks(); ++chunk)
    for (int i = chunk_begin(chunk); i < chunk_end(chunk); ++i)
      for (const FlatRange& r : blocks_[size_t(i)].grad_ranges())
        out.push_back({r.begin, r.end, 1, false, false, chunk, experts.count(r.begin) > 0});
  return out;
}

void DecoderStage::hold_step(int step, int next) {
  if (!residency_) return;
  for (const int u : units_.walk[size_t(step)]) residency_->acquire(u);
  if (next >= 0)
    for (const int u : units_.walk[size_t(next)]) residency_->prefetch(u);
}

void DecoderStage::let_go_step(int step) {
  if (!residency_) return;
  for (const int u : units_.walk[size_t(step)]) residency_->release(u);
}

ActivationBytes DecoderStage::activation_bytes() const {
  // Per slot of a chunk, every chunk's part: each chunk's blocks keep shape_.slots micro-batches.
  ActivationBytes a;
  a.slots = shape_.slots;
  a.per_slot = activations_.saved_bytes() / size_t(a.slots);
  a.recompute = activations_.recompute_bytes();
  for (const Tensor& t : scratch_tensors_) a.scratch += t.bytes();
  return a;
}

TensorView DecoderStage::output(int slot) { return chunk_output(slot); }

TensorView DecoderStage::chunk_output(int slot) {
  const int end = chunk_end(chunk_of(slot));
  return end == chunk_begin(chunk_of(slot)) ? input_[size_t(slot)] : blocks_[size_t(end) - 1].output(slot_in_chunk(slot));
}

void DecoderStage::check_micro_batch(int slot, int B, int T) const {
  FEAST_CHECK(slot >= 0 && slot < slots() && B >= 1 && B <= shape_.max_batch && T >= 1 && T <= shape_.max_seq,
              "micro-batch " << B << "x" << T << " in slot " << slot << " exceeds the allocated " << slots()
                             << " x " << shape_.max_batch << "x" << shape_.max_seq);
  FEAST_CHECK(!cp_.active() || T == shape_.max_seq,
              "a context-parallel stage built for " << shape_.max_seq << " tokens per sequence got " << T
                                                    << ": its positions are those of whole sequences of "
                                                    << shape_.max_seq * shape_.cp);
  FEAST_CHECK(!shape_.sequence_parallel || (B * T) % spec_.tp == 0,
              "a micro-batch of " << B << "x" << T << " tokens does not split over " << spec_.tp
                                  << " sequence-parallel ranks");
}

float DecoderStage::forward(int slot, const int32_t* tokens, const int32_t* targets, const int32_t* positions, int B,
                           int T, float loss_scale, const MicroBatchPlace& place) {
  check_micro_batch(slot, B, T);
  // A training forward (and its backward) draws dropout's masks from the micro-batch's place;
  // an evaluation has none.
  places_[size_t(slot)] = {loss_scale != 0 ? place : MicroBatchPlace{}, T};
  if (document_masks()) {
    FEAST_CHECK(positions, "a stage built for document masks got a micro-batch without positions");
    const size_t N = size_t(B) * size_t(T);
    backend_.copy(positions_[size_t(slot)].first(N), host_view(positions, N));
  }
  const LayerContext ctx = context(slot);
  if (moe_) {
    moe_->begin(slot, B * T, loss_scale != 0 ? place.moe_weight : 0.0);
    moe_receive(slot, /*forward=*/true);
  }
  // The chunk's part of the model runs; its blocks, embedding and head keep slot j's activations.
  const int chunk = chunk_of(slot), j = slot_in_chunk(slot);
  const size_t J = size_t(j), N = size_t(B) * size_t(T);
  // The walk's steps in order, each one's successor arriving while it runs.
  const int steps = int(units_.walk.size());
  auto next = [&](int step) { return step + 1 < steps ? step + 1 : -1; };
  if (embeds(slot)) {
    const int e = units_.embedding_step();
    hold_step(e, next(e));
    backend_.copy(tokens_[J].first(N), host_view(tokens, N));
    embedding_->forward(ctx, input_[size_t(slot)], tokens_[J], B, T);
    let_go_step(e);
  }
  TensorView x = input_[size_t(slot)];
  for (int i = chunk_begin(chunk); i < chunk_end(chunk); ++i) {
    const int b = units_.block_step(i);
    hold_step(b, next(b));
    blocks_[size_t(i)].forward(ctx, j, x, B, T);
    let_go_step(b);
    x = blocks_[size_t(i)].output(j);
  }
  if (moe_) {
    if (heads(slot))
      moe_->finish(slot, /*record=*/true);
    else
      moe_send(slot, /*forward=*/true);
  }
  if (!heads(slot)) return 0.0f;
  const int h = units_.head_step();
  hold_step(h, -1);
  backend_.copy(targets_[J].first(N), host_view(targets, N));
  final_norm_->forward(ctx, j, x, tp_.local_rows(int(N)));
  const float loss = head_->forward(ctx, j, head_input(j, int(N)), targets_[J], int(N), loss_scale);
  let_go_step(h);
  return loss;
}

void DecoderStage::backward(int slot, int B, int T) {
  FEAST_CHECK(sink_, "DecoderStage::backward needs a gradient sink");
  FEAST_CHECK(!shape_.split_backward, "a stage built to split its backward runs backward_input and backward_weight");
  check_micro_batch(slot, B, T);
  if (moe_) moe_receive(slot, /*forward=*/false);
  backward_walk(slot, B, T, /*whole=*/true);
  if (embeds(slot)) embedding_->backward(context(slot), scratch_.dres, tokens_[size_t(slot_in_chunk(slot))], B, T, *sink_);
  if (moe_) moe_send(slot, /*forward=*/false);
}

namespace {
constexpr int kMoeForwardTag = 0, kMoeBackwardTag = 1;
}  // namespace

void DecoderStage::moe_receive(int slot, bool forward) {
  // The first stage starts the forward's sums; the last has the whole model's for the backward.
  if (!moe_pp_ || (forward ? spec_.has_embedding : spec_.has_head)) return;
  std::vector<double> sums(2 * size_t(config_.moe.n_experts));
  const int peer = moe_pp_->rank() + (forward ? -1 : 1);
  moe_pp_->recv(sums.data(), sums.size(), DType::kFloat64, peer, forward ? kMoeForwardTag : kMoeBackwardTag)->wait();
  if (forward) {
    moe_->merge(slot, sums);
  } else {
    moe_->set(slot, sums);
    moe_->finish(slot, /*record=*/false);
  }
}

void DecoderStage::moe_send(int slot, bool forward) {
  if (!moe_pp_ || (forward ? spec_.has_head : spec_.has_embedding)) return;
  const size_t s = size_t(slot);
  if (moe_sends_[s]) moe_sends_[s]->wait();  // the slot's previous sums have left
  moe_outgoing_[s] = moe_->sums(slot);
  const int peer = moe_pp_->rank() + (forward ? 1 : -1);
  moe_sends_[s] = moe_pp_->send(moe_outgoing_[s].data(), moe_outgoing_[s].size(), DType::kFloat64, peer,
                                forward ? kMoeForwardTag : kMoeBackwardTag);
}

void DecoderStage::backward_walk(int slot, int B, int T, bool whole) {
  const LayerContext ctx = context(slot);
  const int chunk = chunk_of(slot), j = slot_in_chunk(slot), first = chunk_begin(chunk);
  const int N = B * T, C = config_.n_embd, Nl = tp_.local_rows(N);
  // dres carries d loss / d (residual stream) backwards through the blocks (on non-last stages
  // it arrives from the next stage).
  // The walk backwards, the embedding's step excepted: its backward adds rows of the output
  // gradient to its gradient and reads no weight.
  const int last_block = chunk_end(chunk) - 1;
  if (heads(slot)) {
    const int h = units_.head_step();
    hold_step(h, last_block >= first ? units_.block_step(last_block) : -1);
    const TensorView x_last = chunk_output(slot);
    // The head's input gradient is partial over the vocabulary shards: summed over the group
    // (under sequence parallelism, leaving this rank its rows) into tmp.
    const TensorView dhead = partial_sums(ctx, scratch_.tmp);
    if (whole)
      head_->backward(ctx, j, head_input(j, N), dhead, N, *sink_);
    else
      head_->backward_input(ctx, j, dhead, N);
    sum_partials(ctx, dhead, scratch_.tmp, N, C);
    backend_.zero(scratch_.dres.first(size_t(Nl) * size_t(C)));
    if (whole)
      final_norm_->backward(ctx, j, scratch_.dres, scratch_.tmp, x_last, Nl, *sink_);
    else
      final_norm_->backward_input(ctx, j, scratch_.dres, scratch_.tmp, x_last, Nl);
    let_go_step(h);
  }
  for (int i = last_block; i >= first; --i) {
    const int b = units_.block_step(i);
    hold_step(b, i > first ? units_.block_step(i - 1) : -1);
    const TensorView x = i > first ? blocks_[size_t(i) - 1].output(j) : input_[size_t(slot)];
    if (whole)
      blocks_[size_t(i)].backward(ctx, j, x, B, T, *sink_);
    else
      blocks_[size_t(i)].backward_input(ctx, j, x, B, T);
    let_go_step(b);
  }
}

TensorView DecoderStage::head_input(int slot, int N) {
  return all_rows(context(), final_norm_->out(slot), N, config_.n_embd);
}

void DecoderStage::backward_input(int slot, int B, int T) {
  FEAST_CHECK(shape_.split_backward, "DecoderStage::backward_input on a stage built for whole backwards");
  check_micro_batch(slot, B, T);
  backward_walk(slot, B, T, /*whole=*/false);
  if (embedding_) {
    const size_t n = size_t(tp_.local_rows(B * T)) * size_t(config_.n_embd);
    backend_.copy(input_grad_kept_[size_t(slot)].first(n), scratch_.dres.first(n));
  }
}

void DecoderStage::backward_weight(int slot, int B, int T) {
  FEAST_CHECK(sink_, "DecoderStage::backward_weight needs a gradient sink");
  FEAST_CHECK(shape_.split_backward, "DecoderStage::backward_weight on a stage built for whole backwards");
  check_micro_batch(slot, B, T);
  const LayerContext ctx = context(slot);
  const size_t s = size_t(slot);
  const int N = B * T, Nl = tp_.local_rows(N);
  // It reads no parameter (the products' weight gradients need only their inputs and output
  // gradients, the norms' pass a stand-in weight): under ZeRO 3 nothing is gathered for it.
  if (head_) {
    const TensorView x_last = blocks_.empty() ? input_[s] : blocks_.back().output(slot);
    head_->backward_weight(ctx, slot, head_input(slot, N), N, *sink_);
    final_norm_->backward_weight(ctx, slot, x_last, Nl, *sink_);
  }
  for (int i = int(blocks_.size()) - 1; i >= 0; --i)
    blocks_[size_t(i)].backward_weight(ctx, slot, i > 0 ? blocks_[size_t(i) - 1].output(slot) : input_[s], B, T,
                                       *sink_);
  if (embedding_) embedding_->backward(ctx, input_grad_kept_[s], tokens_[s], B, T, *sink_);
}

namespace {

// dst = float32 host values, cast to dst's dtype on the way.
void write_values(Backend& be, const TensorView& dst, const std::vector<float>& values) {
  if (dst.dtype == DType::kFloat32) {
    be.copy(dst, host_view(values.data(), values.size()));
  } else {
    Tensor tmp = be.allocate(DType::kFloat32, values.size());
    be.copy(tmp.view(), host_view(values.data(), values.size()));
    be.cast(dst, tmp.view());
  }
}

}  // namespace

void initialize_parameters(PipelineStage& stage, uint64_t seed) {
  for (const LocalParam& p : stage.table().params()) {
    std::vector<float> values(p.numel);
    init_local_parameter(p, seed, values.data());
    write_parameter(stage, p, values);
  }
  // LoRA's frozen base starts as the same model would without adapters (an import overwrites it).
  if (const LocalTable* frozen = stage.frozen_table())
    for (const LocalParam& p : frozen->params()) {
      std::vector<float> values(p.numel);
      init_local_parameter(p, seed, values.data());
      write_values(stage.backend(), stage.frozen_parameters().slice(p.offset, p.numel), values);
    }
  if (QuantizedBase* apart = stage.stored_apart())
    apart->load([seed](const ParamSpec& spec) {
      std::vector<float> values(spec.numel);
      for (size_t i = 0; i < spec.numel; ++i) values[i] = initial_value(spec, seed, int64_t(i));
      return values;
    });
}

std::vector<float> read_parameter(PipelineStage& stage, const LocalParam& p) {
  Backend& be = stage.backend();
  const TensorView src = stage.parameters().slice(p.offset, p.numel);
  std::vector<float> out(p.numel);
  if (src.dtype == DType::kFloat32) {
    be.copy(host_view(out.data(), out.size()), src);
  } else {
    Tensor tmp = be.allocate(DType::kFloat32, p.numel);
    be.cast(tmp.view(), src);
    be.copy(host_view(out.data(), out.size()), tmp.view());
  }
  return out;
}

void write_parameter(PipelineStage& stage, const LocalParam& p, const std::vector<float>& values) {
  FEAST_CHECK(values.size() == p.numel, p.spec->name << ": " << values.size() << " values for " << p.numel << " elements");
  write_values(stage.backend(), stage.parameters().slice(p.offset, p.numel), values);
}

}  // namespace feast
