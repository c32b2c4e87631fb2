// Matrix products through cuBLASLt, fp32 accumulation. Weights are (OC, C) row-major like
// torch.nn.Linear; cuBLAS is column-major, so a row-major (R, K) matrix is its (K, R) transpose
// and every product below is written for the transposes (llm.c's matmul_cublaslt does the same).
// The forward fuses the bias into the epilogue. bf16 operands use the tensor cores; float32
// products run in true fp32 (no TF32), so the fp32 comparison with the CPU holds to 1e-4. Where
// cuBLASLt has no kernel for a product's alignments, cublasGemmEx computes it. GPT-2's MLP input
// product fuses its GELU too (matmul_gelu_forward).
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/log.h"

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/norm_common.cuh"

namespace feast::cuda {
namespace {

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: throw Error(std::string("cuda matmul: no product for ") + dtype_name(dt));
  }
}

// Owns the descriptors of one cublasLtMatmul call.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~LtCall() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// The largest power of two up to 256 that divides p's address. cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and may then pick a kernel that faults on a
// slice of a larger buffer (a chunk of the head's weight gradient, a bias inside the flat
// parameter buffer); PyTorch met this (pytorch#92201).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// out (N rows of OC) = bias broadcast over the rows: the forward's bias where the epilogue cannot
// take it (a bias less than 16-byte aligned), before a product that adds onto it.
template <typename T>
__global__ void fill_rows_with_bias(T* out, const T* bias, size_t total, int OC) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    out[i] = bias[i % size_t(OC)];
}

// D (m rows, n columns, column-major, ld m) = bias (m) broadcast over the columns.
void fill_with_bias(const CudaContext& ctx, cudaDataType_t type, void* D, const void* bias, int m, int n) {
  const size_t total = size_t(m) * size_t(n);
  const unsigned blocks = unsigned(std::min<size_t>(blocks_for(total, 256), size_t(ctx.sm_count) * 16));
  if (type == CUDA_R_32F) {
    fill_rows_with_bias<float><<<blocks, 256, 0, ctx.stream>>>(static_cast<float*>(D), static_cast<const float*>(bias), total, m);
  } else {
    fill_rows_with_bias<__nv_bfloat16><<<blocks, 256, 0, ctx.stream>>>(
        static_cast<__nv_bfloat16*>(D), static_cast<const __nv_bfloat16*>(bias), total, m);
  }
  FEAST_CUDA_LAUNCH_CHECK(fill_rows_with_bias);
}

