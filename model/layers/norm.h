// A normalisation layer of either kind the families use, LayerNorm (GPT-2, with bias) or
// RMSNorm (Llama), replicated on every tensor-parallel rank. It keeps its output and
// statistics per activation slot, or in the stage's recompute set when its block recomputes
// it. Under sequence parallelism it sees this rank's rows only, and sums its parameter
// gradients over the tensor-parallel group at each backward (two small all-reduces per block
// and micro-batch; Megatron-LM sums them once per step, which would need the gradient
// reduction to know which ranges are partial). Legend: N rows (this rank's), C channels.
#pragma once

#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/layers/activation_memory.h"
#include "model/layers/layer_context.h"

namespace feast {

class Norm {
 public:
  // `name` is the tensor prefix ("layers.3.ln_1", "ln_f"); rows is the most N a slot holds;
  // saved: whether its activations have a buffer per slot (not recomputed).
  Norm(NormKind kind, float eps, const ParamSource& params, const std::string& name, int C, size_t rows,
       ActivationMemory& memory, bool saved);

  // out(slot) (N, C) = norm(x).
  void forward(const LayerContext& ctx, int slot, const TensorView& x, int N);
  // dx (N, C) += d loss / d x given dout = d loss / d out(slot); adds the parameter gradients.
  void backward(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout, const TensorView& x,
                int N, GradientSink& sink);

  // The halves of backward (a split backward): dx += as backward does, keeping dout; later the
  // parameter gradients from it.
  void backward_input(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout,
                      const TensorView& x, int N);
  void backward_weight(const LayerContext& ctx, int slot, const TensorView& x, int N, GradientSink& sink);

  const TensorView& out(int slot) const { return out_[size_t(slot)]; }
  // Its gradient range; none when frozen (LoRA's base).
  std::vector<FlatRange> grad_ranges() const {
    return params_.frozen ? std::vector<FlatRange>{} : std::vector<FlatRange>{params_.range};
  }

 private:
  // dx += d loss / d x alone (the parameter gradients the backend computes with it are dropped).
  void input_gradient(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout,
                      const TensorView& x, int N) const;
  // One call of the backend's norm backward with weight w: dx (N, C) +=, gw and gb (C) +=.
  void run(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& gw, const TensorView& gb,
           const TensorView& dout, const TensorView& x, const TensorView& w, int N) const;
  // The parameter gradients through the sink, summed over tp under sequence parallelism; dx +=
  // (computed with weight w).
  void add_parameter_grads(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout,
                           const TensorView& x, const TensorView& w, int N, GradientSink& sink);

  NormKind kind_;
  float eps_;
  int C_;
  WeightAndBias params_;
  std::vector<TensorView> out_, mean_, rstd_;  // per slot: (N, C), (N) LayerNorm only, (N)
  std::vector<TensorView> dout_;               // per slot (N, C), a split backward only
};

}  // namespace feast
