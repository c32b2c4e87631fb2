#include "interop/hf/hf_config.h"

#include <charconv>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace feast {
namespace {

using json = nlohmann::json;

// A double as TOML reads it back exactly: shortest round-trip digits, with a '.' or exponent.
std::string toml_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

class Reader {
 public:
  Reader(const std::string& path, json j) : path_(path), j_(std::move(j)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw DataError(path_ + ": \"" + key + "\" " + what);
  }
  const std::string& path() const { return path_; }
  bool present(const std::string& key) const { return j_.contains(key); }
  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& at(const std::string& key) const { return j_[key]; }

  int64_t integer(const std::string& key) const {
    if (!has(key)) fail(key, "is missing; the model's shape cannot be known without it");
    return integer_value(key);
  }
  std::optional<int64_t> optional_integer(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return integer_value(key);
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_number()) fail(key, "must be a number, not " + j_[key].dump());
    return j_[key].get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail(key, "must be true or false, not " + j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) fail(key, "must be a string, not " + j_[key].dump());
    return j_[key].get<std::string>();
  }

 private:
  int64_t integer_value(const std::string& key) const {
    const json& v = j_[key];
    if (!v.is_number_integer()) fail(key, "must be an integer, not " + v.dump());
    return v.get<int64_t>();
  }
  std::string path_;
  json j_;
};

struct Out {
  std::vector<HfConfigValue> values;
  void add(const std::string& key, std::string toml, const std::string& hf_key) {
    values.push_back({"model." + key, std::move(toml), hf_key});
  }
  void add_int(const std::string& key, int64_t v, const std::string& hf_key) { add(key, std::to_string(v), hf_key); }
  void add_double(const std::string& key, double v, const std::string& hf_key) { add(key, toml_double(v), hf_key); }
  void add_bool(const std::string& key, bool v, const std::string& hf_key) { add(key, v ? "true" : "false", hf_key); }
};

// Mixtral's and Qwen2-MoE's expert keys: [model.moe].
void read_moe(const Reader& r, const std::string& type, Out& out) {
  const bool qwen = type == "qwen2_moe";
  const std::string experts = qwen ? "num_experts" : "num_local_experts";
  out.add_int("moe.n_experts", r.integer(experts), experts);
  out.add_int("moe.top_k", r.integer("num_experts_per_tok"), "num_experts_per_tok");
  if (r.number("router_jitter_noise", 0.0) != 0.0)
    r.fail("router_jitter_noise", "= " + toml_double(r.number("router_jitter_noise", 0.0)) +
                                      ": feast's router adds no noise to its input; set it to 0.0");
  if (qwen) {
    out.add_int("moe.intermediate_size", r.integer("moe_intermediate_size"), "moe_intermediate_size");
    out.add_int("moe.every", r.optional_integer("decoder_sparse_step").value_or(1), "decoder_sparse_step");
    if (r.has("mlp_only_layers") && !(r.at("mlp_only_layers").is_array() && r.at("mlp_only_layers").empty()))
      r.fail("mlp_only_layers", "= " + r.at("mlp_only_layers").dump() +
                                    ": feast places MoE blocks by decoder_sparse_step alone (model.moe.every)");
    const int64_t shared = r.optional_integer("shared_expert_intermediate_size").value_or(0);
    out.add_int("moe.n_shared_experts", shared > 0 ? 1 : 0, "shared_expert_intermediate_size");
    out.add_int("moe.shared_intermediate_size", shared, "shared_expert_intermediate_size");
    out.add_bool("moe.shared_expert_gate", shared > 0, "shared_expert_intermediate_size");
    out.add_bool("moe.norm_topk_prob", r.boolean("norm_topk_prob", false), "norm_topk_prob");
  } else {
    // Mixtral's experts are as wide as its intermediate_size and renormalise their top k.
    out.add_int("moe.intermediate_size", r.integer("intermediate_size"), "intermediate_size");
    out.add_int("moe.every", 1, "model_type");
    out.add_int("moe.n_shared_experts", 0, "model_type");
    out.add_bool("moe.norm_topk_prob", true, "model_type");
  }
  // transformers adds the load-balancing loss only with output_router_logits.
  const bool applied = r.boolean("output_router_logits", false);
  out.add_double("moe.aux_loss_coef", applied ? r.number("router_aux_loss_coef", 0.001) : 0.0,
                 applied ? "router_aux_loss_coef" : "output_router_logits");
  out.values.back().advisory = true;
}

