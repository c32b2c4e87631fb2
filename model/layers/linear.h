// Megatron's tensor-parallel linear layers, built on the conjugate operators of
// model/tensor_parallel.h (applied through layer_context.h's all_rows and sum_partials). A
// column-parallel layer holds output rows [rank] of its weight: its forward needs no
// communication, its backward sums the partial input gradients (copy-to-tp). A row-parallel
// layer holds input columns [rank]: its forward sums the partial outputs (reduce-from-tp), its
// backward needs no communication; its replicated bias is added by tp
// rank 0 only, before the sum. With sequence parallelism a column-parallel layer's input and a
// row-parallel layer's output hold this rank's N/tp rows: the column-parallel layer gathers its
// input's rows (and gathers them again for its weight gradient rather than keeping them) and
// reduce-scatters its input gradient; the row-parallel layer reduce-scatters its output and
// gathers its output gradient. Each backward also comes in two halves for the zero-bubble
// schedule: the input gradient now, the weight and bias gradients later from the output
// gradient the caller kept (a row-parallel layer's as this rank's rows, gathered again).
// Under LoRA (model/lora.h) the weight and bias are frozen (the backward computes the input
// gradient only) and the layer carries the adapters of its targets: each adds scale · B (A x) to
// its output columns, inside the product's own reduction, and recomputes A x in its backward
// rather than keeping it.
// Legend: N rows of the micro-batch, IN and OUT this rank's input and output widths.
#pragma once

#include <string>
#include <vector>

#include "model/layers/layer_context.h"

namespace feast {

// One adapter on this rank: A (r, in) and B (out, r) as this rank holds them (A whole or its
// input columns, B its output rows or whole), adjacent in the adapters' buffer, and its shape:
// the output columns [col, col + OC) of the product it updates (N is the micro-batch's).
struct LoraAdapter {
  const LocalParam* a = nullptr;
  const LocalParam* b = nullptr;
  TensorView a_view, b_view;
  FlatRange range;  // A then B
  LoraShape shape;
  // Dropout's place of the adapter: its layer, its target's index in lora_targets, and this
  // rank's input columns [col0, col0 + in) of the product's whole input, `columns` wide.
  int layer = 0, target = 0, col0 = 0, columns = 0;
};

// The adapters of product `linear` ("attn.qkv") of `layer` that p.adapters holds, in target
// order. in: this rank's input width; out_local: this rank's output width.
std::vector<LoraAdapter> find_adapters(const LayerParams& p, int layer, const std::string& linear, int in,
                                       int out_local);

class ColumnParallelLinear {
 public:
  // in: the full input width; out_local: this rank's output rows.
  ColumnParallelLinear(const LayerParams& params, int layer, const std::string& linear, bool has_bias, int in,
                       int out_local);
  // out (N, out_local) = x (N, in) @ W^T + b; x has N/tp rows under sequence parallelism.
  void forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const;
  // pre = x @ W^T + b and act = gelu(pre), in one call (Backend::matmul_gelu_forward).
  void forward_gelu(const LayerContext& ctx, const TensorView& pre, const TensorView& act, const TensorView& x,
                    int N) const;
  // dx (N, in) = the sum over ranks of dout @ W (this rank's N/tp rows of it under sequence
  // parallelism); the weight and bias gradients are added.
  void backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout, const TensorView& x, int N,
                GradientSink& sink) const;
  // The halves of backward: dx only; then the weight and bias gradients from the same dout.
  void backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout, int N) const;
  void backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x, int N,
                       GradientSink& sink) const;
  // Its gradient ranges: the weight and bias unless frozen, then each adapter's.
  std::vector<FlatRange> grad_ranges() const;

 private:
  WeightAndBias p_;
  int in_, out_;
  std::vector<LoraAdapter> adapters_;
};

class RowParallelLinear {
 public:
  // in_local: this rank's input columns; out: the full output width.
  RowParallelLinear(const LayerParams& params, int layer, const std::string& linear, bool has_bias, int in_local,
                    int out);
  // out (N, out) = the sum over ranks of x (N, in_local) @ W^T, + b (this rank's N/tp rows of it
  // under sequence parallelism).
  void forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const;
  // dx (N, in_local) = dout @ W (dout is replicated, or this rank's N/tp rows of it under
  // sequence parallelism); the weight and bias gradients are added.
  void backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout, const TensorView& x, int N,
                GradientSink& sink) const;
  // The halves of backward, from the same dout (this rank's rows under sequence parallelism,
  // gathered by each half): dx; then the weight and bias gradients.
  void backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout, int N) const;
  void backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x, int N,
                       GradientSink& sink) const;
  // Its gradient ranges: the weight and bias unless frozen, then each adapter's.
  std::vector<FlatRange> grad_ranges() const;

 private:
  WeightAndBias p_;
  int in_, out_;
  std::vector<LoraAdapter> adapters_;
};

}  // namespace feast
