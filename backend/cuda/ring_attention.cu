// Ring attention's block kernels (context parallelism; backend/backend.h, CPU reference
// backend/cpu/ring_attention.cpp): the queries of this rank's two sequence chunks against one
// rank's key/value chunks. A warp owns a row (a query row, or a key row in the dk/dv kernel) and
// streams over the rows of the other side it pairs with (a prefix of each half: the keys a
// query sees, or the queries that see a key, a suffix) from global memory, the head dimension
// split over its lanes (d = lane + 32 r); dot products are warp sums. Simple rather than tiled
// (tiling K and V through shared memory, as attention.cu does, is the next step once a GPU has
// timed them): a block is 1/cp of the sequence against 1/cp, and the ring's transfer runs beside it.
//
// The forward keeps an online softmax per row and merges the block into the float32 running
// output and log-sum-exp. The backward is deterministic (no atomics): the dq kernel computes
// D = rowsum(dO * O) (into the workspace) and dq per query row; the dk/dv kernel, enqueued after
// it on the same stream, sums per key row over the group's query heads and the queries that see it.
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr int kWarps = 8;  // rows per block, a warp each
constexpr int kMaxHeadDim = 256;
constexpr int kChunks = kMaxHeadDim / 32;

struct RingShape {
  int B, T, NH, NKV, hs, group, W, KW, C, c;
  int q0, q1, k0, k1;  // global chunk indices of the query and key/value halves
  float scale;
};

// A query of chunk qc sees every key of an earlier chunk and the keys up to itself in its own.
// The key rows local query row i sees in key half h (rows [h c, h c + count)): a prefix of it.
__device__ __forceinline__ int keys_seen(const RingShape& s, int i, int h) {
  const int qc = i < s.c ? s.q0 : s.q1, kc = h == 0 ? s.k0 : s.k1;
  return kc < qc ? s.c : kc == qc ? i % s.c + 1 : 0;
}
// The query rows that see local key row j in query half h: [h c + first, h c + c), or none
// (first = c).
__device__ __forceinline__ int first_query_seeing(const RingShape& s, int j, int h) {
  const int kc = j < s.c ? s.k0 : s.k1, qc = h == 0 ? s.q0 : s.q1;
  return qc > kc ? 0 : qc == kc ? j % s.c : s.c;
}

template <typename T>
__device__ __forceinline__ float lane_dot(const float (&x)[kChunks], const T* row, int hs) {
  const int lane = threadIdx.x % 32;
  float sum = 0.0f;
#pragma unroll
  for (int r = 0; r < kChunks; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) sum += x[r] * to_float(row[d]);
  }
  return warp_sum(sum);
}

template <typename T>
__device__ __forceinline__ void lane_load(float (&x)[kChunks], const T* row, int hs) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kChunks; ++r) {
    const int d = lane + 32 * r;
    x[r] = d < hs ? to_float(row[d]) : 0.0f;
  }
}

template <typename T>
__device__ __forceinline__ void lane_axpy(float (&acc)[kChunks], float w, const T* row, int hs) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kChunks; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) acc[r] += w * to_float(row[d]);
  }
}

__device__ __forceinline__ void lane_add_to(float* dst, const float (&acc)[kChunks], int hs) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kChunks; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) dst[d] += acc[r];
  }
}

// The warp's row and its (batch, head) for a launch of heads * ceil(T / kWarps) blocks.
struct WarpRow {
  int b, head, row;
  bool active;
};
__device__ __forceinline__ WarpRow warp_row(int T, int heads) {
  const int per_head = (T + kWarps - 1) / kWarps;
  const int bh = blockIdx.x / per_head, row = (blockIdx.x % per_head) * kWarps + int(threadIdx.x / 32);
  return {bh / heads, bh % heads, row, row < T};
}

template <typename T>
__global__ void ring_forward_kernel(float* out, float* lse, const T* qkv, const T* kv, RingShape s, bool first) {
  const WarpRow w = warp_row(s.T, s.NH);
  if (!w.active) return;  // whole warps only: no block-wide synchronisation follows
  const int h = w.head, g = h / s.group, i = w.row;
  float q[kChunks], acc[kChunks] = {};
  lane_load(q, qkv + (size_t(w.b) * s.T + i) * s.W + size_t(h) * s.hs, s.hs);
  float m = -INFINITY, l = 0.0f;
  // Only the keys the row sees; the same j for every lane, so the warp stays converged.
  for (int half = 0; half < 2; ++half) {
    const int begin = half * s.c, end = begin + keys_seen(s, i, half);
    for (int j = begin; j < end; ++j) {
      const T* k = kv + (size_t(w.b) * s.T + j) * s.KW + size_t(g) * s.hs;
      const float score = lane_dot(q, k, s.hs) * s.scale;
      const float m_new = fmaxf(m, score), correction = __expf(m - m_new), p = __expf(score - m_new);
      l = l * correction + p;
#pragma unroll
      for (int r = 0; r < kChunks; ++r) acc[r] *= correction;
      lane_axpy(acc, p, k + size_t(s.NKV) * s.hs, s.hs);
      m = m_new;
    }
  }
  float* y = out + (size_t(w.b) * s.T + i) * s.C + size_t(h) * s.hs;
  const size_t li = (size_t(w.b) * s.NH + h) * s.T + i;
  const int lane = threadIdx.x % 32;
  if (l == 0.0f) {  // the row sees no key of this block
    if (first) {
      for (int d = lane; d < s.hs; d += 32) y[d] = 0.0f;
      if (lane == 0) lse[li] = -INFINITY;
    }
    return;
  }
  const float block = m + logf(l), old = first ? -INFINITY : lse[li];
  const float mx = fmaxf(old, block), merged = mx + logf(__expf(old - mx) + __expf(block - mx));
  const float keep = first ? 0.0f : __expf(old - merged), take = __expf(block - merged) / l;
#pragma unroll
  for (int r = 0; r < kChunks; ++r) {
    const int d = lane + 32 * r;
    if (d < s.hs) y[d] = keep * (first ? 0.0f : y[d]) + take * acc[r];
  }
  __syncwarp();
  if (lane == 0) lse[li] = merged;
}