void read_gpt2(const Reader& r, Out& out) {
  const std::string act = r.string("activation_function", "gelu_new");
  // gelu_new and gelu_pytorch_tanh are both the tanh approximation feast computes.
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("activation_function", "= \"" + act + "\": feast's GPT-2 computes the tanh GELU (\"gelu_new\")");
  if (!r.boolean("scale_attn_weights", true))
    r.fail("scale_attn_weights", "= false: feast scales attention scores by 1/sqrt(head size)");
  if (r.boolean("scale_attn_by_inverse_layer_idx", false))
    r.fail("scale_attn_by_inverse_layer_idx", "= true is not supported (feast scales every layer alike)");
  out.add("arch", "\"gpt2\"", "model_type");
  out.add_int("n_layer", r.integer("n_layer"), "n_layer");
  out.add_int("n_head", r.integer("n_head"), "n_head");
  out.add_int("n_embd", r.integer("n_embd"), "n_embd");
  out.add_int("vocab_size", r.integer("vocab_size"), "vocab_size");
  out.add_int("max_seq_len", r.integer("n_positions"), "n_positions");
  out.add_int("intermediate_size", r.optional_integer("n_inner").value_or(4 * r.integer("n_embd")), "n_inner");
  out.add_double("norm_eps", r.number("layer_norm_epsilon", 1e-5), "layer_norm_epsilon");
  out.add("tie_embeddings", r.boolean("tie_word_embeddings", true) ? "true" : "false", "tie_word_embeddings");
}

// The kind of rotary scaling and its parameters, from `s`: transformers 4's "rope_scaling" object,
// or transformers 5's "rope_parameters", which holds the same keys (and rope_theta); `key` names
// it in messages.
void read_rope_kind(const Reader& r, const std::string& key, const json& s, Out& out) {
  if (!s.is_object()) r.fail(key, "must be an object or null, not " + s.dump());
  const Reader sr(r.path() + " " + key, s);
  std::string type = s.contains("rope_type") ? sr.string("rope_type", "") : sr.string("type", "default");
  // transformers 4 lets the older "type" overwrite "rope_type"; other readers take "rope_type".
  // Where they disagree, the model's positions depend on which program reads it.
  if (s.contains("rope_type") && s.contains("type") && sr.string("type", "") != type)
    r.fail(key, "has rope_type \"" + type + "\" and type \"" + sr.string("type", "") +
                    "\", which disagree; keep the one the model was trained with and remove the other");
  if (type != "default" && type != "linear" && type != "llama3")
    r.fail(key, "has rope_type \"" + type + "\"; feast implements \"default\", \"linear\" and \"llama3\"");
  if (const double f = sr.number("partial_rotary_factor", 1.0); f != 1.0)
    r.fail(key, "has partial_rotary_factor " + toml_double(f) + "; feast rotates the whole of every head");
  out.add("rope_scaling.rope_type", toml_string(type), key + ".rope_type");
  if (type == "default") return;
  out.add_double("rope_scaling.factor", sr.number("factor", 1.0), key + ".factor");
  if (type == "llama3") {
    out.add_double("rope_scaling.low_freq_factor", sr.number("low_freq_factor", 1.0), key + ".low_freq_factor");
    out.add_double("rope_scaling.high_freq_factor", sr.number("high_freq_factor", 4.0), key + ".high_freq_factor");
    out.add_int("rope_scaling.original_max_position_embeddings", sr.integer("original_max_position_embeddings"),
                key + ".original_max_position_embeddings");
  }
}

