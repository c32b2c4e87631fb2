// The launchers of the CUDA backend's kernels: one .cu file per op (named after it) defines its
// kernels and the launchers declared here. A launcher enqueues on ctx.stream and returns without
// waiting; only sum() and sum_of_squares() wait, because they return a value to the host. `dt` is
// the compute dtype (float32 or bfloat16) of the operands backend/backend.h puts in compute_dtype();
// every other operand's type is in the signature. The shapes and the meaning of each op are those
// of the same-named function in backend/backend.h (whose CPU reference is model/cpu/<op>.cpp).
// Operands have been checked by CudaBackend before a launcher sees them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/scalar_math.h"

namespace feast::cuda {

// embedding.cu
// (positions: null, or each row's document position, as AttentionShape::positions)
void embedding_forward(const CudaContext& ctx, DType dt, void* out, const int32_t* tokens, const void* wte,
                       const void* wpe, const int32_t* positions, int B, int T, int C, int vocab_begin,
                       int vocab_end);
void embedding_backward(const CudaContext& ctx, DType dt, float* dwte, float* dwpe, const void* dout,
                        const int32_t* tokens, const int32_t* positions, int B, int T, int C, int vocab_begin,
                        int vocab_end);

// layernorm.cu
void layernorm_forward(const CudaContext& ctx, DType dt, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int N, int C, float eps);
void layernorm_backward(const CudaContext& ctx, DType dt, void* dinp, float* dweight, float* dbias, const void* dout,
                        const void* inp, const void* weight, const float* mean, const float* rstd, int N, int C);

// rmsnorm.cu
void rmsnorm_forward(const CudaContext& ctx, DType dt, void* out, float* rstd, const void* inp, const void* weight,
                     int N, int C, float eps);
void rmsnorm_backward(const CudaContext& ctx, DType dt, void* dinp, float* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int N, int C);

// matmul.cu (cuBLASLt; weights (OC, C) row-major like torch.nn.Linear)
// pre = inp @ weight^T + bias and act = gelu(pre) through cuBLASLt's GELU_AUX epilogue; false
// (nothing done) where it cannot take the call.
bool matmul_gelu_forward(const CudaContext& ctx, DType dt, void* pre, void* act, const void* inp, const void* weight,
                         const void* bias, int N, int C, int OC);
void matmul_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, const void* weight,
                    const void* bias, int N, int C, int OC);
// dinp (N, C) = dout (N, OC) @ weight.
void matmul_backward_input(const CudaContext& ctx, DType dt, void* dinp, const void* dout, const void* weight, int N,
                           int C, int OC);
// dweight_rows (row_end - row_begin, C) += dout[:, row_begin:row_end]^T @ inp (float32 result).
void matmul_backward_weight_rows(const CudaContext& ctx, DType dt, float* dweight_rows, const void* dout,
                                 const void* inp, int N, int C, int OC, int row_begin, int row_end);
// dbias (OC) += column sums of dout (N, OC).
void bias_backward(const CudaContext& ctx, DType dt, float* dbias, const void* dout, int N, int OC);

// grouped_matmul.cu (one cublasGemmGroupedBatchedEx call for every group of rows; weights: each
// group's (OC, C) weight on the device; offsets: the groups' rows, as Backend::grouped_matmul_*).
// false, having launched nothing, where cuBLAS has no grouped kernel for the dtype: the caller
// runs the groups one by one.
bool grouped_matmul_forward(const CudaContext& ctx, DType dt, void* out, const void* inp,
                            const std::vector<const void*>& weights, const std::vector<int>& offsets, int C, int OC);
bool grouped_matmul_backward_input(const CudaContext& ctx, DType dt, void* dinp, const void* dout,
                                   const std::vector<const void*>& weights, const std::vector<int>& offsets, int C,
                                   int OC);

// lora.cu (cublasGemmEx; Backend::lora_forward/backward)
void lora_forward(const CudaContext& ctx, DType dt, void* out, void* h, const void* inp, const void* a, const void* b,
                  const LoraShape& s);
void lora_backward(const CudaContext& ctx, DType dt, void* dinp, float* da, float* db, void* h, void* dh,
                   const void* dout, const void* inp, const void* a, const void* b, const LoraShape& s);

// dropout.cu (LoRA dropout: out = inp * keep / (1 - p); the backward adds dout's kept elements into dinp)
void dropout_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, const DropoutShape& s);
void dropout_backward(const CudaContext& ctx, DType dt, void* dinp, const void* dout, const DropoutShape& s);

// nf4.cu (Backend::dequantize_nf4: out (rows, cols) in the compute dtype)
void dequantize_nf4(const CudaContext& ctx, DType dt, void* out, const Nf4Piece& piece);

// attention.cu (causal, grouped-query heads; qkv rows are [q heads | k heads | v heads];
// positions: null, or document positions as AttentionShape::positions)
size_t attention_state_floats(int B, int T, int n_head);
void attention_forward(const CudaContext& ctx, DType dt, void* out, float* state, const void* qkv, int B, int T,
                       int n_head, int n_kv_head, int head_dim, const int32_t* positions);
