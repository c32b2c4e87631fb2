// Hugging Face weights and feast's logical tensors, both ways. Which Hugging Face tensors make
// up each logical tensor is one table (hf_tensor_map): GPT-2's Conv1D weights are stored
// (in, out) and fused like feast's q/k/v; Llama's q, k, v and gate, up are separate tensors
// that become row blocks of feast's fused ones; the vocabulary is padded to a multiple of 128 in
// feast and not in Hugging Face. Import reads, on each rank, only the rectangles of each tensor
// that the rank's pipeline stage and tensor-parallel slice hold (the files are memory-mapped,
// so only those pages are read); export writes whole tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "interop/hf/safetensors_model.h"
#include "interop/hf/safetensors_writer.h"
#include "model/gradient_sink.h"
#include "model/model_config.h"
#include "model/parameters.h"

namespace feast {

// Rows [row_begin, row_begin + rows) of a feast logical tensor, stored in Hugging Face as
// `hf_name` with shape `hf_shape` (transposed: stored (in, out), GPT-2's Conv1D).
struct HfPiece {
  std::string hf_name;
  std::vector<int64_t> hf_shape;
  int64_t row_begin = 0, rows = 0;
  bool transposed = false;
};

// A logical tensor (not a tied copy) and where its rows live; rows past the pieces (vocabulary
// padding) are zero.
struct HfTensor {
  std::string name;  // feast's logical name
  std::vector<HfPiece> pieces;
};

// The mapping for `config`. `prefix` is the Hugging Face module prefix of the decoder:
// "transformer." (GPT2LMHeadModel) or "model." (LlamaForCausalLM), or "" (base models).
std::vector<HfTensor> hf_tensor_map(const ModelConfig& config, const std::string& prefix);

// The prefix of the tensors in a model folder's files, found from its embedding's name.
std::string hf_prefix_of(const SafetensorsModel& model, const ModelConfig& config);

// Checks that `model` holds exactly the tensors `config` needs with the shapes it needs (buffers
// Hugging Face keeps beside the weights, such as GPT-2's attn.bias masks, and a tied head stored
// anyway, are ignored). Throws DataError naming the folder, the tensor and both shapes, or the
// tensors missing and unexpected. Reads headers only.
void check_hf_weights(const SafetensorsModel& model, const ModelConfig& config);

// Fills this rank's flat parameter buffer (host float32; `table`'s tensors) from `model`,
// reading only the rectangles the rank holds: with `only`, only the flat elements inside those
// ranges (ZeRO 3: the rank's shard), the rest left untouched. Vocabulary
// padding rows are set to zero.
void import_hf_weights(const SafetensorsModel& model, const ModelConfig& config, const LocalTable& table,
                       float* params, const std::vector<FlatRange>* only = nullptr);

// Whole logical tensors (padded vocabulary rows zero) read from `model`, which must outlive the
// source, after check_hf_weights: for generation, which holds the whole model on one process.
LogicalTensorSource hf_logical_tensors(const SafetensorsModel& model, const ModelConfig& config);

// The Hugging Face tensors of a model whose logical tensors `source` gives, in the order
// `transformers` lists them. The returned storage backs the TensorToWrite pointers.
struct HfExport {
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
};
HfExport export_hf_tensors(const ModelConfig& config, const LogicalTensorSource& source);

}  // namespace feast
