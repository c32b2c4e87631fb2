// LoRA's frozen base with its block products' weights (attn.qkv, attn.proj, mlp.fc, mlp.proj)
// kept smaller than the compute dtype: in bfloat16, or in 4-bit NormalFloat as QLoRA keeps them
// (backend/nf4.h: blocks of 64, an absmax each; optionally the absmax values in 8 bits too). A
// product's weight is turned back into the compute dtype, into one scratch buffer the stage's
// products share, each time the product runs, forward and backward: the base then costs about
// half a byte per parameter at rest and one product's weight in full while it is used. The token
// embedding, the norms, the biases and the head stay in the compute dtype (bitsandbytes
// quantizes the nn.Linear layers only and leaves lm_head out), in the frozen buffer beside.
//
// What is quantized whole, as bitsandbytes would quantize the Hugging Face module: a fused
// tensor's row blocks that Hugging Face stores apart (Llama's q, k, v and gate, up), or the whole
// tensor (GPT-2's c_attn, stored fused). Every rank quantizes each whole unit its stage holds and
// keeps the rectangles its tensor-parallel slice holds, so the values, the blocks and the scales
// are those of one rank at every layout.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/lora.h"
#include "model/parameters.h"

namespace feast {

// Whether `spec` is one of the block products' weights a format other than kCompute stores apart.
bool stored_apart(const ParamSpec& spec);
// `table` without the tensors stored apart (ties renumbered), and those tensors alone.
ParamTable without_stored_apart(const ParamTable& table);
ParamTable stored_apart_only(const ParamTable& table);
// Whether LoRA's base keeps its block weights apart on a backend computing in `compute`: in NF4
// always, in bfloat16 unless that is the compute dtype already.
bool base_stored_apart(const LoraSpec& lora, DType compute);
// The rows of each unit quantized whole, in order (they sum to spec.shape[0]).
std::vector<int64_t> quantization_units(const ModelConfig& config, const ParamSpec& spec);

class QuantizedBase {
 public:
  // format: kBf16 or kNf4; its storage is allocated (zero) here, so memory reports are exact
  // before load().
  QuantizedBase(const ModelConfig& config, const StageSpec& stage, BaseFormat format, bool double_quant,
                Backend& backend);
  QuantizedBase(const QuantizedBase&) = delete;
  QuantizedBase& operator=(const QuantizedBase&) = delete;

  // This stage's tensors stored here (logical: the block products' weights).
  const LocalTable& table() const { return table_; }
  // Stores each of the stage's tensors from its whole logical values.
  void load(const LogicalTensorSource& source);
  // Local tensor p (of table()) in the compute dtype, written into the front of `scratch`.
  TensorView materialize(const LocalParam& p, const TensorView& scratch) const;
  // Device bytes held, and the elements of the largest local tensor (the scratch it needs).
  size_t bytes() const;
  size_t max_local_numel() const;
  BaseFormat format() const { return format_; }

  // What bytes() and max_local_numel() will be, without allocating (the planner's).
  struct Size {
    size_t bytes = 0, max_local_numel = 0;
  };
  static Size planned(const ModelConfig& config, const StageSpec& stage, BaseFormat format, bool double_quant);

 private:
  // Elements [at, at + n) of one of the storage arenas.
  struct Span {
    size_t at = 0, n = 0;
  };
  // One rectangle of a unit on this rank: local rows [local_row, local_row + nf4.rows); its
  // codes and scales (bytes, or floats when single-quantized) and its unit's absmax2 (floats).
  struct Piece {
    int local_row = 0;
    size_t unit_row_begin = 0, unit_rows = 0;  // the unit: logical rows
    Span codes, scales, absmax2;
    Nf4Piece nf4;
  };
  struct Stored {
    const LocalParam* param = nullptr;
    std::vector<Piece> pieces;  // kNf4
    Span bf16;                  // kBf16: the local tensor
    TensorView bf16_values;
  };
  // Every tensor's pieces and where they go in the uint8, float32 and bfloat16 arenas, whose
  // sizes it gives; the shared scale code of double quantization first among the floats.
  struct Layout {
    std::vector<Stored> stored;  // one per table tensor, in order
    Span scale_code;
    size_t bytes = 0, floats = 0, halves = 0;
  };
  static Layout layout(const ModelConfig& config, const LocalTable& table, BaseFormat format, bool double_quant);

  Backend& backend_;
  BaseFormat format_;
  bool double_quant_;
  ParamTable logical_;
  LocalTable table_;
  std::vector<Stored> stored_;
  Tensor bytes_, floats_, halves_;  // uint8 codes and scale codes; float32 scales; bfloat16 values
  TensorView scale_code_;           // double quantization: nf4_scale_code() on the device
};

}  // namespace feast