// The rotary base and scaling. transformers 5 writes both into "rope_parameters" and no longer
// writes "rope_theta" at the top: reading only the top would fall back to 10000 and build a
// model with the wrong frequencies without a word, so rope_parameters comes first.
void read_rope(const Reader& r, Out& out) {
  if (r.has("rope_parameters")) {
    const json& p = r.at("rope_parameters");
    if (!p.is_object()) r.fail("rope_parameters", "must be an object, not " + p.dump());
    // Gemma 3 and others keep one set per kind of layer ({"full_attention": {...}, ...}).
    for (const auto& [name, value] : p.items())
      if (value.is_object())
        r.fail("rope_parameters", "has settings per kind of layer (\"" + name +
                                      "\"); feast applies one rotary embedding to every layer");
    const Reader pr(r.path() + " rope_parameters", p);
    const double theta = pr.number("rope_theta", r.number("rope_theta", 10000.0));
    if (r.has("rope_theta") && r.number("rope_theta", theta) != theta)
      r.fail("rope_theta", "= " + toml_double(r.number("rope_theta", theta)) + " disagrees with rope_parameters' " +
                               toml_double(theta) + "; remove one of them");
    out.add_double("rope_theta", theta, p.contains("rope_theta") ? "rope_parameters.rope_theta" : "rope_theta");
    Out kind;
    read_rope_kind(r, "rope_parameters", p, kind);
    // Exporters that also serve transformers 4 write the scaling both ways: fine when they agree.
    if (r.has("rope_scaling")) {
      Out legacy;
      read_rope_kind(r, "rope_scaling", r.at("rope_scaling"), legacy);
      const auto settings = [](const Out& o) {
        std::vector<std::pair<std::string, std::string>> v;
        for (const HfConfigValue& x : o.values) v.emplace_back(x.key, x.toml);
        return v;
      };
      if (settings(legacy) != settings(kind))
        r.fail("rope_scaling", "= " + r.at("rope_scaling").dump() + " disagrees with rope_parameters = " + p.dump() +
                                   "; remove one of them");
    }
    out.values.insert(out.values.end(), kind.values.begin(), kind.values.end());
    return;
  }
  out.add_double("rope_theta", r.number("rope_theta", 10000.0), "rope_theta");
  if (!r.has("rope_scaling")) {
    out.add("rope_scaling.rope_type", "\"default\"", "rope_scaling");
    return;
  }
  read_rope_kind(r, "rope_scaling", r.at("rope_scaling"), out);
}

void read_llama(const Reader& r, const std::string& type, Out& out) {
  const std::string act = r.string("hidden_act", "silu");
  // "swish" is transformers' other name for the same function.
  if (act != "silu" && act != "swish")
    r.fail("hidden_act", "= \"" + act + "\": feast's Llama MLP is SwiGLU (\"silu\")");
  if (r.boolean("mlp_bias", false)) r.fail("mlp_bias", "= true: feast's Llama MLP has no biases");
  const int64_t C = r.integer("hidden_size"), NH = r.integer("num_attention_heads");
  if (const auto hd = r.optional_integer("head_dim"); hd && NH > 0 && *hd != C / NH)
    r.fail("head_dim", "= " + std::to_string(*hd) + ": feast's head size is hidden_size / num_attention_heads = " +
                           std::to_string(C / NH));
  int64_t max_pos = r.integer("max_position_embeddings");
  std::string context_key = "max_position_embeddings";
  bool qkv_bias = false;
  if (type == "qwen2" || type == "qwen2_moe") {
    qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj
    if (r.boolean("use_sliding_window", false))
      r.fail("use_sliding_window", "= true: feast attends over the whole context");
  } else {
    // Llama's attention_bias puts biases on o_proj as well, which feast's Llama has not.
    if (r.boolean("attention_bias", false))
      r.fail("attention_bias", "= true (biases on q, k, v and o): feast's Llama has q/k/v biases only (Qwen2)");
    if (type == "mistral" || type == "mixtral") {
      // Within its window, sliding-window attention is full causal attention: the window becomes
      // feast's context. An absent key is transformers' default window of 4096; null is none.
      std::optional<int64_t> w = r.optional_integer("sliding_window");
      if (!r.present("sliding_window") && type == "mistral") w = 4096;  // MixtralConfig's default is none
      if (w && *w < 1) r.fail("sliding_window", "= " + std::to_string(*w) + " must be positive");
      if (w && *w < max_pos) {
        max_pos = *w;
        context_key = "sliding_window";
      }
    }
  }
  out.add("arch", "\"llama\"", "model_type");
  out.add_int("n_layer", r.integer("num_hidden_layers"), "num_hidden_layers");
  out.add_int("n_head", NH, "num_attention_heads");
  out.add_int("n_embd", C, "hidden_size");
  out.add_int("vocab_size", r.integer("vocab_size"), "vocab_size");
  out.add_int("max_seq_len", max_pos, context_key);
  out.add_int("n_kv_head", r.optional_integer("num_key_value_heads").value_or(NH), "num_key_value_heads");
  out.add_int("intermediate_size", r.integer("intermediate_size"), "intermediate_size");
  out.add_double("norm_eps", r.number("rms_norm_eps", 1e-6), "rms_norm_eps");
  out.add("qkv_bias", qkv_bias ? "true" : "false", qkv_bias ? "model_type" : "attention_bias");
  out.add("tie_embeddings", r.boolean("tie_word_embeddings", false) ? "true" : "false", "tie_word_embeddings");
  read_rope(r, out);
  if (type == "mixtral" || type == "qwen2_moe") read_moe(r, type, out);
}

}  // namespace

