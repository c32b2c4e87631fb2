#include "interop/hf/hf_weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "interop/hf/hf_config.h"
#include "model/architecture.h"

namespace feast {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Tensors a Hugging Face folder may hold that are not weights: GPT-2's causal-mask buffers and
// old Llama saves' rotary frequencies, which feast recomputes.
bool is_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || ends_with(name, "rotary_emb.inv_freq");
}

// dst (rows, cols) = src (cols, rows) transposed: GPT-2's Conv1D weights are stored (in, out).
void transpose(float* dst, const float* src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) dst[r * cols + k] = src[k * rows + r];
}

// Fills the rectangle `s` of logical tensor `t` (row-major, s.count[0] x s.count[1] values at
// dst) from the Hugging Face tensors its pieces name; rows no piece covers are left as they are.
void read_rectangle(const SafetensorsModel& model, const HfTensor& t, const LogicalSlice& s, float* dst,
                    std::vector<float>& scratch) {
  const bool matrix = s.start.size() == 2;
  const int64_t cols = matrix ? s.count[1] : 1, col0 = matrix ? s.start[1] : 0;
  const int64_t r0 = s.start[0], r1 = r0 + s.count[0];
  for (const HfPiece& hp : t.pieces) {
    const int64_t a = std::max(r0, hp.row_begin), b = std::min(r1, hp.row_begin + hp.rows), n = b - a;
    if (n <= 0) continue;
    float* out = dst + size_t(a - r0) * size_t(cols);
    if (!matrix) {
      const int64_t start[] = {a - hp.row_begin}, count[] = {n};
      model.read_f32(hp.hf_name, start, count, out);
    } else if (!hp.transposed) {
      const int64_t start[] = {a - hp.row_begin, col0}, count[] = {n, cols};
      model.read_f32(hp.hf_name, start, count, out);
    } else {
      const int64_t start[] = {col0, a - hp.row_begin}, count[] = {cols, n};
      scratch.resize(size_t(cols * n));
      model.read_f32(hp.hf_name, start, count, scratch.data());
      transpose(out, scratch.data(), n, cols);
    }
  }
}

HfPiece piece(std::string name, std::vector<int64_t> shape, int64_t row_begin, int64_t rows, bool transposed = false) {
  return HfPiece{std::move(name), std::move(shape), row_begin, rows, transposed};
}

// An MoE block's tensor `part` (after "mlp."): Mixtral's block_sparse_moe (gate; experts.E.w1,
// w3 (gate and up), w2) or Qwen2-MoE's mlp (gate; experts.E.gate_proj, up_proj, down_proj;
// shared_expert.*; shared_expert_gate), under the layer's prefix h.
std::vector<HfPiece> moe_pieces(const ModelConfig& c, const std::string& h, const std::string& part,
                                const ParamSpec& s) {
  const int64_t C = c.n_embd, E = c.moe.n_experts;
  const bool mixtral = moe_family(c) == "mixtral";
  const std::string block = h + (mixtral ? "block_sparse_moe." : "mlp.");
  // A SwiGLU MLP of width I at `at`: fc is [gate; up], proj is down.
  auto swiglu = [&](const std::string& at, const std::string& which, int64_t I, bool experts_of_mixtral) {
    const std::string gate = experts_of_mixtral ? "w1" : "gate_proj", up = experts_of_mixtral ? "w3" : "up_proj",
                      down = experts_of_mixtral ? "w2" : "down_proj";
    if (which == "fc.weight")
      return std::vector<HfPiece>{piece(at + gate + ".weight", {I, C}, 0, I), piece(at + up + ".weight", {I, C}, I, I)};
    return std::vector<HfPiece>{piece(at + down + ".weight", {C, I}, 0, C)};
  };
  if (part == "router.weight") return {piece(block + "gate.weight", {E, C}, 0, E)};
  if (part == "shared_gate.weight") return {piece(block + "shared_expert_gate.weight", {1, C}, 0, 1)};
  if (part.rfind("shared.", 0) == 0)
    return swiglu(block + "shared_expert.", part.substr(7), c.shared_expert_width(), false);
  if (part.rfind("experts.", 0) == 0) {
    const size_t dot = part.find('.', 8);
    const std::string e = part.substr(8, dot - 8);
    return swiglu(block + "experts." + e + ".", part.substr(dot + 1), c.expert_width(), mixtral);
  }
  throw Error("no Hugging Face name for feast tensor " + s.name);
}

}  // namespace

