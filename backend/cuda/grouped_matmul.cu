// A mixture of experts' grouped products: each expert's weight times its own rows, every expert
// in one cublasGemmGroupedBatchedEx call rather than a cuBLASLt call each (the call count, not
// the arithmetic, is what many small experts cost). Row counts differ between experts, so each
// expert is a group of one problem; the problems' pointers go to the device through the
// backend's pinned uploads (queued like kernels) into the scratch buffer. Written for the
// transposes, as matmul.cu is: a row-major (R, K) matrix is cuBLAS's column-major (K, R).
// Where cuBLAS has no grouped kernel for the types, the launchers say so and the backend runs the
// groups one by one (Backend's composition of the plain products).
#include <cublas_v2.h>

#include <atomic>
#include <string>

#include "core/log.h"

#include "backend/cuda/cublas_check.h"
#include "backend/cuda/host_uploads.h"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

// Group g (rows [offsets[g], offsets[g + 1]), skipped when empty):
// D_g (m, n_g) = op(A_g) (m, k) . B_g (k, n_g), op(A) = A^T when transa, column-major, where
// A_g = weights[g] (leading dimension lda), B_g the group's rows of `b` (ld ldb) and D_g its rows
// of `d` (ld ldd), n_g the group's rows.
struct Groups {
  bool transa = false;
  int m = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
};

// Set once cuBLAS has declined the grouped call for a dtype (float32, bfloat16): from then on the
// groups go one by one without asking again.
std::atomic<bool> declined[2];

// false, having launched nothing, where cuBLAS has no grouped kernel for the types (or is older
// than 12.5, which brought the call).
bool grouped_gemm(const CudaContext& ctx, DType dt, const Groups& g, const std::vector<const void*>& weights,
                  const std::vector<int>& offsets, const void* b, void* d) {
#if CUBLAS_VERSION < 120500
  static_cast<void>(ctx), static_cast<void>(dt), static_cast<void>(g), static_cast<void>(weights);
  static_cast<void>(offsets), static_cast<void>(b), static_cast<void>(d);
  return false;
#else
  std::atomic<bool>& no = declined[dt == DType::kBFloat16 ? 1 : 0];
  if (no) return false;
  const size_t element = dtype_size(dt);
  std::vector<int> n;
  std::vector<const void*> pointers;  // the A pointers, then the B ones, then the D ones
  std::vector<const void*> bs, ds;
  for (size_t e = 0; e < weights.size(); ++e) {
    const size_t r0 = size_t(offsets[e]);
    if (offsets[e + 1] == offsets[e]) continue;  // no rows: no problem
    n.push_back(offsets[e + 1] - offsets[e]);
    pointers.push_back(weights[e]);
    bs.push_back(static_cast<const char*>(b) + r0 * size_t(g.ldb) * element);
    ds.push_back(static_cast<char*>(d) + r0 * size_t(g.ldd) * element);
  }
  const int groups = int(n.size());
  if (groups == 0) return true;
  pointers.insert(pointers.end(), bs.begin(), bs.end());
  pointers.insert(pointers.end(), ds.begin(), ds.end());
  const size_t bytes = pointers.size() * sizeof(void*);
  void** device = static_cast<void**>(ctx.scratch->get(bytes));
  if (!ctx.uploads || !ctx.uploads->upload(device, pointers.data(), bytes))
    FEAST_CUDA_CHECK(cudaMemcpyAsync(device, pointers.data(), bytes, cudaMemcpyHostToDevice, ctx.stream));

  const cudaDataType_t type = dt == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const std::vector<cublasOperation_t> transa(size_t(groups), g.transa ? CUBLAS_OP_T : CUBLAS_OP_N);
  const std::vector<cublasOperation_t> transb(size_t(groups), CUBLAS_OP_N);
  const std::vector<int> m(size_t(groups), g.m), k(size_t(groups), g.k), lda(size_t(groups), g.lda),
      ldb(size_t(groups), g.ldb), ldd(size_t(groups), g.ldd), size(size_t(groups), 1);
  const std::vector<float> alpha(size_t(groups), 1.0f), beta(size_t(groups), 0.0f);
  const cublasStatus_t status = cublasGemmGroupedBatchedEx(
      ctx.blas, transa.data(), transb.data(), m.data(), n.data(), k.data(), alpha.data(), device, type, lda.data(),
      device + groups, type, ldb.data(), beta.data(), device + 2 * groups, type, ldd.data(), groups, size.data(),
      CUBLAS_COMPUTE_32F);
  // No kernel for these types or this GPU: said once, and the groups go one by one from now on.
  // (Nothing was launched; the pointers uploaded are simply not read.)
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) {
    if (!no.exchange(true))
      log::info("cuBLAS declined the grouped GEMM for " + std::string(dtype_name(dt)) + " (" +
                cublas_status_text(status) + "); the experts' products run one call each");
    return false;
  }
  FEAST_CUBLAS_CHECK(status);
  return true;
#endif
}

}  // namespace

bool grouped_matmul_forward(const CudaContext& ctx, DType dt, void* out, const void* inp,
                            const std::vector<const void*>& weights, const std::vector<int>& offsets, int C, int OC) {
  // out_g^T (OC, n_g) = W_g^T (OC, C) . inp_g^T (C, n_g): W's buffer is (C, OC) column-major.
  return grouped_gemm(ctx, dt, {true, OC, C, C, C, OC}, weights, offsets, inp, out);
}

bool grouped_matmul_backward_input(const CudaContext& ctx, DType dt, void* dinp, const void* dout,
                                   const std::vector<const void*>& weights, const std::vector<int>& offsets, int C,
                                   int OC) {
  // dinp_g^T (C, n_g) = W_g (C, OC column-major) . dout_g^T (OC, n_g).
  return grouped_gemm(ctx, dt, {false, C, OC, C, OC, C}, weights, offsets, dout, dinp);
}

}  // namespace feast::cuda
