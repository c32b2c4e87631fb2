#include "interop/hf/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "data/tokenizer/hf_json.h"
#include "interop/hf/safetensors_file.h"
#include "interop/hf/safetensors_writer.h"

namespace feast {
namespace {

namespace fs = std::filesystem;

// The module's last name ("q_proj", "c_proj").
std::string leaf(const LoraTarget& t) { return t.hf_module.substr(t.hf_module.rfind('.') + 1); }

}  // namespace

std::string peft_tensor_name(const ModelConfig& config, int layer, const LoraTarget& target, bool a) {
  const std::string blocks = config.is_llama() ? "base_model.model.model.layers." : "base_model.model.transformer.h.";
  return blocks + std::to_string(layer) + "." + target.hf_module + (a ? ".lora_A.weight" : ".lora_B.weight");
}

void import_peft_adapter(const std::string& folder, const ModelConfig& config, const LoraSpec& spec,
                         const LocalTable& table, float* params) {
  const std::string config_path = (fs::path(folder) / "adapter_config.json").string();
  const std::string weights_path = (fs::path(folder) / "adapter_model.safetensors").string();
  if (!fs::is_regular_file(config_path) || !fs::is_regular_file(weights_path))
    throw DataError(folder + ": not a PEFT adapter folder (it needs adapter_config.json and "
                    "adapter_model.safetensors, as peft's save_pretrained writes them)");
  const nlohmann::json c = read_json(config_path);
  auto fail = [&](const std::string& what) { throw DataError(config_path + ": " + what); };
  if (c.value("peft_type", "") != "LORA") fail("peft_type is \"" + c.value("peft_type", "") + "\", not \"LORA\"");
  const int r = c.value("r", 0);
  const double alpha = c.value("lora_alpha", 0.0);
  if (r != spec.rank)
    fail("the adapter has rank r = " + std::to_string(r) + ", lora.rank is " + std::to_string(spec.rank) +
         "; set lora.rank = " + std::to_string(r) + " to continue it");
  if (alpha != spec.alpha)
    fail("the adapter has lora_alpha = " + nlohmann::json(alpha).dump() + ", lora.alpha is " +
         nlohmann::json(spec.alpha).dump() + "; set lora.alpha to the adapter's");
  if (c.value("use_dora", false)) fail("a DoRA adapter (use_dora = true): feast trains plain LoRA");
  if (c.value("use_rslora", false)) fail("an rsLoRA adapter (use_rslora = true, scale alpha / sqrt(r)): feast scales by alpha / r");
  if (c.contains("bias") && c["bias"].is_string() && c["bias"] != "none")
    fail("bias = \"" + c["bias"].get<std::string>() + "\": the adapter trains biases, which feast's LoRA does not");
  for (const char* pattern : {"rank_pattern", "alpha_pattern"})
    if (c.contains(pattern) && c[pattern].is_object() && !c[pattern].empty())
      fail(std::string(pattern) + " gives some modules another rank or alpha; feast uses one for all");

  const SafetensorsFile file(weights_path);
  // Exactly the tensors the configured targets name, of the model's shapes; feast's name -> PEFT's.
  std::map<std::string, std::string> peft_of;
  std::set<std::string> expected;
  const ParamTable logical = lora_param_table(config, spec);
  const std::vector<const LoraTarget*> chosen = chosen_lora_targets(config, spec);
  for (int l = 0; l < config.n_layer; ++l)
    for (const LoraTarget* t : chosen)
      for (const bool a : {true, false}) {
        const std::string name = peft_tensor_name(config, l, *t, a);
        const ParamSpec& want = logical.at(a ? lora_a_name(l, t->name) : lora_b_name(l, t->name));
        peft_of[want.name] = name;
        expected.insert(name);
        const SafetensorsTensor* found = file.find(name);
        if (!found)
          throw DataError(weights_path + ": no tensor " + name + ": the adapter does not adapt " + t->hf_module +
                          " of layer " + std::to_string(l) + " (lora.targets names \"" + t->name +
                          "\"), or it is for another model");
        if (found->shape != want.shape)
          throw DataError(weights_path + ": " + name + " is " + format_shape(found->shape) + ", this model's is " +
                          format_shape(want.shape) + ": an adapter for another model");
      }
  for (const SafetensorsTensor& t : file.tensors())
    if (!expected.count(t.name)) {
      std::string targets;
      for (const std::string& n : spec.targets) targets += (targets.empty() ? "" : ", ") + n;
      throw DataError(weights_path + ": " + t.name + " is not an adapter this config trains (lora.targets = [" +
                      targets + "]); add its product to lora.targets, or use an adapter of these targets");
    }
  // This rank's slices of each tensor.
  for (const LocalParam& p : table.params()) {
    const std::string& name = peft_of.at(p.logical->name);
    for (const LogicalSlice& slice : p.logical_slices())
      file.read_f32(name, slice.start, slice.count, params + p.offset + slice.local_offset);
  }
}

int write_peft_adapter(const std::string& folder, const ModelConfig& config, const LoraSpec& spec,
                       const std::function<std::vector<float>(const ParamSpec&)>& tensor, const std::string& base) {
  fs::create_directories(folder);
  const std::vector<const LoraTarget*> chosen = chosen_lora_targets(config, spec);
  // target_modules as PEFT matches them: module names by suffix, unless GPT-2's two c_proj
  // differ (one adapted, the other not), which only a pattern over the full name can say.
  nlohmann::json modules = nlohmann::json::array();
  std::set<std::string> leaves;
  for (const LoraTarget* t : chosen) leaves.insert(leaf(*t));
  bool ambiguous = false;
  for (const LoraTarget& t : lora_targets(config))
    if (leaves.count(leaf(t)) && std::find(chosen.begin(), chosen.end(), &t) == chosen.end()) ambiguous = true;
  if (ambiguous) {
    std::string alternatives;
    for (const LoraTarget* t : chosen) {
      std::string escaped;
      for (const char ch : t->hf_module) escaped += ch == '.' ? std::string("\\.") : std::string(1, ch);
      alternatives += (alternatives.empty() ? "" : "|") + escaped;
    }
    modules = ".*\\.(" + alternatives + ")";
  } else {
    for (const std::string& name : leaves) modules.push_back(name);
  }
  nlohmann::ordered_json c;
  c["alpha_pattern"] = nlohmann::json::object();
  c["auto_mapping"] = nullptr;
  c["base_model_name_or_path"] = base;
  c["bias"] = "none";
  c["fan_in_fan_out"] = !config.is_llama();
  c["inference_mode"] = true;
  c["init_lora_weights"] = true;
  c["layers_pattern"] = nullptr;
  c["layers_to_transform"] = nullptr;
  c["lora_alpha"] = spec.alpha;
  // The spec holds it as float32: written back at the config's precision (0.05, not 0.0500000007).
  c["lora_dropout"] = std::round(double(spec.dropout) * 1e6) / 1e6;
  c["modules_to_save"] = nullptr;
  c["peft_type"] = "LORA";
  c["r"] = spec.rank;
  c["rank_pattern"] = nlohmann::json::object();
  c["revision"] = nullptr;
  c["target_modules"] = modules;
  c["task_type"] = "CAUSAL_LM";
  c["use_dora"] = false;
  c["use_rslora"] = false;
  {
    std::ofstream out(fs::path(folder) / "adapter_config.json");
    out << c.dump(2) << "\n";
    if (!out) throw Error(folder + "/adapter_config.json: cannot write");
  }
  const ParamTable logical = lora_param_table(config, spec);
  std::vector<std::vector<float>> values;
  values.reserve(logical.specs().size());
  std::vector<TensorToWrite> tensors;
  for (int l = 0; l < config.n_layer; ++l)
    for (const LoraTarget* t : chosen)
      for (const bool a : {true, false}) {
        const ParamSpec& s = logical.at(a ? lora_a_name(l, t->name) : lora_b_name(l, t->name));
        values.push_back(tensor(s));
        tensors.push_back({peft_tensor_name(config, l, *t, a), s.shape, values.back().data()});
      }
  write_safetensors((fs::path(folder) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  return int(tensors.size());
}

}  // namespace feast
