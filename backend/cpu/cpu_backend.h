// The CPU backend: the reference implementation of every op in backend/backend.h, float32, on
// host memory, through the op templates in model/cpu/ (plain loops plus OpenBLAS, OpenMP over
// rows or heads, every reduction in a fixed order so a run is bit-for-bit repeatable). The same
// templates instantiated for double are what the finite-difference tests check.
#pragma once

#include "backend/backend.h"

namespace feast {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return kCpu; }
  DType compute_dtype() const override { return DType::kFloat32; }

  Tensor allocate(DType dtype, size_t numel) override;
  size_t page_bytes() const override;
  Tensor reserve(DType dtype, size_t numel) override;
  void decommit(const TensorView& pages) override;
  void copy(const TensorView& dst, const TensorView& src) override;
  void zero(const TensorView& x) override;
  Stream& stream() override;
  std::unique_ptr<Event> create_event() override;
  std::unique_ptr<Stream> create_stream() override;
  void copy_async(const TensorView& dst, const TensorView& src, Stream& on) override;

  void embedding_forward(const TensorView& out, const TensorView& tokens, const TensorView& wte, const TensorView& wpe,
                         const TensorView& positions, int B, int T, int C, int vocab_begin, int vocab_end) override;
  void embedding_backward(const TensorView& dwte, const TensorView& dwpe, const TensorView& dout,
                          const TensorView& tokens, const TensorView& positions, int B, int T, int C, int vocab_begin, int vocab_end) override;
  void layernorm_forward(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                         const TensorView& weight, const TensorView& bias, int N, int C, float eps) override;
  void layernorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                          const TensorView& dout, const TensorView& inp, const TensorView& weight,
                          const TensorView& mean, const TensorView& rstd, int N, int C) override;
  void rmsnorm_forward(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                       int N, int C, float eps) override;
  void rmsnorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                        const TensorView& inp, const TensorView& weight, const TensorView& rstd, int N,
                        int C) override;
  void matmul_forward(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias,
                      int N, int C, int OC) override;
  void matmul_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                       const TensorView& dout, const TensorView& inp, const TensorView& weight, int N, int C,
                       int OC) override;
  void matmul_backward_input(const TensorView& dinp, const TensorView& dout, const TensorView& weight, int N, int C,
                             int OC) override;
  void matmul_backward_weight_rows(const TensorView& dweight_rows, const TensorView& dout, const TensorView& inp,
                                   int N, int C, int OC, int row_begin, int row_end) override;
  void lora_forward(const TensorView& out, const TensorView& h, const TensorView& inp, const TensorView& a,
                    const TensorView& b, const LoraShape& s) override;
  void lora_backward(const TensorView& dinp, const TensorView& da, const TensorView& db, const TensorView& h,
                     const TensorView& dh, const TensorView& dout, const TensorView& inp, const TensorView& a,
                     const TensorView& b, const LoraShape& s) override;
  void moe_route(const TensorView& probs, const TensorView& lse, const TensorView& expert, const TensorView& weight,
                 const TensorView& prob_sum, const TensorView& logits, int N, int E, int k, bool renormalize) override;
  void moe_route_backward(const TensorView& dlogits, const TensorView& probs, const TensorView& lse,
                          const TensorView& expert, const TensorView& weight, const TensorView& dweight,
                          const TensorView& dprob, float z_scale, int N, int E, int k, bool renormalize) override;
  void moe_gather(const TensorView& rows, const TensorView& inp, const TensorView& token, int M, int C) override;
  void moe_gather_backward(const TensorView& dinp, const TensorView& drows, const TensorView& slot, int N, int k,
                           int C) override;
  void moe_combine(const TensorView& out, const TensorView& rows, const TensorView& slot, const TensorView& weight,
                   int N, int k, int C) override;
  void moe_combine_backward(const TensorView& drows, const TensorView& dweight, const TensorView& dout,
                            const TensorView& rows, const TensorView& slot, const TensorView& weight, int N, int k,
                            int C) override;
  void moe_shared_gate(const TensorView& gate, const TensorView& logits, int N) override;
  void moe_shared_gate_backward(const TensorView& dlogits, const TensorView& gate, const TensorView& dgate,
                                int N) override;
  void dropout_forward(const TensorView& out, const TensorView& inp, const DropoutShape& s) override;
  void dropout_backward(const TensorView& dinp, const TensorView& dout, const DropoutShape& s) override;
  void dequantize_nf4(const TensorView& out, const Nf4Piece& piece) override;
  size_t attention_state_size(const AttentionShape& s) const override;
  size_t attention_workspace_size(const AttentionShape& s) const override;
  void attention_forward(const TensorView& out, const TensorView& state, const TensorView& qkv,
                         const AttentionShape& s) override;
  void attention_backward(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                          const TensorView& out, const TensorView& state, const TensorView& workspace,
                          const AttentionShape& s) override;
  size_t ring_attention_workspace_size(const AttentionShape& s) const override;
  void ring_attention_pack(const TensorView& kv, const TensorView& qkv, const AttentionShape& s) override;
  void ring_attention_forward(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                              const TensorView& kv, const TensorView& workspace, const RingBlock& b,
                              bool first) override;
  void ring_attention_backward(const TensorView& dq, const TensorView& dkv, const TensorView& dout,
                               const TensorView& out, const TensorView& lse, const TensorView& qkv,
                               const TensorView& kv, const TensorView& workspace, const RingBlock& b) override;
  void ring_attention_unpack(const TensorView& dqkv, const TensorView& dq, const TensorView& dkv,
                             const AttentionShape& s) override;
  void rope_forward(const TensorView& qkv, const TensorView& cos, const TensorView& sin,
                    const AttentionShape& s) override;
  void rope_backward(const TensorView& dqkv, const TensorView& cos, const TensorView& sin,
                     const AttentionShape& s) override;
  void gelu_forward(const TensorView& out, const TensorView& inp, size_t n) override;
  void gelu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, size_t n) override;
  void swiglu_forward(const TensorView& out, const TensorView& inp, int N, int I) override;
  void swiglu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, int N, int I) override;
  void add(const TensorView& out, const TensorView& a, const TensorView& b, size_t n) override;
  void cross_entropy_row_max(const TensorView& row_max, const TensorView& logits, int N, int Vl, int vocab_begin,
                             int V) override;
  void cross_entropy_partials(const TensorView& sum_exp, const TensorView& target_logit, const TensorView& logits,
                              const TensorView& row_max, const TensorView& targets, int N, int Vl, int vocab_begin,
                              int V, bool keep_exp) override;
  void cross_entropy_finish(const TensorView& logits, const TensorView& losses, const TensorView& row_max,
                            const TensorView& sum_exp, const TensorView& target_logit, const TensorView& targets,
                            int N, int Vl, int vocab_begin, int V, float dloss) override;
  double sum(const TensorView& x) override;
  void adamw_step(const TensorView& params, const TensorView& m, const TensorView& v, const TensorView& grads,
                  const AdamWStep& step, float grad_scale) override;
  double sum_of_squares(const TensorView& x) override;
  void cast(const TensorView& dst, const TensorView& src) override;
};

}  // namespace feast