template <typename T>
__global__ void ring_dq_kernel(float* dq, float* D, const T* dout, const T* out, const float* lse, const T* qkv,
                               const T* kv, RingShape s) {
  const WarpRow w = warp_row(s.T, s.NH);
  if (!w.active) return;
  const int h = w.head, g = h / s.group, i = w.row;
  const size_t orow = (size_t(w.b) * s.T + i) * s.C + size_t(h) * s.hs;
  float q[kChunks], dy[kChunks], acc[kChunks] = {};
  lane_load(q, qkv + (size_t(w.b) * s.T + i) * s.W + size_t(h) * s.hs, s.hs);
  lane_load(dy, dout + orow, s.hs);
  const float d_i = lane_dot(dy, out + orow, s.hs);
  const size_t li = (size_t(w.b) * s.NH + h) * s.T + i;
  const float l = lse[li];
  if (threadIdx.x % 32 == 0) D[li] = d_i;
  for (int half = 0; half < 2; ++half) {
    const int begin = half * s.c, end = begin + keys_seen(s, i, half);
    for (int j = begin; j < end; ++j) {
      const T* k = kv + (size_t(w.b) * s.T + j) * s.KW + size_t(g) * s.hs;
      const float p = __expf(lane_dot(q, k, s.hs) * s.scale - l);
      const float dp = lane_dot(dy, k + size_t(s.NKV) * s.hs, s.hs);
      lane_axpy(acc, p * (dp - d_i) * s.scale, k, s.hs);
    }
  }
  lane_add_to(dq + orow, acc, s.hs);
}

template <typename T>
__global__ void ring_dkv_kernel(float* dkv, const float* D, const T* dout, const float* lse, const T* qkv,
                                const T* kv, RingShape s) {
  const WarpRow w = warp_row(s.T, s.NKV);
  if (!w.active) return;
  const int g = w.head, j = w.row;
  const size_t krow = (size_t(w.b) * s.T + j) * s.KW + size_t(g) * s.hs;
  float k[kChunks], v[kChunks], dk[kChunks] = {}, dv[kChunks] = {};
  lane_load(k, kv + krow, s.hs);
  lane_load(v, kv + krow + size_t(s.NKV) * s.hs, s.hs);
  for (int h = g * s.group; h < (g + 1) * s.group; ++h)
    for (int half = 0; half < 2; ++half)
      for (int i = half * s.c + first_query_seeing(s, j, half); i < (half + 1) * s.c; ++i) {
        const T* q = qkv + (size_t(w.b) * s.T + i) * s.W + size_t(h) * s.hs;
        const T* dy = dout + (size_t(w.b) * s.T + i) * s.C + size_t(h) * s.hs;
        const size_t li = (size_t(w.b) * s.NH + h) * s.T + i;
        const float p = __expf(lane_dot(k, q, s.hs) * s.scale - lse[li]);
        const float ds = p * (lane_dot(v, dy, s.hs) - D[li]) * s.scale;
        lane_axpy(dv, p, dy, s.hs);
        lane_axpy(dk, ds, q, s.hs);
      }
  lane_add_to(dkv + krow, dk, s.hs);
  lane_add_to(dkv + krow + size_t(s.NKV) * s.hs, dv, s.hs);
}

template <typename T>
__global__ void ring_pack_kernel(T* kv, const T* qkv, size_t n, int W, int KW, int C) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const size_t r = idx / KW, x = idx % KW;
  kv[idx] = qkv[r * W + C + x];
}

template <typename T>
__global__ void ring_unpack_kernel(T* dqkv, const float* dq, const float* dkv, size_t n, int W, int KW, int C) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const size_t r = idx / W, x = idx % W;
  dqkv[idx] = from_float<T>(x < size_t(C) ? dq[r * C + x] : dkv[r * KW + (x - C)]);
}

