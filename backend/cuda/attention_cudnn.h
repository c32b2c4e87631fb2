// Causal grouped-query attention through cuDNN's fused flash attention (its graph API, by way of
// NVIDIA's header-only cudnn-frontend, third_party/cudnn_frontend): tensor cores for q k^T and
// p v, the log-sum-exp kept for the backward, as llm.c and PyTorch do. cuDNN takes bf16 with a
// head size that is a multiple of 8; other calls, and any shape cuDNN declines, use our own
// kernels (attention.cu). Both keep the same log-sum-exp (natural log, scale inside), so either
// backward follows either forward. Built with FEAST_WITH_CUDNN only.
#pragma once

#include <memory>

#include "core/dtype.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"

namespace feast::cuda {

class CudnnAttention {
 public:
  // Throws feast::Error when cuDNN cannot be initialised (its libraries missing or too old).
  // strict: a shape cuDNN declines throws instead of falling back (FEAST_CUDA_ATTENTION=cudnn,
  // which the GPU check uses to prove cuDNN ran), but for the backward at T = 1, which cuDNN
  // never takes.
  explicit CudnnAttention(bool strict = false);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Whether cuDNN runs this shape (each shape is asked of cuDNN once and remembered); false for
  // anything but bf16 and head sizes that are multiples of 8 up to 256, and for a shape whose
  // workspace would exceed 2 GiB.
  bool forward_applies(DType dt, const AttentionShape& a);
  bool backward_applies(DType dt, const AttentionShape& a);

  // out (B T, NH hs) and lse (B NH T, float32) from qkv (B T, (NH + 2 NKV) hs), bf16.
  void forward(const CudaContext& ctx, void* out, float* lse, const void* qkv, const AttentionShape& a);
  // dqkv from dout, qkv, the forward's out and lse.
  void backward(const CudaContext& ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                const float* lse, const AttentionShape& a);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace feast::cuda