void attention_backward(const CudaContext& ctx, DType dt, void* dqkv, const void* dout, const void* qkv, float* state,
                        int B, int T, int n_head, int n_kv_head, int head_dim, const int32_t* positions);

// ring_attention.cu (context parallelism: one block of the ring; float32 output, log-sum-exp and
// gradient accumulators; the workspace holds the backward's D = rowsum(dO * O), B NH T floats)
struct RingAttentionCall {
  int B, T, n_head, n_kv_head, head_dim;
  int q_chunks[2], kv_chunks[2];
};
void ring_attention_pack(const CudaContext& ctx, DType dt, void* kv, const void* qkv, size_t rows, int n_head,
                         int n_kv_head, int head_dim);
void ring_attention_unpack(const CudaContext& ctx, DType dt, void* dqkv, const float* dq, const float* dkv,
                           size_t rows, int n_head, int n_kv_head, int head_dim);
void ring_attention_forward(const CudaContext& ctx, DType dt, float* out, float* lse, const void* qkv, const void* kv,
                            const RingAttentionCall& call, bool first);
void ring_attention_backward(const CudaContext& ctx, DType dt, float* dq, float* dkv, float* workspace,
                             const void* dout, const void* out, const float* lse, const void* qkv, const void* kv,
                             const RingAttentionCall& call);

// rope.cu (in place on the q and k heads; cos, sin (maxT, hs/2))
void rope_forward(const CudaContext& ctx, DType dt, void* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int B, int T, int n_head, int n_kv_head, int head_dim);
void rope_backward(const CudaContext& ctx, DType dt, void* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int B, int T, int n_head, int n_kv_head, int head_dim);

// gelu.cu
void gelu_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, size_t n);
void gelu_backward(const CudaContext& ctx, DType dt, void* dinp, const void* inp, const void* dout, size_t n);

// swiglu.cu
void swiglu_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, int N, int I);
void swiglu_backward(const CudaContext& ctx, DType dt, void* dinp, const void* inp, const void* dout, int N, int I);

// moe.cu: a mixture of experts' router and row moves (Backend::moe_*).
void moe_route(const CudaContext& ctx, DType dt, float* probs, float* lse, int32_t* expert, float* weight,
               float* prob_sum, const void* logits, int N, int E, int k, bool renormalize);
void moe_route_backward(const CudaContext& ctx, DType dt, void* dlogits, const float* probs, const float* lse,
                        const int32_t* expert, const float* weight, const float* dweight, const float* dprob,
                        float z_scale, int N, int E, int k, bool renormalize);
void moe_gather(const CudaContext& ctx, DType dt, void* rows, const void* inp, const int32_t* token, int M, int C);
void moe_gather_backward(const CudaContext& ctx, DType dt, void* dinp, const void* drows, const int32_t* slot, int N,
                         int k, int C);
void moe_combine(const CudaContext& ctx, DType dt, void* out, const void* rows, const int32_t* slot,
                 const float* weight, int N, int k, int C);
void moe_combine_backward(const CudaContext& ctx, DType dt, void* drows, float* dweight, const void* dout,
                          const void* rows, const int32_t* slot, const float* weight, int N, int k, int C);
void moe_shared_gate(const CudaContext& ctx, DType dt, float* gate, const void* logits, int N);
void moe_shared_gate_backward(const CudaContext& ctx, DType dt, void* dlogits, const float* gate, const float* dgate,
                              int N);

// residual.cu
void add(const CudaContext& ctx, DType dt, void* out, const void* a, const void* b, size_t n);

// cross_entropy.cu (logits (N, Vl) in dt; columns >= V - vocab_begin are padding)
void cross_entropy_row_max(const CudaContext& ctx, DType dt, float* row_max, const void* logits, int N, int Vl,
                           int vocab_begin, int V);
void cross_entropy_partials(const CudaContext& ctx, DType dt, float* sum_exp, float* target_logit, void* logits,
                            const float* row_max, const int32_t* targets, int N, int Vl, int vocab_begin, int V,
                            bool keep_exp);
void cross_entropy_finish(const CudaContext& ctx, DType dt, void* logits, float* losses, const float* row_max,
                          const float* sum_exp, const float* target_logit, const int32_t* targets, int N, int Vl,
                          int vocab_begin, int V, float dloss);

// reduce.cu: float64 sums in a fixed order (the same result every run); they wait for the stream.
double sum(const CudaContext& ctx, const float* x, size_t n);
double sum_of_squares(const CudaContext& ctx, const float* x, size_t n);
// Each part's sum of squares, as sum_of_squares computes it, with one wait for all.
std::vector<double> sums_of_squares(const CudaContext& ctx, const std::vector<const float*>& parts,
                                    const std::vector<size_t>& counts);

// adamw.cu: one fused pass over float32 params, m, v from grads * grad_scale.
void adamw_step(const CudaContext& ctx, float* params, float* m, float* v, const float* grads, size_t n,
                const AdamWStep& step, float grad_scale);

// cast.cu: float32 <-> bfloat16 (round to nearest even).
void cast(const CudaContext& ctx, DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t n);

}  // namespace feast::cuda
