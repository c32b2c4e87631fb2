// LoRA (Hu et al. 2021): low-rank adapters on the decoder's linear layers, the base weights
// frozen. An adapted product computes W x + scale · B (A x) with A (r, in), B (out, r) and
// scale = alpha / r, as PEFT's LoraLayer does (dropout on the adapter's input aside).
//
// The targets are named as each family's Hugging Face modules are (PEFT's target_modules):
//   Llama family: q, k, v (blocks of the fused attn.qkv), o (attn.proj), gate, up (blocks of
//                 the fused mlp.fc), down (mlp.proj)
//   GPT-2:        qkv (c_attn, the whole fused product), proj (attn.c_proj), fc (mlp.c_fc),
//                 fc_proj (mlp.c_proj)
// An adapter on a block of a fused product updates only that block's output columns.
//
// Tensor parallelism (Megatron's split of the base, no new activation traffic): the adapter of
// a column-parallel product keeps A whole (replicated) and splits B by output rows as the base
// splits its rows, so B (A x) is this rank's output columns exactly; that of a row-parallel
// product splits A by input columns, as the base, and keeps B whole, so B (A_r x_r) is a partial
// sum that the product's own reduction sums with the base's. The one cost: the replicated
// matrix's gradient (A's of a column-parallel, B's of a row-parallel product) is a partial sum
// over the tensor-parallel ranks, summed by an all-reduce of its r · width floats per adapted
// product and micro-batch, as sequence parallelism's norms are.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/parameters.h"

namespace feast {

// How LoRA's frozen base keeps the block products' weights (model/quantized_base.h): in the
// compute dtype, in bfloat16, or in 4-bit NormalFloat (QLoRA), the last two turned back into the
// compute dtype where a product needs them.
enum class BaseFormat { kCompute, kBf16, kNf4 };

struct LoraSpec {
  int rank = 0;  // 0: no adapters
  double alpha = 16;
  // PEFT's lora_dropout on each adapter's input while training (backend/dropout_mask.h); its
  // masks are drawn from `seed` (the run's), the step, the adapter and each element's place.
  float dropout = 0;
  uint64_t seed = 0;
  std::vector<std::string> targets;
  BaseFormat base = BaseFormat::kCompute;
  bool double_quant = false;  // kNf4: the blocks' scales in 8 bits too
  bool enabled() const { return rank > 0; }
  float scale() const { return float(alpha / rank); }
};

// Where one target sits: the product (its tensor name's middle, "attn.qkv"), which row block of
// a fused product it updates (-1: all rows), and whether the product is row-parallel.
struct LoraTarget {
  std::string name;    // "q"
  std::string linear;  // "attn.qkv"
  int block = -1;
  bool row_parallel = false;
  std::string hf_module;  // the Hugging Face module's path in a block: "self_attn.q_proj", "attn.c_attn"
};

// The stream of layer `layer`'s adapter on target `target` (its index in lora_targets) for
// step `step`: what its dropout masks are drawn from.
uint64_t lora_dropout_stream(uint64_t seed, int64_t step, int layer, int target);

// The family's targets, in flat-buffer order.
const std::vector<LoraTarget>& lora_targets(const ModelConfig& config);
// The targets a family defaults to, as PEFT's default target_modules for it: q and v (Llama),
// qkv (GPT-2).
std::vector<std::string> default_lora_targets(const ModelConfig& config);
// The named target of the family; throws ConfigError listing the family's names when absent.
const LoraTarget& lora_target(const ModelConfig& config, const std::string& name);
// The targets lora.targets names, in the family's (flat-buffer) order; throws ConfigError for a
// name the family lacks, one named twice, or none.
std::vector<const LoraTarget*> chosen_lora_targets(const ModelConfig& config, const LoraSpec& lora);

// The adapters' table, in flat-buffer order: per layer, per configured target (in the family's
// order) "layers.L.lora.T.A" (r, in) then "layers.L.lora.T.B" (out, r), adjacent (one gradient
// range). A: normal with the variance of PEFT's default Kaiming-uniform init (1 / (3 in)); B:
// zero, so a fresh adapter leaves the model as it is. Both are weight-decayed.
ParamTable lora_param_table(const ModelConfig& config, const LoraSpec& lora);

// Merges the adapters on `weight` (a logical tensor of decoder_param_table, (out, in) row-major,
// whole in `values`) into it: W += scale · B A for each configured target on it, on the rows of
// its block. `adapter` gives a whole logical adapter tensor by name.
void merge_lora(const ModelConfig& config, const LoraSpec& lora, const ParamSpec& weight, std::vector<float>& values,
                const std::function<std::vector<float>(const std::string& name)>& adapter);

// The adapter tensors' names of target t in layer l.
std::string lora_a_name(int layer, const std::string& target);
std::string lora_b_name(int layer, const std::string& target);

}  // namespace feast