// D (m, n, column-major, ld ldd) = alpha op(A) op(B) + beta D [+ bias (m) broadcast over columns].
// A is (m, k) after op, stored (transa ? k x m : m x k) with leading dimension lda; likewise B.
// ab_type is the operands' type, d_type the result's (float32 for weight gradients). A bias needs
// ldd == m.
// With gelu_aux: D = gelu(op(A) op(B) + bias) and gelu_aux (ld m) = the value before the GELU
// (cuBLASLt's GELU_AUX epilogue); returns false, having done nothing, where cuBLASLt has no
// kernel for that. Otherwise always true.
bool lt_matmul(const CudaContext& ctx, bool transa, bool transb, int m, int n, int k, const void* A, int lda,
               const void* B, int ldb, void* D, int ldd, float beta, cudaDataType_t ab_type, cudaDataType_t d_type,
               const void* bias = nullptr, void* gelu_aux = nullptr) {
  if (m == 0 || n == 0) return true;
  if (gelu_aux && k == 0) return false;
  FEAST_CHECK(bias == nullptr || ldd == m, "a product with a bias must write whole columns");
  if (k == 0) {  // an empty sum: D = beta D (beta is 0 or 1 here), or the bias alone
    if (bias) fill_with_bias(ctx, d_type, D, bias, m, n);
    else if (beta == 0.0f) FEAST_CUDA_CHECK(cudaMemsetAsync(D, 0, size_t(ldd) * size_t(n) * (d_type == CUDA_R_32F ? 4 : 2), ctx.stream));
    return true;
  }
  // CUBLAS_COMPUTE_32F: fp32 accumulation; fp32 operands are not rounded to TF32.
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  LtCall call;
  FEAST_CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.desc, compute, CUDA_R_32F));
  const cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  FEAST_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  FEAST_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (bias || gelu_aux) {
    const cublasLtEpilogue_t epilogue = !gelu_aux ? CUBLASLT_EPILOGUE_BIAS
                                        : bias    ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                  : CUBLASLT_EPILOGUE_GELU_AUX;
    FEAST_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  }
  if (bias) {
    FEAST_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    FEAST_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &d_type, sizeof d_type));
  }
  if (gelu_aux) {
    const int64_t aux_ld = m;
    FEAST_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu_aux,
                                                      sizeof gelu_aux));
    FEAST_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  FEAST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.a, ab_type, transa ? k : m, transa ? m : k, lda));
  FEAST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.b, ab_type, transb ? n : k, transb ? k : n, ldb));
  FEAST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.c, d_type, m, n, ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  FEAST_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kLtWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;  // stays 0 when the heuristic has nothing for this configuration
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const uint32_t align[] = {alignment_of(A), alignment_of(B), alignment_of(D), alignment_of(D)};
  const cublasLtMatmulPreferenceAttributes_t align_attr[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]);
  const cublasStatus_t hs =
      st == CUBLAS_STATUS_SUCCESS
          ? cublasLtMatmulAlgoGetHeuristic(ctx.lt, call.desc, call.a, call.b, call.c, call.c, pref, 1, &heuristic, &found)
          : CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreferenceDestroy(pref);
  FEAST_CUBLAS_CHECK(st);  // the preferences themselves: a failure there is no refusal of the product
  // A refusal of the product means no kernel, as found == 0 does. Not supported is the usual
  // answer; some versions answer a shape or epilogue they lack (odd leading dimensions with a
  // bias, say) with an invalid value instead. Either way the GELU is composed by the caller, and
  // any other product goes to plain cuBLAS below.
  if (hs != CUBLAS_STATUS_SUCCESS) {
    if (gelu_aux) return false;
    found = 0;
    if (hs != CUBLAS_STATUS_NOT_SUPPORTED) {
      static std::once_flag said;
      std::call_once(said, [&] {
        log::info("cuBLASLt's heuristic refused a product (" + cublas_status_text(hs) + ", m " + std::to_string(m) +
                  " n " + std::to_string(n) + " k " + std::to_string(k) +
                  "); such products use cublasGemmEx (said once)");
      });
    }
  }
  const float alpha = 1.0f;
  if (found == 0 && gelu_aux) return false;  // plain cuBLAS has no GELU: the caller composes
  if (found == 0) {
    // cuBLASLt has no kernel for these alignments or leading dimensions (a column slice of a
    // bf16 gradient starting 2 bytes into a row, say): plain cuBLAS takes any, slower. The bias
    // is seeded first and the product added onto it.
    if (bias) {
      fill_with_bias(ctx, d_type, D, bias, m, n);
      beta = 1.0f;
    }
    FEAST_CUBLAS_CHECK(cublasGemmEx(ctx.blas, opa, opb, m, n, k, &alpha, A, ab_type, lda, B, ab_type, ldb, &beta, D,
                                    d_type, ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return true;
  }
  FEAST_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, call.desc, &alpha, A, call.a, B, call.b, &beta, D, call.c, D, call.c,
                                    &heuristic.algo, ctx.lt_workspace, ws, ctx.stream));
  return true;
}

// dbias[o] += the sum over rows of dout[r][o], in two deterministic passes: blocks of 256
// columns by kBiasRowChunk rows write partial sums, then one thread per column adds its partials
// in order. (One pass with a thread per column would leave most of the GPU idle.)
constexpr int kBiasRowChunk = 256;

template <typename T>
__global__ void bias_partials_kernel(float* partials, const T* dout, int N, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  const int r0 = blockIdx.y * kBiasRowChunk, r1 = min(N, r0 + kBiasRowChunk);
  float acc = 0.0f;
  for (int r = r0; r < r1; ++r) acc += to_float(dout[size_t(r) * OC + o]);
  partials[size_t(blockIdx.y) * OC + o] = acc;
}

}  // namespace