std::vector<HfConfigValue> read_hf_config(const std::string& folder) {
  const std::string path = folder + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(path + ": cannot read (model.init_from names a Hugging Face model folder, which holds config.json "
                           "and model.safetensors)");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw DataError(path + ": not a JSON object");
  const Reader r(path, j);
  const std::string type = r.string("model_type", "");
  Out out;
  if (type == "gpt2") {
    read_gpt2(r, out);
  } else if (type == "llama" || type == "qwen2" || type == "mistral" || type == "mixtral" || type == "qwen2_moe") {
    read_llama(r, type, out);
  } else {
    r.fail("model_type", "= \"" + type + "\": feast imports \"gpt2\" (GPT2LMHeadModel) and \"llama\", \"mistral\", "
                         "\"qwen2\" (LlamaForCausalLM and its relatives), \"mixtral\" and \"qwen2_moe\" "
                         "(MixtralForCausalLM, Qwen2MoeForCausalLM)");
  }
  if (r.has("architectures")) {
    const json& a = r.at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
      r.fail("architectures", "must be a list of class names, not " + a.dump());
    const std::string cls = a[0].get<std::string>();
    // Base models (GPT2Model, LlamaModel) have no head; feast then uses the embedding (tied) or
    // fails on the missing lm_head.weight, which names the tensor.
    static const char* kKnown[] = {"GPT2LMHeadModel", "GPT2Model", "LlamaForCausalLM", "LlamaModel",
                                   "Qwen2ForCausalLM", "Qwen2Model", "MistralForCausalLM", "MistralModel",
                                   "MixtralForCausalLM", "MixtralModel", "Qwen2MoeForCausalLM", "Qwen2MoeModel"};
    bool known = false;
    for (const char* k : kKnown) known = known || cls == k;
    if (!known) r.fail("architectures", "names " + cls + ", which feast does not import");
  }
  return out.values;
}

std::string moe_family(const ModelConfig& c) {
  return c.qkv_bias || c.shared_expert_width() > 0 ? "qwen2_moe" : "mixtral";
}

