// The feed-forward part of one block on this rank: fc (column-parallel; for SwiGLU its rows are
// the gate and up projections, each split over the tensor-parallel group), the activation
// (GELU, or SwiGLU's silu(gate) * up), and proj (row-parallel, partial outputs summed over the
// group). Legend: N rows, C channels, Il this rank's MLP width, Fl = Il or 2 Il (SwiGLU).
// It keeps fc's output and the activation per slot; under selective recomputation the
// activation is recomputed from fc's output, under full recomputation both are.
#pragma once

#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/layers/activation_memory.h"
#include "model/layers/linear.h"

namespace feast {

class Mlp {
 public:
  // name: its tensors' prefix within the layer ("mlp", or "mlp.shared" for an MoE block's shared
  // experts); width: its full width (model.intermediate_size, or the shared experts').
  Mlp(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer, int tp, size_t rows,
      ActivationMemory& memory, Recompute recompute, const std::string& name, int width);

  // out (N, C) = mlp(x) summed over the tensor-parallel group.
  void forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& out, int N);
  // Its first half: fc's output and the activation of `slot`, which its backward reads (full
  // recomputation; proj's output is not needed again).
  void forward_to_activation(const LayerContext& ctx, int slot, const TensorView& x, int N);
  // The activation of `slot` again from fc's output (selective recomputation).
  void recompute_activation(const LayerContext& ctx, int slot, int N);
  // dx (N, C) = d loss / d x (summed over the group) from dout (N, C); adds parameter gradients.
  void backward(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx, const TensorView& x,
                int N, GradientSink& sink);

  // The halves of backward (a split backward): dx from dout, keeping fc's output gradient; later
  // the parameter gradients, from the same dout (the caller keeps it) and that gradient.
  void backward_input(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx, int N);
  void backward_weight(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& x, int N,
                       GradientSink& sink);

  std::vector<FlatRange> grad_ranges() const;

 private:
  MlpKind kind_;
  int width_, fc_width_;  // Il, Fl
  ColumnParallelLinear fc_;
  RowParallelLinear proj_;
  std::vector<TensorView> pre_, act_;  // per slot: (N, Fl) pre-activation, (N, Il) activation
  std::vector<TensorView> dpre_;        // per slot (N, Fl), a split backward only
};

}  // namespace feast