std::vector<HfTensor> hf_tensor_map(const ModelConfig& c, const std::string& P) {
  const int64_t C = c.n_embd, V = c.vocab_size, hs = c.head_dim(), I = c.mlp_width();
  const int64_t q = int64_t{c.n_head} * hs, kv = int64_t{c.kv_heads()} * hs;
  const ParamTable table = decoder_param_table(c);
  std::vector<HfTensor> out;
  for (const ParamSpec& s : table.specs()) {
    if (s.tied_to >= 0) continue;
    HfTensor t{s.name, {}};
    const std::string& n = s.name;
    const int64_t rows = s.shape[0];
    std::vector<HfPiece>& p = t.pieces;
    if (!c.is_llama()) {
      if (n == "wte.weight") p = {piece(P + "wte.weight", {V, C}, 0, V)};
      else if (n == "lm_head.weight") p = {piece("lm_head.weight", {V, C}, 0, V)};
      else if (n == "wpe.weight") p = {piece(P + "wpe.weight", {rows, C}, 0, rows)};
      else if (n.rfind("ln_f.", 0) == 0) p = {piece(P + n, {C}, 0, C)};
      else {
        // layers.L.<part>: GPT-2's h.L.<part>, Conv1D weights stored (in, out).
        const size_t dot = n.find('.', 7);
        const std::string layer = n.substr(7, dot - 7), part = n.substr(dot + 1);
        const std::string h = P + "h." + layer + ".";
        if (part == "attn.qkv.weight") p = {piece(h + "attn.c_attn.weight", {C, rows}, 0, rows, true)};
        else if (part == "attn.qkv.bias") p = {piece(h + "attn.c_attn.bias", {rows}, 0, rows)};
        else if (part == "attn.proj.weight") p = {piece(h + "attn.c_proj.weight", {s.shape[1], C}, 0, C, true)};
        else if (part == "attn.proj.bias") p = {piece(h + "attn.c_proj.bias", {C}, 0, C)};
        else if (part == "mlp.fc.weight") p = {piece(h + "mlp.c_fc.weight", {C, I}, 0, I, true)};
        else if (part == "mlp.fc.bias") p = {piece(h + "mlp.c_fc.bias", {I}, 0, I)};
        else if (part == "mlp.proj.weight") p = {piece(h + "mlp.c_proj.weight", {I, C}, 0, C, true)};
        else if (part == "mlp.proj.bias") p = {piece(h + "mlp.c_proj.bias", {C}, 0, C)};
        else p = {piece(h + part, s.shape, 0, rows)};  // ln_1.*, ln_2.*: the same names
      }
    } else {
      if (n == "wte.weight") p = {piece(P + "embed_tokens.weight", {V, C}, 0, V)};
      else if (n == "lm_head.weight") p = {piece("lm_head.weight", {V, C}, 0, V)};
      else if (n == "ln_f.weight") p = {piece(P + "norm.weight", {C}, 0, C)};
      else {
        const size_t dot = n.find('.', 7);
        const std::string layer = n.substr(7, dot - 7), part = n.substr(dot + 1);
        const std::string h = P + "layers." + layer + ".";
        const std::string a = h + "self_attn.";
        if (part == "ln_1.weight") p = {piece(h + "input_layernorm.weight", {C}, 0, C)};
        else if (part == "ln_2.weight") p = {piece(h + "post_attention_layernorm.weight", {C}, 0, C)};
        else if (part == "attn.qkv.weight")
          p = {piece(a + "q_proj.weight", {q, C}, 0, q), piece(a + "k_proj.weight", {kv, C}, q, kv),
               piece(a + "v_proj.weight", {kv, C}, q + kv, kv)};
        else if (part == "attn.qkv.bias")
          p = {piece(a + "q_proj.bias", {q}, 0, q), piece(a + "k_proj.bias", {kv}, q, kv),
               piece(a + "v_proj.bias", {kv}, q + kv, kv)};
        else if (part == "attn.proj.weight") p = {piece(a + "o_proj.weight", {C, q}, 0, C)};
        else if (part == "mlp.fc.weight")
          p = {piece(h + "mlp.gate_proj.weight", {I, C}, 0, I), piece(h + "mlp.up_proj.weight", {I, C}, I, I)};
        else if (part == "mlp.proj.weight") p = {piece(h + "mlp.down_proj.weight", {C, I}, 0, C)};
        else if (part.rfind("mlp.", 0) == 0 && c.moe.enabled()) p = moe_pieces(c, h, part.substr(4), s);
        else throw Error("no Hugging Face name for feast tensor " + n);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string hf_prefix_of(const SafetensorsModel& model, const ModelConfig& c) {
  const std::string prefix = c.is_llama() ? "model." : "transformer.";
  const std::string embedding = c.is_llama() ? "embed_tokens.weight" : "wte.weight";
  if (model.find(prefix + embedding)) return prefix;
  if (model.find(embedding)) return "";
  throw DataError(model.folder() + ": no token embedding (" + prefix + embedding + " or " + embedding +
                  ") in its safetensors files: is this a " + (c.is_llama() ? "Llama" : "GPT-2") + " model folder?");
}

namespace {

void check_against(const SafetensorsModel& model, const ModelConfig& c, const std::vector<HfTensor>& map) {
  std::set<std::string> expected;
  std::vector<std::string> missing;
  for (const HfTensor& t : map)
    for (const HfPiece& p : t.pieces) {
      expected.insert(p.hf_name);
      const SafetensorsTensor* found = model.find(p.hf_name);
      if (!found) {
        missing.push_back(p.hf_name);
        continue;
      }
      if (found->shape != p.hf_shape)
        throw DataError(model.file_of(p.hf_name).path() + ": tensor " + p.hf_name + " has shape " +
                        format_shape(found->shape) + ", but the model's config.json and [model] need " +
                        format_shape(p.hf_shape));
    }
  std::vector<std::string> unexpected;
  for (const std::string& name : model.names()) {
    if (expected.count(name) || is_buffer(name)) continue;
    if (c.tied() && name == "lm_head.weight") continue;  // a tied head saved anyway
    unexpected.push_back(name);
  }
  if (missing.empty() && unexpected.empty()) return;
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > 8) s += " and " + std::to_string(names.size() - 8) + " more";
    return s;
  };
  std::string what = model.folder() + ": the weights do not match the model (" + (c.is_llama() ? "llama" : "gpt2") + ")";
  if (!missing.empty()) what += "; missing: " + list(missing);
  if (!unexpected.empty()) what += "; unexpected: " + list(unexpected);
  throw DataError(what + ". Check that config.json belongs to these files and that no [model] key overrides it");
}

}  // namespace

void check_hf_weights(const SafetensorsModel& model, const ModelConfig& c) {
  check_against(model, c, hf_tensor_map(c, hf_prefix_of(model, c)));
}

void import_hf_weights(const SafetensorsModel& model, const ModelConfig& c, const LocalTable& table, float* params,
                       const std::vector<FlatRange>* only) {
  const std::vector<HfTensor> map = hf_tensor_map(c, hf_prefix_of(model, c));
  check_against(model, c, map);
  std::map<std::string, const HfTensor*> by_name;
  for (const HfTensor& t : map) by_name[t.name] = &t;
  const std::vector<FlatRange> everything = {{0, table.total_numel()}};
  std::vector<float> scratch;
  for (const LocalParam& p : table.params())
    for (const FlatRange& r : only ? *only : everything) {
      const size_t b = std::max(r.begin, p.offset), e = std::min(r.end, p.offset + p.numel);
      if (b >= e) continue;
      float* local = params + p.offset;
      std::fill(local + (b - p.offset), local + (e - p.offset), 0.0f);  // vocabulary padding stays zero
      for (const LogicalSlice& s : p.logical_slices(b - p.offset, e - p.offset))
        read_rectangle(model, *by_name.at(p.logical->name), s, local + s.local_offset, scratch);
    }
}

LogicalTensorSource hf_logical_tensors(const SafetensorsModel& model, const ModelConfig& c) {
  check_hf_weights(model, c);
  auto map = std::make_shared<const std::vector<HfTensor>>(hf_tensor_map(c, hf_prefix_of(model, c)));
  return [&model, map](const ParamSpec& spec) {
    std::vector<float> out(spec.numel, 0.0f);
    LogicalSlice whole;
    whole.start.assign(spec.shape.size(), 0);
    whole.count = spec.shape;
    std::vector<float> scratch;
    for (const HfTensor& t : *map)
      if (t.name == spec.name) read_rectangle(model, t, whole, out.data(), scratch);
    return out;
  };
}

HfExport export_hf_tensors(const ModelConfig& c, const LogicalTensorSource& source) {
  const ParamTable table = decoder_param_table(c);
  const std::vector<HfTensor> map = hf_tensor_map(c, c.is_llama() ? "model." : "transformer.");
  HfExport out;
  // Two passes: storage first, so that the pointers taken in the second stay valid.
  std::vector<std::pair<const HfPiece*, size_t>> order;
  for (const HfTensor& t : map) {
    const ParamSpec& spec = table.at(t.name);
    const std::vector<float> full = source(spec);
    FEAST_CHECK(full.size() == spec.numel, "tensor " << spec.name << " has " << full.size() << " values, expected "
                                                      << spec.numel);
    const int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
    for (const HfPiece& hp : t.pieces) {
      std::vector<float> v(size_t(hp.rows * cols));
      const float* src = full.data() + size_t(hp.row_begin * cols);
      if (!hp.transposed) std::memcpy(v.data(), src, v.size() * sizeof(float));
      else transpose(v.data(), src, cols, hp.rows);  // back to (in, out)
      order.emplace_back(&hp, out.storage.size());
      out.storage.push_back(std::move(v));
    }
  }
  for (const auto& [hp, i] : order) out.tensors.push_back(TensorToWrite{hp->hf_name, hp->hf_shape, out.storage[i].data()});
  return out;
}

}  // namespace feast
