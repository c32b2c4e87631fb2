// CudaBackend: checks each op's operands (on this GPU, of the dtype the op expects, large
// enough; the message names the op and the operand) and calls the op's launcher on the
// backend's stream. Copies that involve host memory leave the host free to use or free its
// buffer when copy() returns: small uploads go through pinned buffers (host_uploads.h) and are
// queued; the others wait for the stream. Everything else returns as soon as it is enqueued.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/cublas_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_stream.h"
#include "backend/cuda/host_uploads.h"
#include "backend/cuda/pinned_host_allocator.h"
#include "backend/cuda/reserved_device_memory.h"
#if defined(FEAST_WITH_CUDNN)
#include "backend/cuda/attention_cudnn.h"
#endif
#include "backend/cuda/kernels.h"

namespace feast {
namespace cuda {

DeviceScratch::~DeviceScratch() {
  if (data_) {
    cudaFreeAsync(data_, stream_);
    cudaStreamSynchronize(stream_);
  }
}

void* DeviceScratch::get(size_t bytes) {
  if (bytes <= bytes_) return data_;
  const size_t grown = std::max(bytes, bytes_ + bytes_ / 2);
  if (data_) {
    FEAST_CUDA_CHECK(cudaFreeAsync(data_, stream_));  // once the ops queued before are done with it
    data_ = nullptr;
    bytes_ = 0;
  }
  FEAST_CUDA_CHECK(cudaMallocAsync(&data_, grown, stream_));
  bytes_ = grown;
  return data_;
}

namespace {

size_t n(int a) { return static_cast<size_t>(a); }
size_t n(int a, int b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

cuda::RingAttentionCall ring_call(const RingBlock& b) {
  const AttentionShape& s = b.shape;
  return {s.B, s.T, s.n_head, s.n_kv_head, s.head_dim, {b.q_chunks[0], b.q_chunks[1]},
          {b.kv_chunks[0], b.kv_chunks[1]}};
}

// A: an operand in the compute dtype; OA: optional; F / OF: float32; I32: int32 token ids; OI32:
// optional int32 (document positions).
#define A(v, count) operand(v, compute_, count, false, __func__, #v)
#define OA(v, count) operand(v, compute_, count, true, __func__, #v)
#define F(v, count) static_cast<float*>(operand(v, DType::kFloat32, count, false, __func__, #v))
#define OF(v, count) static_cast<float*>(operand(v, DType::kFloat32, count, true, __func__, #v))
#define I32(v, count) static_cast<const int32_t*>(operand(v, DType::kInt32, count, false, __func__, #v))
#define OI32(v, count) static_cast<const int32_t*>(operand(v, DType::kInt32, count, true, __func__, #v))

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device_index, DType compute)
      : device_{DeviceType::kCuda, device_index},
        compute_(compute),
        allocator_(device_index),
        stream_(device_index),
        scratch_(stream_.handle()),
        uploads_(stream_.handle()),
        reserved_(device_index, stream_.handle()) {
    FEAST_CHECK(compute == DType::kFloat32 || compute == DType::kBFloat16,
                "the CUDA backend computes in float32 or bfloat16, not " << dtype_name(compute));
    FEAST_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.sm_count, cudaDevAttrMultiProcessorCount, device_index));
    FEAST_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.cc_major, cudaDevAttrComputeCapabilityMajor, device_index));
    FEAST_CUBLAS_CHECK(cublasLtCreate(&ctx_.lt));
    ctx_.lt_workspace = allocator_.allocate(kLtWorkspaceBytes);  // counted in the peak like the rest
    ctx_.stream = stream_.handle();
    attention_choice_ = attention_choice();  // a wrong FEAST_CUDA_ATTENTION stops the run here, not at the first layer
    FEAST_CUBLAS_CHECK(cublasCreate(&ctx_.blas));
    FEAST_CUBLAS_CHECK(cublasSetStream(ctx_.blas, ctx_.stream));
    ctx_.scratch = &scratch_;
    ctx_.uploads = &uploads_;
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(ctx_.stream);
    if (ctx_.lt_workspace) allocator_.deallocate(ctx_.lt_workspace);
    if (ctx_.blas) cublasDestroy(ctx_.blas);
    if (ctx_.lt) cublasLtDestroy(ctx_.lt);
  }

  std::string name() const override { return device_.name(); }
  Device device() const override { return device_; }
  DType compute_dtype() const override { return compute_; }

  Tensor allocate(DType dtype, size_t numel) override { return Tensor(allocator_, dtype, numel); }
  Tensor allocate_host(DType dtype, size_t numel) override { return Tensor(pinned_, dtype, numel); }
  size_t page_bytes() const override { return reserved_.page_bytes(); }
  Tensor reserve(DType dtype, size_t numel) override {
    return page_bytes() > 0 ? Tensor(reserved_, dtype, numel) : allocate(dtype, numel);
  }
  void commit(const TensorView& pages) override { reserved_.commit(pages.data, pages.bytes()); }
  void decommit(const TensorView& pages) override { reserved_.decommit(pages.data, pages.bytes()); }

  void copy(const TensorView& dst, const TensorView& src) override {
    if (!check_copy(dst, src, "copy")) return;
    // A micro-batch's tokens and targets: queued without waiting for the stream.
    if (src.device.is_cpu() && !dst.device.is_cpu() && uploads_.upload(dst.data, src.data, dst.bytes())) return;
    FEAST_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDefault, ctx_.stream));
    if (dst.device.is_cpu() || src.device.is_cpu()) stream_.synchronize();
  }

  void copy_async(const TensorView& dst, const TensorView& src, Stream& on) override {
    if (check_copy(dst, src, "copy_async"))
      FEAST_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDefault, handle_of(on)));
  }

  void zero(const TensorView& x) override {
    check_place(x, "zero", "x", false);
    if (x.numel > 0) FEAST_CUDA_CHECK(cudaMemsetAsync(x.data, 0, x.bytes(), ctx_.stream));
  }

  Stream& stream() override { return stream_; }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(); }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(device_.index); }

  // ---- ops: check, then launch ----------------------------------------------------------------
  void embedding_forward(const TensorView& out, const TensorView& tokens, const TensorView& wte,
                         const TensorView& wpe, const TensorView& positions, int B, int T, int C, int vocab_begin,
                         int vocab_end) override {
    cuda::embedding_forward(ctx_, compute_, A(out, n(B * T, C)), I32(tokens, n(B, T)),
                            A(wte, n(vocab_end - vocab_begin, C)), OA(wpe, n(T, C)), OI32(positions, n(B, T)), B, T,
                            C, vocab_begin, vocab_end);
  }
  void embedding_backward(const TensorView& dwte, const TensorView& dwpe, const TensorView& dout,
                          const TensorView& tokens, const TensorView& positions, int B, int T, int C,
                          int vocab_begin, int vocab_end) override {
    cuda::embedding_backward(ctx_, compute_, F(dwte, n(vocab_end - vocab_begin, C)), OF(dwpe, n(T, C)),
                             A(dout, n(B * T, C)), I32(tokens, n(B, T)), OI32(positions, n(B, T)), B, T, C,
                             vocab_begin, vocab_end);
  }
  void layernorm_forward(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                         const TensorView& weight, const TensorView& bias, int N, int C, float eps) override {
    cuda::layernorm_forward(ctx_, compute_, A(out, n(N, C)), F(mean, n(N)), F(rstd, n(N)), A(inp, n(N, C)),
                            A(weight, n(C)), A(bias, n(C)), N, C, eps);
  }
  void layernorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                          const TensorView& dout, const TensorView& inp, const TensorView& weight,
                          const TensorView& mean, const TensorView& rstd, int N, int C) override {
    cuda::layernorm_backward(ctx_, compute_, A(dinp, n(N, C)), F(dweight, n(C)), F(dbias, n(C)), A(dout, n(N, C)),
                             A(inp, n(N, C)), A(weight, n(C)), F(mean, n(N)), F(rstd, n(N)), N, C);
  }
  void rmsnorm_forward(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                       int N, int C, float eps) override {
    cuda::rmsnorm_forward(ctx_, compute_, A(out, n(N, C)), F(rstd, n(N)), A(inp, n(N, C)), A(weight, n(C)), N, C,
                          eps);
  }
  void rmsnorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                        const TensorView& inp, const TensorView& weight, const TensorView& rstd, int N,
                        int C) override {
    cuda::rmsnorm_backward(ctx_, compute_, A(dinp, n(N, C)), F(dweight, n(C)), A(dout, n(N, C)), A(inp, n(N, C)),
                           A(weight, n(C)), F(rstd, n(N)), N, C);
  }
  void matmul_forward(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias,
                      int N, int C, int OC) override {
    cuda::matmul_forward(ctx_, compute_, A(out, n(N, OC)), A(inp, n(N, C)), A(weight, n(OC, C)), OA(bias, n(OC)), N,
                         C, OC);
  }
  // bf16 on Hopper and later: the GELU in the product's epilogue (llm.c does the same for GPT-2,
  // and found it slower on the A100); fp32 keeps the separate kernel, so the fp32 comparison with
  // the CPU stays within 1e-4. A width the epilogue should take but cuBLASLt declines is said once.
  void matmul_gelu_forward(const TensorView& pre, const TensorView& act, const TensorView& inp,
                           const TensorView& weight, const TensorView& bias, int N, int C, int OC) override {
    if (compute_ == DType::kBFloat16 && ctx_.cc_major >= 9) {
      if (cuda::matmul_gelu_forward(ctx_, compute_, A(pre, n(N, OC)), A(act, n(N, OC)), A(inp, n(N, C)),
                                    A(weight, n(OC, C)), OA(bias, n(OC)), N, C, OC))
        return;
      if (OC % 8 == 0 && !gelu_fusion_declined_) {
        gelu_fusion_declined_ = true;
        log::info("matmul_gelu_forward: cuBLASLt declined the GELU epilogue at N=" + std::to_string(N) +
                  " C=" + std::to_string(C) + " OC=" + std::to_string(OC) + "; using the separate GELU kernel");
      }
    }
    Backend::matmul_gelu_forward(pre, act, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                       const TensorView& dout, const TensorView& inp, const TensorView& weight, int N, int C,
                       int OC) override {
    void* dx = OA(dinp, n(N, C));
    float* dw = F(dweight, n(OC, C));
    float* db = OF(dbias, n(OC));
    const void* dy = A(dout, n(N, OC));
    const void* x = A(inp, n(N, C));
    const void* w = A(weight, n(OC, C));
    if (dx) cuda::matmul_backward_input(ctx_, compute_, dx, dy, w, N, C, OC);
    cuda::matmul_backward_weight_rows(ctx_, compute_, dw, dy, x, N, C, OC, 0, OC);
    if (db) cuda::bias_backward(ctx_, compute_, db, dy, N, OC);
  }
  void matmul_backward_input(const TensorView& dinp, const TensorView& dout, const TensorView& weight, int N, int C,
                             int OC) override {
    cuda::matmul_backward_input(ctx_, compute_, A(dinp, n(N, C)), A(dout, n(N, OC)), A(weight, n(OC, C)), N, C, OC);
  }
  void matmul_backward_weight_rows(const TensorView& dweight_rows, const TensorView& dout, const TensorView& inp,
                                   int N, int C, int OC, int row_begin, int row_end) override {
    FEAST_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= OC,
                name() << " matmul_backward_weight_rows: rows [" << row_begin << ", " << row_end << ") of " << OC);
    cuda::matmul_backward_weight_rows(ctx_, compute_, F(dweight_rows, n(row_end - row_begin, C)), A(dout, n(N, OC)),
                                      A(inp, n(N, C)), N, C, OC, row_begin, row_end);
  }
  void grouped_matmul_forward(const TensorView& out, const TensorView& inp, const std::vector<TensorView>& weights,
                              const std::vector<int>& offsets, int C, int OC) override {
    check_groups(weights, offsets, "grouped_matmul_forward");
    const size_t R = size_t(offsets.back());
    if (!cuda::grouped_matmul_forward(ctx_, compute_, A(out, R * size_t(OC)), A(inp, R * size_t(C)),
                                      group_weights(weights, C, OC), offsets, C, OC))
      Backend::grouped_matmul_forward(out, inp, weights, offsets, C, OC);
  }
  void grouped_matmul_backward_input(const TensorView& dinp, const TensorView& dout,
                                     const std::vector<TensorView>& weights, const std::vector<int>& offsets, int C,
                                     int OC) override {
    check_groups(weights, offsets, "grouped_matmul_backward_input");
    const size_t R = size_t(offsets.back());
    if (!cuda::grouped_matmul_backward_input(ctx_, compute_, A(dinp, R * size_t(C)), A(dout, R * size_t(OC)),
                                             group_weights(weights, C, OC), offsets, C, OC))
      Backend::grouped_matmul_backward_input(dinp, dout, weights, offsets, C, OC);
  }
  void lora_forward(const TensorView& out, const TensorView& h, const TensorView& inp, const TensorView& a,
                    const TensorView& b, const LoraShape& s) override {
    s.check(name() + " lora_forward");
    cuda::lora_forward(ctx_, compute_, A(out, n(s.N, s.out_ld)), A(h, n(s.N, s.r)), A(inp, n(s.N, s.C)),
                       A(a, n(s.r, s.C)), A(b, n(s.OC, s.r)), s);
  }
  void lora_backward(const TensorView& dinp, const TensorView& da, const TensorView& db, const TensorView& h,
                     const TensorView& dh, const TensorView& dout, const TensorView& inp, const TensorView& a,
                     const TensorView& b, const LoraShape& s) override {
    s.check(name() + " lora_backward");
    cuda::lora_backward(ctx_, compute_, OA(dinp, n(s.N, s.C)), F(da, n(s.r, s.C)), F(db, n(s.OC, s.r)),
                        A(h, n(s.N, s.r)), A(dh, n(s.N, s.r)), A(dout, n(s.N, s.out_ld)), A(inp, n(s.N, s.C)),
                        A(a, n(s.r, s.C)), A(b, n(s.OC, s.r)), s);
  }
  void dropout_forward(const TensorView& out, const TensorView& inp, const DropoutShape& s) override {
    check_dropout(s, "dropout_forward");
    cuda::dropout_forward(ctx_, compute_, A(out, n(s.N, s.C)), A(inp, n(s.N, s.C)), s);
  }
  void dropout_backward(const TensorView& dinp, const TensorView& dout, const DropoutShape& s) override {
    check_dropout(s, "dropout_backward");
    cuda::dropout_backward(ctx_, compute_, A(dinp, n(s.N, s.C)), A(dout, n(s.N, s.C)), s);
  }
  void dequantize_nf4(const TensorView& out, const Nf4Piece& piece) override {
    piece.check(name() + " dequantize_nf4");
    for (const TensorView* v : {&piece.codes, &piece.scales, &piece.absmax2, &piece.scale_code})
      FEAST_CHECK(!*v || v->device == device_, name() << " dequantize_nf4: an operand is on " << v->device.name());
    cuda::dequantize_nf4(ctx_, compute_, A(out, n(piece.rows, piece.cols)), piece);
  }
  // The forward keeps each query row's log-sum-exp, and the backward its row sum of dO * O,
  // beside it: 2 B NH T floats instead of the CPU's (B, NH, T, T) probabilities.
  size_t attention_state_size(const AttentionShape& s) const override {
    return cuda::attention_state_floats(s.B, s.T, s.n_head);
  }
  size_t attention_workspace_size(const AttentionShape&) const override { return 0; }
  // cuDNN's fused attention where it takes the call (bf16; cudnn_attention()), else our kernels.
  void attention_forward(const TensorView& out, const TensorView& state, const TensorView& qkv,
                         const AttentionShape& s) override {
    check_heads(s);
    void* o = A(out, s.rows() * n(s.out_width()));
    float* st = F(state, attention_state_size(s));
    const void* q = A(qkv, s.rows() * n(s.qkv_width()));
#if defined(FEAST_WITH_CUDNN)
    if (cuda::CudnnAttention* c = cudnn_attention(); c && c->forward_applies(compute_, s)) {
      c->forward(ctx_, o, st, q, s);
      return;
    }
#endif
    cuda::attention_forward(ctx_, compute_, o, st, q, s.B, s.T, s.n_head, s.n_kv_head, s.head_dim,
                            OI32(s.positions, s.rows()));
  }
  void attention_backward(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                          const TensorView& out, const TensorView& state, const TensorView&,
                          const AttentionShape& s) override {
    check_heads(s);
    void* dq = A(dqkv, s.rows() * n(s.qkv_width()));
    const void* dO = A(dout, s.rows() * n(s.out_width()));
    const void* q = A(qkv, s.rows() * n(s.qkv_width()));
    float* st = F(state, attention_state_size(s));
#if defined(FEAST_WITH_CUDNN)
    if (cuda::CudnnAttention* c = cudnn_attention(); c && c->backward_applies(compute_, s)) {
      c->backward(ctx_, dq, dO, q, A(out, s.rows() * n(s.out_width())), st, s);
      return;
    }
#else
    (void)out;
#endif
    cuda::attention_backward(ctx_, compute_, dq, dO, q, st, s.B, s.T, s.n_head, s.n_kv_head, s.head_dim,
                             OI32(s.positions, s.rows()));
  }
  size_t ring_attention_workspace_size(const AttentionShape& s) const override {
    return s.head_rows();  // the backward's D = rowsum(dO * O), one per row and query head
  }
  void ring_attention_pack(const TensorView& kv, const TensorView& qkv, const AttentionShape& s) override {
    cuda::ring_attention_pack(ctx_, compute_, A(kv, s.rows() * n(s.kv_width())),
                              A(qkv, s.rows() * n(s.qkv_width())), s.rows(), s.n_head, s.n_kv_head, s.head_dim);
  }
  void ring_attention_forward(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                              const TensorView& kv, const TensorView& /*workspace*/, const RingBlock& b,
                              bool first) override {
    const AttentionShape& s = b.shape;
    cuda::ring_attention_forward(ctx_, compute_, F(out, s.rows() * n(s.out_width())),
                                 F(lse, s.head_rows()), A(qkv, s.rows() * n(s.qkv_width())),
                                 A(kv, s.rows() * n(s.kv_width())), ring_call(b), first);
  }
  void ring_attention_backward(const TensorView& dq, const TensorView& dkv, const TensorView& dout,
                               const TensorView& out, const TensorView& lse, const TensorView& qkv,
                               const TensorView& kv, const TensorView& workspace, const RingBlock& b) override {
    const AttentionShape& s = b.shape;
    const size_t kv_elems = s.rows() * n(s.kv_width()), rows_out = s.rows() * n(s.out_width());
    cuda::ring_attention_backward(ctx_, compute_, F(dq, rows_out), F(dkv, kv_elems),
                                  F(workspace, ring_attention_workspace_size(s)), A(dout, rows_out), A(out, rows_out),
                                  F(lse, s.head_rows()), A(qkv, s.rows() * n(s.qkv_width())),
                                  A(kv, kv_elems), ring_call(b));
  }
  void ring_attention_unpack(const TensorView& dqkv, const TensorView& dq, const TensorView& dkv,
                             const AttentionShape& s) override {
    cuda::ring_attention_unpack(ctx_, compute_, A(dqkv, s.rows() * n(s.qkv_width())),
                                F(dq, s.rows() * n(s.out_width())), F(dkv, s.rows() * n(s.kv_width())),
                                s.rows(), s.n_head, s.n_kv_head, s.head_dim);
  }
  void rope_forward(const TensorView& qkv, const TensorView& cos, const TensorView& sin,
                    const AttentionShape& s) override {
    FEAST_CHECK(s.head_dim % 2 == 0, name() << " rope: head size " << s.head_dim << " is odd");
    cuda::rope_forward(ctx_, compute_, A(qkv, s.rows() * n(s.qkv_width())), F(cos, n(s.T, s.head_dim / 2)),
                       F(sin, n(s.T, s.head_dim / 2)), OI32(s.positions, s.rows()), s.B, s.T, s.n_head, s.n_kv_head,
                       s.head_dim);
  }
  void rope_backward(const TensorView& dqkv, const TensorView& cos, const TensorView& sin,
                     const AttentionShape& s) override {
    FEAST_CHECK(s.head_dim % 2 == 0, name() << " rope: head size " << s.head_dim << " is odd");
    cuda::rope_backward(ctx_, compute_, A(dqkv, s.rows() * n(s.qkv_width())), F(cos, n(s.T, s.head_dim / 2)),
                        F(sin, n(s.T, s.head_dim / 2)), OI32(s.positions, s.rows()), s.B, s.T, s.n_head,
                        s.n_kv_head, s.head_dim);
  }
  void gelu_forward(const TensorView& out, const TensorView& inp, size_t count) override {
    cuda::gelu_forward(ctx_, compute_, A(out, count), A(inp, count), count);
  }
  void gelu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, size_t count) override {
    cuda::gelu_backward(ctx_, compute_, A(dinp, count), A(inp, count), A(dout, count), count);
  }
  // The tables of rows routed to experts (model/layers/moe.h) are as long as the views hold: the
  // layer sizes them for the most rows a micro-batch can route.
  void moe_route(const TensorView& probs, const TensorView& lse, const TensorView& expert, const TensorView& weight,
                 const TensorView& prob_sum, const TensorView& logits, int N, int E, int k,
                 bool renormalize) override {
    FEAST_CHECK(k >= 1 && k <= E, "moe_route: top " << k << " of " << E << " experts");
    cuda::moe_route(ctx_, compute_, F(probs, n(N, E)), F(lse, n(N)),
                    static_cast<int32_t*>(operand(expert, DType::kInt32, n(N, k), false, __func__, "expert")),
                    F(weight, n(N, k)), F(prob_sum, n(E)), A(logits, n(N, E)), N, E, k, renormalize);
  }
  void moe_route_backward(const TensorView& dlogits, const TensorView& probs, const TensorView& lse,
                          const TensorView& expert, const TensorView& weight, const TensorView& dweight,
                          const TensorView& dprob, float z_scale, int N, int E, int k, bool renormalize) override {
    cuda::moe_route_backward(ctx_, compute_, A(dlogits, n(N, E)), F(probs, n(N, E)), F(lse, n(N)),
                             I32(expert, n(N, k)), F(weight, n(N, k)), F(dweight, n(N, k)), F(dprob, n(E)), z_scale,
                             N, E, k, renormalize);
  }
  void moe_gather(const TensorView& rows, const TensorView& inp, const TensorView& token, int M, int C) override {
    cuda::moe_gather(ctx_, compute_, A(rows, n(M, C)), A(inp, inp.numel), I32(token, n(M)), M, C);
  }
  void moe_gather_backward(const TensorView& dinp, const TensorView& drows, const TensorView& slot, int N, int k,
                           int C) override {
    cuda::moe_gather_backward(ctx_, compute_, A(dinp, n(N, C)), A(drows, drows.numel), I32(slot, n(N, k)), N, k, C);
  }
  void moe_combine(const TensorView& out, const TensorView& rows, const TensorView& slot, const TensorView& weight,
                   int N, int k, int C) override {
    cuda::moe_combine(ctx_, compute_, A(out, n(N, C)), A(rows, rows.numel), I32(slot, n(N, k)), F(weight, n(N, k)),
                      N, k, C);
  }
  void moe_combine_backward(const TensorView& drows, const TensorView& dweight, const TensorView& dout,
                            const TensorView& rows, const TensorView& slot, const TensorView& weight, int N, int k,
                            int C) override {
    cuda::moe_combine_backward(ctx_, compute_, A(drows, drows.numel), F(dweight, n(N, k)), A(dout, n(N, C)),
                               A(rows, rows.numel), I32(slot, n(N, k)), F(weight, n(N, k)), N, k, C);
  }
  void moe_shared_gate(const TensorView& gate, const TensorView& logits, int N) override {
    cuda::moe_shared_gate(ctx_, compute_, F(gate, n(N)), A(logits, n(N)), N);
  }
  void moe_shared_gate_backward(const TensorView& dlogits, const TensorView& gate, const TensorView& dgate,
                                int N) override {
    cuda::moe_shared_gate_backward(ctx_, compute_, A(dlogits, n(N)), F(gate, n(N)), F(dgate, n(N)), N);
  }
  void swiglu_forward(const TensorView& out, const TensorView& inp, int N, int I) override {
    cuda::swiglu_forward(ctx_, compute_, A(out, n(N, I)), A(inp, n(N, 2 * I)), N, I);
  }
  void swiglu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, int N, int I) override {
    cuda::swiglu_backward(ctx_, compute_, A(dinp, n(N, 2 * I)), A(inp, n(N, 2 * I)), A(dout, n(N, I)), N, I);
  }
  // The residual stream adds in the compute dtype; ZeRO 2 and the parameter server add float32
  // gradient buffers.
  void add(const TensorView& out, const TensorView& a, const TensorView& b, size_t count) override {
    const DType dt = out.dtype == DType::kFloat32 ? DType::kFloat32 : compute_;
    cuda::add(ctx_, dt, operand(out, dt, count, false, "add", "out"), operand(a, dt, count, false, "add", "a"),
              operand(b, dt, count, false, "add", "b"), count);
  }
  void cross_entropy_row_max(const TensorView& row_max, const TensorView& logits, int N, int Vl, int vocab_begin,
                             int V) override {
    cuda::cross_entropy_row_max(ctx_, compute_, F(row_max, n(N)), A(logits, n(N, Vl)), N, Vl, vocab_begin, V);
  }
  void cross_entropy_partials(const TensorView& sum_exp, const TensorView& target_logit, const TensorView& logits,
                              const TensorView& row_max, const TensorView& targets, int N, int Vl, int vocab_begin,
                              int V, bool keep_exp) override {
    cuda::cross_entropy_partials(ctx_, compute_, F(sum_exp, n(N)), F(target_logit, n(N)), A(logits, n(N, Vl)),
                                 F(row_max, n(N)), I32(targets, n(N)), N, Vl, vocab_begin, V, keep_exp);
  }
  void cross_entropy_finish(const TensorView& logits, const TensorView& losses, const TensorView& row_max,
                            const TensorView& sum_exp, const TensorView& target_logit, const TensorView& targets,
                            int N, int Vl, int vocab_begin, int V, float dloss) override {
    cuda::cross_entropy_finish(ctx_, compute_, A(logits, n(N, Vl)), F(losses, n(N)), F(row_max, n(N)),
                               F(sum_exp, n(N)), F(target_logit, n(N)), I32(targets, n(N)), N, Vl, vocab_begin, V,
                               dloss);
  }
  double sum(const TensorView& x) override { return cuda::sum(ctx_, F(x, x.numel), x.numel); }
  void adamw_step(const TensorView& params, const TensorView& m, const TensorView& v, const TensorView& grads,
                  const AdamWStep& step, float grad_scale) override {
    const size_t count = params.numel;
    cuda::adamw_step(ctx_, F(params, count), F(m, count), F(v, count), F(grads, count), count, step, grad_scale);
  }
  double sum_of_squares(const TensorView& x) override { return cuda::sum_of_squares(ctx_, F(x, x.numel), x.numel); }
  std::vector<double> sums_of_squares(const std::vector<TensorView>& parts) override {
    std::vector<const float*> data;
    std::vector<size_t> counts;
    for (const TensorView& p : parts) {
      data.push_back(F(p, p.numel));
      counts.push_back(p.numel);
    }
    return cuda::sums_of_squares(ctx_, data, counts);
  }
  void cast(const TensorView& dst, const TensorView& src) override {
    FEAST_CHECK(dst.numel == src.numel, name() << " cast: " << src.numel << " elements into " << dst.numel);
    check_place(dst, "cast", "dst", false);
    check_place(src, "cast", "src", false);
    if (dst.data == src.data && dst.dtype == src.dtype) return;
    cuda::cast(ctx_, dst.dtype, dst.data, src.dtype, src.data, src.numel);
  }

  // The scratch buffer only grows, so its size now is its peak; added to the allocator's, an
  // upper bound of what was held at once.
  size_t peak_memory_bytes() const override { return allocator_.peak_bytes_in_use() + scratch_.bytes(); }

 private:
  // A copy's operands, checked; false when there is nothing to copy.
  bool check_copy(const TensorView& dst, const TensorView& src, const char* op) const {
    FEAST_CHECK(dst.dtype == src.dtype && dst.numel == src.numel,
                name() << " " << op << ": " << src.numel << " " << dtype_name(src.dtype) << " into " << dst.numel
                       << " " << dtype_name(dst.dtype));
    check_place(dst, op, "dst", true);
    check_place(src, op, "src", true);
    return dst.numel > 0 && dst.data != src.data;
  }
  // The view's memory is where this backend can use it: its GPU, or host memory when allowed.
  // An empty view touches no memory, wherever it claims to be (an unallocated Tensor says cpu).
  void check_place(const TensorView& v, const char* op, const char* operand, bool host_ok) const {
    FEAST_CHECK(v.numel == 0 || v.device == device_ || (host_ok && v.device.is_cpu()),
                name() << " " << op << ": operand " << operand << " is on " << v.device.name());
  }
  // The operand `name` of `op` after checking it: nullptr for an empty optional operand.
  void* operand(const TensorView& v, DType dtype, size_t need, bool optional, const char* op, const char* name) const {
    if (!v) {
      FEAST_CHECK(optional, this->name() << " " << op << ": operand " << name << " is missing");
      return nullptr;
    }
    check_place(v, op, name, false);
    FEAST_CHECK(v.dtype == dtype, this->name() << " " << op << ": operand " << name << " is " << dtype_name(v.dtype)
                                               << ", expected " << dtype_name(dtype));
    FEAST_CHECK(v.numel >= need, this->name() << " " << op << ": operand " << name << " holds " << v.numel
                                              << " elements, the op needs " << need);
    return v.data;
  }
  // A grouped product's weights, each checked as an (OC, C) operand.
  std::vector<const void*> group_weights(const std::vector<TensorView>& weights, int C, int OC) const {
    std::vector<const void*> out;
    for (const TensorView& w : weights) out.push_back(operand(w, compute_, n(OC, C), false, "grouped_matmul", "weights"));
    return out;
  }
  void check_heads(const AttentionShape& s) const {
    FEAST_CHECK(s.n_kv_head > 0 && s.n_head % s.n_kv_head == 0,
                "attention: " << s.n_head << " query heads do not share " << s.n_kv_head << " key/value heads evenly");
    FEAST_CHECK(s.head_dim > 0 && s.head_dim <= 256,
                name() << " attention: head size " << s.head_dim << " is above the kernels' 256");
  }

  Device device_;
  DType compute_;
  CudaAllocator allocator_;
  PinnedHostAllocator pinned_;  // offloaded optimizer state
  CudaStream stream_;
  DeviceScratch scratch_;
  HostUploads uploads_;
  ReservedDeviceAllocator reserved_;  // ZeRO 3's parameters (after the stream its unmaps wait for)
  CudaContext ctx_;
  bool gelu_fusion_declined_ = false;
  std::string attention_choice_;  // FEAST_CUDA_ATTENTION as read at start (attention_choice())
  // FEAST_CUDA_ATTENTION: "" (cuDNN where it takes the call), "cudnn" (cuDNN or an error) or
  // "own" (feast's kernels); anything else is an error naming the variable.
  static std::string attention_choice() {
    const char* v = std::getenv("FEAST_CUDA_ATTENTION");
    const std::string choice = v ? v : "";
    FEAST_CHECK(choice.empty() || choice == "cudnn" || choice == "own",
                "FEAST_CUDA_ATTENTION=" << choice << ": expected cudnn or own (or unset)");
#if !defined(FEAST_WITH_CUDNN)
    FEAST_CHECK(choice != "cudnn", "FEAST_CUDA_ATTENTION=cudnn: this build has no cuDNN attention (CMake did not "
                                   "find cuDNN 9; see docs/gpu.md)");
#endif
    return choice;
  }