RingShape ring_shape(const RingAttentionCall& call) {
  RingShape s;
  s.B = call.B;
  s.T = call.T;
  s.NH = call.n_head;
  s.NKV = call.n_kv_head;
  s.hs = call.head_dim;
  s.group = s.NH / s.NKV;
  // The row widths: a QKV row, a key/value row ([k heads | v heads]), an output row.
  const AttentionShape w{s.B, s.T, s.NH, s.NKV, s.hs};
  s.W = w.qkv_width();
  s.KW = w.kv_width();
  s.C = w.out_width();
  s.c = s.T / 2;
  s.q0 = call.q_chunks[0];
  s.q1 = call.q_chunks[1];
  s.k0 = call.kv_chunks[0];
  s.k1 = call.kv_chunks[1];
  s.scale = 1.0f / std::sqrt(float(s.hs));
  FEAST_CHECK(s.T % 2 == 0 && s.hs <= kMaxHeadDim && s.NKV > 0 && s.NH % s.NKV == 0,
              "ring attention: T " << s.T << " (two chunks), head size " << s.hs << " (at most " << kMaxHeadDim
                                   << "), " << s.NH << " query heads over " << s.NKV << " key/value heads");
  return s;
}

unsigned int row_blocks(int B, int heads, int T) {
  return static_cast<unsigned int>(size_t(B) * heads * ((T + kWarps - 1) / kWarps));
}

constexpr int kElementThreads = 256;

}  // namespace

void ring_attention_pack(const CudaContext& ctx, DType dt, void* kv, const void* qkv, size_t rows, int n_head,
                         int n_kv_head, int head_dim) {
  const AttentionShape w{0, 0, n_head, n_kv_head, head_dim};
  const size_t n = rows * size_t(w.kv_width());
  if (n == 0) return;
  dispatch_compute(dt, "ring_attention_pack", [&](auto tag) {
    using Dt = decltype(tag);
    ring_pack_kernel<Dt><<<blocks_for(n, kElementThreads), kElementThreads, 0, ctx.stream>>>(
        static_cast<Dt*>(kv), static_cast<const Dt*>(qkv), n, w.qkv_width(), w.kv_width(), w.out_width());
    FEAST_CUDA_LAUNCH_CHECK(ring_pack_kernel);
  });
}

void ring_attention_unpack(const CudaContext& ctx, DType dt, void* dqkv, const float* dq, const float* dkv,
                           size_t rows, int n_head, int n_kv_head, int head_dim) {
  const AttentionShape w{0, 0, n_head, n_kv_head, head_dim};
  const size_t n = rows * size_t(w.qkv_width());
  if (n == 0) return;
  dispatch_compute(dt, "ring_attention_unpack", [&](auto tag) {
    using Dt = decltype(tag);
    ring_unpack_kernel<Dt><<<blocks_for(n, kElementThreads), kElementThreads, 0, ctx.stream>>>(
        static_cast<Dt*>(dqkv), dq, dkv, n, w.qkv_width(), w.kv_width(), w.out_width());
    FEAST_CUDA_LAUNCH_CHECK(ring_unpack_kernel);
  });
}

void ring_attention_forward(const CudaContext& ctx, DType dt, float* out, float* lse, const void* qkv, const void* kv,
                            const RingAttentionCall& call, bool first) {
  const RingShape s = ring_shape(call);
  if (s.B * s.T == 0) return;
  dispatch_compute(dt, "ring_attention_forward", [&](auto tag) {
    using Dt = decltype(tag);
    ring_forward_kernel<Dt><<<row_blocks(s.B, s.NH, s.T), 32 * kWarps, 0, ctx.stream>>>(
        out, lse, static_cast<const Dt*>(qkv), static_cast<const Dt*>(kv), s, first);
    FEAST_CUDA_LAUNCH_CHECK(ring_forward_kernel);
  });
}

void ring_attention_backward(const CudaContext& ctx, DType dt, float* dq, float* dkv, float* workspace,
                             const void* dout, const void* out, const float* lse, const void* qkv, const void* kv,
                             const RingAttentionCall& call) {
  const RingShape s = ring_shape(call);
  if (s.B * s.T == 0) return;
  dispatch_compute(dt, "ring_attention_backward", [&](auto tag) {
    using Dt = decltype(tag);
    const Dt* q = static_cast<const Dt*>(qkv);
    const Dt* k = static_cast<const Dt*>(kv);
    const Dt* dy = static_cast<const Dt*>(dout);
    ring_dq_kernel<Dt><<<row_blocks(s.B, s.NH, s.T), 32 * kWarps, 0, ctx.stream>>>(
        dq, workspace, dy, static_cast<const Dt*>(out), lse, q, k, s);
    FEAST_CUDA_LAUNCH_CHECK(ring_dq_kernel);
    ring_dkv_kernel<Dt><<<row_blocks(s.B, s.NKV, s.T), 32 * kWarps, 0, ctx.stream>>>(dkv, workspace, dy, lse, q, k,
                                                                                      s);
    FEAST_CUDA_LAUNCH_CHECK(ring_dkv_kernel);
  });
}

}  // namespace feast::cuda
