#include "model/lora.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace feast {

const std::vector<LoraTarget>& lora_targets(const ModelConfig& config) {
  static const std::vector<LoraTarget> llama = {
      {"q", "attn.qkv", 0, false, "self_attn.q_proj"},   {"k", "attn.qkv", 1, false, "self_attn.k_proj"},
      {"v", "attn.qkv", 2, false, "self_attn.v_proj"},   {"o", "attn.proj", -1, true, "self_attn.o_proj"},
      {"gate", "mlp.fc", 0, false, "mlp.gate_proj"},     {"up", "mlp.fc", 1, false, "mlp.up_proj"},
      {"down", "mlp.proj", -1, true, "mlp.down_proj"}};
  static const std::vector<LoraTarget> gpt2 = {{"qkv", "attn.qkv", -1, false, "attn.c_attn"},
                                               {"proj", "attn.proj", -1, true, "attn.c_proj"},
                                               {"fc", "mlp.fc", -1, false, "mlp.c_fc"},
                                               {"fc_proj", "mlp.proj", -1, true, "mlp.c_proj"}};
  return config.is_llama() ? llama : gpt2;
}

std::vector<std::string> default_lora_targets(const ModelConfig& config) {
  if (config.is_llama()) return {"q", "v"};
  return {"qkv"};
}

const LoraTarget& lora_target(const ModelConfig& config, const std::string& name) {
  std::string names;
  for (const LoraTarget& t : lora_targets(config)) {
    if (t.name == name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  throw ConfigError("lora.targets names \"" + name + "\", which a " + config.arch + " model does not have; its " +
                    "products are " + names);
}

std::vector<const LoraTarget*> chosen_lora_targets(const ModelConfig& config, const LoraSpec& lora) {
  for (size_t i = 0; i < lora.targets.size(); ++i) {
    (void)lora_target(config, lora.targets[i]);  // a name the family has
    if (std::find(lora.targets.begin(), lora.targets.begin() + long(i), lora.targets[i]) != lora.targets.begin() + long(i))
      throw ConfigError("lora.targets names \"" + lora.targets[i] + "\" twice");
  }
  if (lora.targets.empty()) throw ConfigError("lora.targets is empty: name the products to adapt (lora.rank > 0)");
  std::vector<const LoraTarget*> out;
  for (const LoraTarget& t : lora_targets(config))
    if (std::find(lora.targets.begin(), lora.targets.end(), t.name) != lora.targets.end()) out.push_back(&t);
  return out;
}

uint64_t lora_dropout_stream(uint64_t seed, int64_t step, int layer, int target) {
  // "LORADROP": apart from every other consumer of the run's seed.
  constexpr uint64_t kLoraDropoutStream = 0x4C4F524144524F50ull;
  return hash_combine(hash_combine(hash_combine(seed, kLoraDropoutStream), uint64_t(step)),
                      uint64_t(layer) * 64 + uint64_t(target));
}

std::string lora_a_name(int layer, const std::string& target) {
  return "layers." + std::to_string(layer) + ".lora." + target + ".A";
}
std::string lora_b_name(int layer, const std::string& target) {
  return "layers." + std::to_string(layer) + ".lora." + target + ".B";
}

ParamTable lora_param_table(const ModelConfig& c, const LoraSpec& lora) {
  FEAST_CHECK(lora.enabled(), "lora_param_table without a rank");
  const int64_t C = c.n_embd, hs = c.head_dim(), q_rows = int64_t(c.n_head) * hs,
                kv_rows = int64_t(c.kv_heads()) * hs, I = c.mlp_width(), r = lora.rank;
  const std::vector<const LoraTarget*> chosen = chosen_lora_targets(c, lora);
  std::vector<ParamSpec> specs;
  for (int l = 0; l < c.n_layer; ++l)
    for (const LoraTarget* target : chosen) {
      const LoraTarget& t = *target;
      // The product's input width and the rows (with their blocks) the adapter writes.
      int64_t in = C, out = C;
      std::vector<int64_t> blocks;
      if (t.linear == "attn.qkv") {
        const std::vector<int64_t> all = {q_rows, kv_rows, kv_rows};
        if (t.block >= 0) {
          out = all[size_t(t.block)];
        } else {
          out = q_rows + 2 * kv_rows;
          blocks = all;
        }
      } else if (t.linear == "attn.proj") {
        in = q_rows;
      } else if (t.linear == "mlp.fc") {
        out = I;  // a SwiGLU block (gate or up), or GELU's whole fc
      } else {
        in = I;
      }
      ParamSpec a;
      a.name = lora_a_name(l, t.name);
      a.shape = {r, in};
      a.split = t.row_parallel ? TpSplit::kInputCols : TpSplit::kReplicated;
      a.placement = Placement::in_layer(l);
      a.weight_decay = true;
      a.init_std = 1.0 / std::sqrt(3.0 * double(in));
      ParamSpec b;
      b.name = lora_b_name(l, t.name);
      b.shape = {out, r};
      b.split = t.row_parallel ? TpSplit::kReplicated : TpSplit::kOutputRows;
      b.blocks = blocks;
      b.placement = Placement::in_layer(l);
      b.weight_decay = true;
      specs.push_back(std::move(a));
      specs.push_back(std::move(b));
    }
  return ParamTable(std::move(specs));
}

void merge_lora(const ModelConfig& config, const LoraSpec& lora, const ParamSpec& weight, std::vector<float>& values,
                const std::function<std::vector<float>(const std::string& name)>& adapter) {
  if (!lora.enabled() || weight.placement.kind != Placement::Kind::kLayer) return;
  const int layer = weight.placement.layer;
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  const int64_t in = weight.shape.size() == 2 ? weight.shape[1] : 0, r = lora.rank;
  for (const LoraTarget* target : chosen_lora_targets(config, lora)) {
    const LoraTarget& t = *target;
    if (weight.name != prefix + t.linear + ".weight") continue;
    const std::vector<float> a = adapter(lora_a_name(layer, t.name)), b = adapter(lora_b_name(layer, t.name));
    int64_t row0 = 0;
    for (int i = 0; i < t.block; ++i) row0 += weight.blocks[size_t(i)];
    const int64_t rows = int64_t(b.size()) / r;
    FEAST_CHECK(int64_t(a.size()) == r * in && row0 + rows <= weight.shape[0], weight.name << ": adapter "
                                                                                            << t.name << " does not fit");
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < in; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < r; ++k) sum += double(b[size_t(i * r + k)]) * double(a[size_t(k * in + j)]);
        values[size_t((row0 + i) * in + j)] += float(lora.scale() * sum);
      }
  }
}

}  // namespace feast