#if defined(FEAST_WITH_CUDNN)
  // cuDNN's fused attention, made on first use; null when cuDNN cannot be initialised or
  // FEAST_CUDA_ATTENTION=own asks for our kernels (=cudnn: cuDNN or an error, no fallback).
  cuda::CudnnAttention* cudnn_attention() {
    if (!cudnn_tried_) {
      cudnn_tried_ = true;
      const std::string& choice = attention_choice_;
      if (choice == "own") return nullptr;
      try {
        cudnn_ = std::make_unique<cuda::CudnnAttention>(choice == "cudnn");
        log::info("attention: cuDNN's fused attention for bf16 (FEAST_CUDA_ATTENTION=own: feast's kernels)");
      } catch (const Error& e) {
        if (choice == "cudnn") throw Error(std::string("FEAST_CUDA_ATTENTION=cudnn: ") + e.what());
        log::info(std::string("attention: ") + e.what() + "; using feast's own kernels");
      }
    }
    return cudnn_.get();
  }
  std::unique_ptr<cuda::CudnnAttention> cudnn_;
  bool cudnn_tried_ = false;
#endif
};

#undef A
#undef OA
#undef F
#undef OF
#undef I32

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device_index, DType compute) {
  return std::make_unique<cuda::CudaBackend>(device_index, compute);
}

}  // namespace feast