void check_moe_exportable(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  std::string why;
  if (moe_family(c) == "mixtral") {
    if (m.every != 1) why = "model.moe.every = " + std::to_string(m.every) + " (Mixtral's every block is MoE)";
    else if (!m.norm_topk_prob) why = "model.moe.norm_topk_prob = false (Mixtral renormalises)";
    else if (c.expert_width() != c.mlp_width())
      why = "experts of width " + std::to_string(c.expert_width()) + " besides model.intermediate_size = " +
            std::to_string(c.mlp_width()) + " (Mixtral's experts are its MLP width)";
  } else {
    if (!c.qkv_bias) why = "no q/k/v biases (Qwen2-MoE has them)";
    else if (c.shared_expert_width() > 0 && !m.shared_expert_gate)
      why = "shared experts without model.moe.shared_expert_gate (Qwen2-MoE gates its shared expert)";
    else if (c.shared_expert_width() == 0) why = "no shared expert (Qwen2-MoE has one)";
  }
  if (!why.empty())
    throw ConfigError("this mixture of experts has " + why + ": neither MixtralForCausalLM nor Qwen2MoeForCausalLM "
                      "holds it, so it cannot be exported as a Hugging Face model; its checkpoint keeps it");
}

std::string hf_config_json(const ModelConfig& c, const HfSpecialTokens& tokens, const std::string& torch_dtype) {
  json j;
  if (!c.is_llama()) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["activation_function"] = "gelu_new";
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_embd"] = c.n_embd;
    j["n_positions"] = c.max_seq_len;
    j["n_ctx"] = c.max_seq_len;
    // null is GPT-2's own way of saying 4 n_embd, as transformers writes it.
    if (c.mlp_width() == 4 * c.n_embd) j["n_inner"] = nullptr;
    else j["n_inner"] = c.mlp_width();
    j["layer_norm_epsilon"] = c.norm_eps;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
  } else {
    j["architectures"] = {c.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    j["model_type"] = c.qkv_bias ? "qwen2" : "llama";
    if (c.moe.enabled()) {
      check_moe_exportable(c);
      const MoeConfig& m = c.moe;
      j["num_experts_per_tok"] = m.top_k;
      j["output_router_logits"] = m.aux_loss_coef > 0;
      j["router_aux_loss_coef"] = m.aux_loss_coef > 0 ? m.aux_loss_coef : 0.001;
      if (moe_family(c) == "mixtral") {
        j["architectures"] = {"MixtralForCausalLM"};
        j["model_type"] = "mixtral";
        j["num_local_experts"] = m.n_experts;
        j["router_jitter_noise"] = 0.0;
        j["sliding_window"] = nullptr;
      } else {
        j["architectures"] = {"Qwen2MoeForCausalLM"};
        j["model_type"] = "qwen2_moe";
        j["num_experts"] = m.n_experts;
        j["moe_intermediate_size"] = c.expert_width();
        j["shared_expert_intermediate_size"] = c.shared_expert_width();
        j["decoder_sparse_step"] = m.every;
        j["mlp_only_layers"] = json::array();
        j["norm_topk_prob"] = m.norm_topk_prob;
      }
    }
    j["hidden_act"] = "silu";
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.kv_heads();
    j["hidden_size"] = c.n_embd;
    j["intermediate_size"] = c.mlp_width();
    j["max_position_embeddings"] = c.max_seq_len;
    j["rms_norm_eps"] = c.norm_eps;
    j["rope_theta"] = c.rope_theta;
    if (c.qkv_bias) {
      j["use_sliding_window"] = false;
    } else if (!c.moe.enabled()) {
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
    }
    const RopeScaling& s = c.rope_scaling;
    if (s.rope_type == "default") {
      j["rope_scaling"] = nullptr;
    } else {
      json rs;
      rs["rope_type"] = s.rope_type;
      rs["factor"] = s.factor;
      if (s.rope_type == "llama3") {
        rs["low_freq_factor"] = s.low_freq_factor;
        rs["high_freq_factor"] = s.high_freq_factor;
        rs["original_max_position_embeddings"] = s.original_max_position_embeddings;
      }
      j["rope_scaling"] = rs;
    }
    j["attention_dropout"] = 0.0;
  }
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tied();
  j["initializer_range"] = c.init_std;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  if (tokens.bos_id) j["bos_token_id"] = *tokens.bos_id;
  if (tokens.eos_id) j["eos_token_id"] = *tokens.eos_id;
  return j.dump(2) + "\n";
}

}  // namespace feast
