// The feed-forward part of one block on this rank: fc (column-parallel; for SwiGLU its rows are
// the gate and up projections, each split over the tensor-parallel group), the activation
// (GELU, or SwiGLU's silu(gate) * up), and proj (row-parallel, partial outputs summed over the
// group). Legend: N rows, C channels, Il this rank's MLP width, Fl = Il or 2 Il (SwiGLU).
#pragma once

#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/layers/linear.h"

namespace feast {

class Mlp {
 public:
  Mlp(const ModelConfig& config, const DecoderArch& arch, const LocalTable& table, const TensorView& params,
      const std::string& prefix, int tp, size_t rows, int slots, Backend& backend);

  // out (N, C) = mlp(x) summed over the tensor-parallel group.
  void forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& out, int N);
  // dx (N, C) = d loss / d x (summed over the group) from dout (N, C); adds parameter gradients.
  void backward(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx, const TensorView& x,
                int N, GradientSink& sink);

  std::vector<FlatRange> grad_ranges() const { return {fc_.grad_range(), proj_.grad_range()}; }
  size_t activation_bytes() const { return bytes_of(pre_) + bytes_of(act_); }

 private:
  MlpKind kind_;
  int width_, fc_width_;  // Il, Fl
  ColumnParallelLinear fc_;
  RowParallelLinear proj_;
  std::vector<Tensor> pre_, act_;  // per slot: (N, Fl) pre-activation, (N, Il) activation
};

}  // namespace feast