void matmul_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, const void* weight,
                    const void* bias, int N, int C, int OC) {
  // out^T (OC, N) = W (OC, C) . inp^T (C, N): W's buffer is (C, OC) column-major, transposed.
  const cudaDataType_t t = cuda_type(dt);
  if (bias && alignment_of(bias) < 16 && N > 0 && OC > 0 && C > 0) {
    // The epilogue may read the bias in 16-byte vectors: seed the rows with it, then add.
    fill_with_bias(ctx, t, out, bias, OC, N);
    lt_matmul(ctx, true, false, OC, N, C, weight, C, inp, C, out, OC, 1.0f, t, t);
    return;
  }
  lt_matmul(ctx, true, false, OC, N, C, weight, C, inp, C, out, OC, 0.0f, t, t, bias);
}

bool matmul_gelu_forward(const CudaContext& ctx, DType dt, void* pre, void* act, const void* inp, const void* weight,
                         const void* bias, int N, int C, int OC) {
  // act^T (OC, N) = gelu(W . inp^T + bias), pre^T the same before the GELU; cuBLASLt's GELU is
  // the tanh form, GPT-2's. The epilogue wants its auxiliary output and bias 16-byte aligned and
  // the auxiliary's rows a multiple of 8.
  if (OC % 8 != 0 || alignment_of(pre) < 16 || alignment_of(act) < 16 || (bias && alignment_of(bias) < 16))
    return false;
  const cudaDataType_t t = cuda_type(dt);
  return lt_matmul(ctx, true, false, OC, N, C, weight, C, inp, C, act, OC, 0.0f, t, t, bias, pre);
}

void matmul_backward_input(const CudaContext& ctx, DType dt, void* dinp, const void* dout, const void* weight, int N,
                           int C, int OC) {
  // dinp^T (C, N) = W^T (C, OC) . dout^T (OC, N).
  const cudaDataType_t t = cuda_type(dt);
  lt_matmul(ctx, false, false, C, N, OC, weight, C, dout, OC, dinp, C, 0.0f, t, t);
}

void matmul_backward_weight_rows(const CudaContext& ctx, DType dt, float* dweight_rows, const void* dout,
                                 const void* inp, int N, int C, int OC, int row_begin, int row_end) {
  // dW^T (C, rows) += inp^T (C, N) . dout[:, rows] (N, rows): the rows of dout's columns start
  // row_begin elements into each row of OC.
  const cudaDataType_t t = cuda_type(dt);
  const size_t element = dtype_size(dt);
  const void* dout_cols = static_cast<const char*>(dout) + size_t(row_begin) * element;
  lt_matmul(ctx, false, true, C, row_end - row_begin, N, inp, C, dout_cols, OC, dweight_rows, C, 1.0f, t, CUDA_R_32F);
}

void bias_backward(const CudaContext& ctx, DType dt, float* dbias, const void* dout, int N, int OC) {
  if (OC == 0 || N == 0) return;
  // Row chunks go in gridDim.y (at most 65535): 16M rows, far beyond any micro-batch.
  const int chunks = (N + kBiasRowChunk - 1) / kBiasRowChunk;
  FEAST_CHECK(chunks <= 65535, "bias gradient over " << N << " rows: too many row chunks");
  float* partials = ctx.scratch->get_as<float>(size_t(chunks) * size_t(OC));
  constexpr unsigned threads = 256;
  dispatch_compute(dt, "bias_backward", [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(blocks_for(OC, threads), unsigned(chunks));
    bias_partials_kernel<T><<<grid, threads, 0, ctx.stream>>>(partials, static_cast<const T*>(dout), N, OC);
    FEAST_CUDA_LAUNCH_CHECK(bias_partials_kernel);
  });
  add_column_partials(ctx, dbias, partials, chunks, OC);
}

}  // namespace feast::cuda
