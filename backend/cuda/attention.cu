// Causal grouped-query attention without a (T, T) matrix (backend/backend.h; CPU reference
// backend/cpu/attention.cpp), flash-style: the forward streams over the keys with an online softmax
// and keeps only each query row's log-sum-exp; the backward recomputes the probabilities from it.
//
// A warp owns one row (a query row, or a key row in the dk/dv kernel) and the kWarps warps of a
// block own consecutive rows of one head, so they share the tiles of the other side's rows that
// the block stages in shared memory, converted to float. Within a tile each lane takes one
// partner row for the dot products (no shuffle reduction per key), and the head dimension is
// split over the lanes (d = lane + 32 r) for the weighted sums into the row's accumulator.
//
// state (float32, 2 B NH T): [0, B NH T) the log-sum-exp of row ((b NH + h) T + t), natural log
// including the row's max; [B NH T, 2 B NH T) the backward's D = rowsum(dO * O) in the same order.
//
// Document masks (positions, each token's place in its document): query i sees keys
// i - positions[i] .. i only. A warp skips the tiles wholly before its query's document.
//
// The backward is deterministic (no atomics): dq_kernel computes D and dq per query row, then
// dkv_kernel, enqueued after it on the same stream, sums dk and dv per key row over the group's
// query heads and the queries i >= j.
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr int kWarps = 8;          // rows per block, a warp each
constexpr int kTile = 32;          // partner rows per shared tile, a lane each
constexpr int kMaxHeadDim = 256;
constexpr int kChunks = kMaxHeadDim / 32;  // head-dim elements per lane
constexpr unsigned int kFullMask = 0xffffffffu;
// The default dynamic shared memory limit; kernels asking for more must opt in.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// The shape of one attention call, with the derived row widths.
struct Shape {
  int T, NH, NKV, hs;
  int group;  // query heads per key/value head
  int W;      // qkv row width: (NH + 2 NKV) hs
  int C;      // out row width: NH hs
  float scale;
  const int32_t* positions;  // (B, T) document positions, or null: one document per row
};

Shape make_shape(int T, int NH, int NKV, int hs, const int32_t* positions) {
  return Shape{T,       NH, NKV, hs, NH / NKV, (NH + 2 * NKV) * hs, NH * hs,
               1.0f / std::sqrt(static_cast<float>(hs)), positions};
}

// The first key query i of batch row b sees: its document's first token, or the row's first.
__device__ __forceinline__ int first_key(const Shape& s, int b, int i) {
  return s.positions ? i - s.positions[static_cast<size_t>(b) * s.T + i] : 0;
}

// Row stride of a tile that lanes read row-wise (lane r reads row r at element d): odd, so the
// 32 lanes hit 32 different banks.
__host__ __device__ __forceinline__ int tile_stride(int hs) { return hs | 1; }

// Stages `rows` rows of hs elements (global rows src_stride apart) into tile (rows dst_stride
// apart) as float, with every thread of the block.
template <typename T>
__device__ void load_rows(float* tile, int dst_stride, const T* src, size_t src_stride, int rows, int hs) {
  for (int idx = threadIdx.x; idx < rows * hs; idx += blockDim.x) {
    const int r = idx / hs, d = idx % hs;
    tile[r * dst_stride + d] = to_float(src[r * src_stride + d]);
  }
}

// The warp's own row into its shared slot (read by all lanes of the warp as a broadcast).
template <typename T>
__device__ void load_own_row(float* slot, const T* src, int hs) {
  for (int d = threadIdx.x % 32; d < hs; d += 32) slot[d] = to_float(src[d]);
}

__device__ __forceinline__ float dot(const float* a, const float* b, int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; ++d) s += a[d] * b[d];
  return s;
}

// acc[r] (element lane + 32 r) += sum over rows n in [begin, end) of weight_n * tile row n, where
// lane n holds weight_n.
__device__ __forceinline__ void accumulate_rows(float (&acc)[kChunks], float weight, const float* tile, int stride,
                                                int begin, int end, int hs) {
  const int lane = threadIdx.x % 32;
  for (int n = begin; n < end; ++n) {
    const float w = __shfl_sync(kFullMask, weight, n);
#pragma unroll
    for (int r = 0; r < kChunks; ++r) {
      const int d = lane + 32 * r;
      if (d < hs) acc[r] += w * tile[n * stride + d];
    }
  }
}

template <typename T>
__device__ void store_row(T* dst, const float (&acc)[kChunks], float factor, int hs) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kChunks; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) dst[d] = from_float<T>(acc[r] * factor);
  }
}

// Blocks of a launch: kWarps rows of one (batch, head) per block, the big dimension on x.
unsigned int row_blocks(int T) { return static_cast<unsigned int>((T + kWarps - 1) / kWarps); }

// Which rows a block of the forward and dq kernels owns: kWarps consecutive query rows of head h
// of batch b, a warp each (row i of this warp; `active` when i < T). `last` is the block's last
// query row: no key beyond it is needed.
struct QueryBlock {
  int bh, b, h, g, i, last;
  bool active;
};

__device__ __forceinline__ QueryBlock query_block(const Shape& s) {
  const int blocks_per_head = (s.T + kWarps - 1) / kWarps;
  const int bh = blockIdx.x / blocks_per_head, first = (blockIdx.x % blocks_per_head) * kWarps;
  const int h = bh % s.NH, i = first + int(threadIdx.x / 32);
  return {bh, bh / s.NH, h, h / s.group, i, min(first + kWarps, s.T) - 1, i < s.T};
}

size_t forward_shared_bytes(int hs) {
  return sizeof(float) * (static_cast<size_t>(kTile) * tile_stride(hs) + kTile * hs + kWarps * hs);
}

// Block: kWarps query rows of head h of batch b. Shared: the key tile (read row-wise), the value
// tile (read by element) and each warp's query row.
template <typename T>
__global__ void forward_kernel(T* out, float* lse, const T* qkv, Shape s) {
  extern __shared__ float shared[];
  const int stride = tile_stride(s.hs);
  float* k_tile = shared;
  float* v_tile = k_tile + kTile * stride;
  float* q_rows = v_tile + kTile * s.hs;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const auto [bh, b, h, g, i, last, active] = query_block(s);
  const T* batch = qkv + static_cast<size_t>(b) * s.T * s.W;
  const T* keys = batch + s.C + g * s.hs;
  const T* values = batch + s.C + s.NKV * s.hs + g * s.hs;
  float* q = q_rows + warp * s.hs;
  if (active) load_own_row(q, batch + static_cast<size_t>(i) * s.W + h * s.hs, s.hs);
  const int lo = active ? first_key(s, b, i) : 0;

  float row_max = -INFINITY, row_sum = 0.0f;
  float acc[kChunks] = {};
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    const int rows = min(kTile, last + 1 - j0);
    __syncthreads();  // the previous tile has been used (and, the first time, q is in place)
    load_rows(k_tile, stride, keys + static_cast<size_t>(j0) * s.W, s.W, rows, s.hs);
    load_rows(v_tile, s.hs, values + static_cast<size_t>(j0) * s.W, s.W, rows, s.hs);
    __syncthreads();
    // Warp-uniform: this row is done, or the tile is masked out (past it, or before its document).
    if (!active || j0 > i || j0 + kTile <= lo) continue;
    const int j = j0 + lane;
    const bool causal = j <= i && j >= lo;  // implies j <= last, a loaded row
    const float score = causal ? dot(q, k_tile + lane * stride, s.hs) * s.scale : -INFINITY;
    // The first tile processed holds key max(j0, lo) <= i, so the new max is finite.
    const float new_max = fmaxf(row_max, warp_max(score));
    const float p = causal ? expf(score - new_max) : 0.0f;
    const float rescale = expf(row_max - new_max);  // 0 on the first tile
    row_sum = row_sum * rescale + warp_sum(p);
#pragma unroll
    for (int r = 0; r < kChunks; ++r) acc[r] *= rescale;
    accumulate_rows(acc, p, v_tile, s.hs, 0, min(kTile, i + 1 - j0), s.hs);
    row_max = new_max;
  }
  if (!active) return;
  store_row(out + (static_cast<size_t>(b) * s.T + i) * s.C + h * s.hs, acc, 1.0f / row_sum, s.hs);
  if (lane == 0) lse[static_cast<size_t>(bh) * s.T + i] = row_max + logf(row_sum);
}

size_t dq_shared_bytes(int hs) {
  return sizeof(float) * (2 * static_cast<size_t>(kTile) * tile_stride(hs) + 2 * kWarps * hs);
}

// Block: kWarps query rows of head h of batch b. Two passes over the keys j <= i: the first sums
// D_i = sum_j p_ij dp_ij (dp_ij = dO_i . v_j, so D_i = dO_i . O_i), the second
// dq_i = scale sum_j p_ij (dp_ij - D_i) k_j. Shared: the key and value tiles (both read row-wise
// for the dot products) and each warp's q and dO rows.
template <typename T>
__global__ void dq_kernel(T* dqkv, float* D, const T* dout, const T* qkv, const float* lse, Shape s) {
  extern __shared__ float shared[];
  const int stride = tile_stride(s.hs);
  float* k_tile = shared;
  float* v_tile = k_tile + kTile * stride;
  float* q_rows = v_tile + kTile * stride;
  float* dout_rows = q_rows + kWarps * s.hs;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const auto [bh, b, h, g, i, last, active] = query_block(s);
  const size_t qkv_row0 = static_cast<size_t>(b) * s.T * s.W;
  const T* keys = qkv + qkv_row0 + s.C + g * s.hs;
  const T* values = qkv + qkv_row0 + s.C + s.NKV * s.hs + g * s.hs;
  const size_t row = static_cast<size_t>(bh) * s.T + i;  // this warp's index into lse and D
  float* q = q_rows + warp * s.hs;
  float* dy = dout_rows + warp * s.hs;
  float row_lse = 0.0f;
  const int lo = active ? first_key(s, b, i) : 0;
  if (active) {
    load_own_row(q, qkv + qkv_row0 + static_cast<size_t>(i) * s.W + h * s.hs, s.hs);
    load_own_row(dy, dout + (static_cast<size_t>(b) * s.T + i) * s.C + h * s.hs, s.hs);
    row_lse = lse[row];
  }

  float d_partial = 0.0f, row_D = 0.0f;
  float acc[kChunks] = {};
  for (int pass = 0; pass < 2; ++pass) {
    for (int j0 = 0; j0 <= last; j0 += kTile) {
      const int rows = min(kTile, last + 1 - j0);
      __syncthreads();
      load_rows(k_tile, stride, keys + static_cast<size_t>(j0) * s.W, s.W, rows, s.hs);
      load_rows(v_tile, stride, values + static_cast<size_t>(j0) * s.W, s.W, rows, s.hs);
      __syncthreads();
      if (!active || j0 > i || j0 + kTile <= lo) continue;
      const int j = j0 + lane;
      float p = 0.0f, dp = 0.0f;
      if (j <= i && j >= lo) {
        p = expf(dot(q, k_tile + lane * stride, s.hs) * s.scale - row_lse);
        dp = dot(dy, v_tile + lane * stride, s.hs);
      }
      if (pass == 0) {
        d_partial += p * dp;
      } else {
        const float ds = p * (dp - row_D) * s.scale;
        accumulate_rows(acc, ds, k_tile, stride, 0, min(kTile, i + 1 - j0), s.hs);
      }
    }
    if (pass == 0) row_D = warp_sum(d_partial);  // every lane takes part (inactive warps sum zeros)
  }
  if (!active) return;
  store_row(dqkv + qkv_row0 + static_cast<size_t>(i) * s.W + h * s.hs, acc, 1.0f, s.hs);
  if (lane == 0) D[row] = row_D;
}

size_t dkv_shared_bytes(int hs) {
  return sizeof(float) * (2 * static_cast<size_t>(kTile) * tile_stride(hs) + 2 * kWarps * hs + 2 * kTile);
}

// Block: kWarps key rows of key/value head g of batch b. For each query head h of the group and
// each query i >= j: dv_j += p_ij dO_i and dk_j += scale p_ij (dp_ij - D_i) q_i. Shared: the q
// and dO tiles of the query rows (read row-wise for the dot products, then by element for the
// sums), their lse and D, and each warp's k and v rows.
template <typename T>
__global__ void dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, Shape s) {
  extern __shared__ float shared[];
  const int stride = tile_stride(s.hs);
  float* q_tile = shared;
  float* dout_tile = q_tile + kTile * stride;
  float* k_rows = dout_tile + kTile * stride;
  float* v_rows = k_rows + kWarps * s.hs;
  float* lse_tile = v_rows + kWarps * s.hs;
  float* D_tile = lse_tile + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int blocks_per_head = (s.T + kWarps - 1) / kWarps;
  const int bg = blockIdx.x / blocks_per_head, first = (blockIdx.x % blocks_per_head) * kWarps;
  const int b = bg / s.NKV, g = bg % s.NKV;
  const int j = first + warp;
  const bool active = j < s.T;
  const size_t qkv_row0 = static_cast<size_t>(b) * s.T * s.W;
  const size_t k_offset = s.C + g * s.hs, v_offset = s.C + s.NKV * s.hs + g * s.hs;
  float* k = k_rows + warp * s.hs;
  float* v = v_rows + warp * s.hs;
  if (active) {
    load_own_row(k, qkv + qkv_row0 + static_cast<size_t>(j) * s.W + k_offset, s.hs);
    load_own_row(v, qkv + qkv_row0 + static_cast<size_t>(j) * s.W + v_offset, s.hs);
  }

  float dk[kChunks] = {}, dv[kChunks] = {};
  for (int h = g * s.group; h < (g + 1) * s.group; ++h) {
    const size_t state_row0 = (static_cast<size_t>(b) * s.NH + h) * s.T;
    const T* queries = qkv + qkv_row0 + h * s.hs;
    const T* dys = dout + static_cast<size_t>(b) * s.T * s.C + h * s.hs;
    // Queries before the block's first key see none of its keys.
    for (int i0 = first; i0 < s.T; i0 += kTile) {
      const int rows = min(kTile, s.T - i0);
      __syncthreads();
      load_rows(q_tile, stride, queries + static_cast<size_t>(i0) * s.W, s.W, rows, s.hs);
      load_rows(dout_tile, stride, dys + static_cast<size_t>(i0) * s.C, s.C, rows, s.hs);
      if (threadIdx.x < rows) {
        lse_tile[threadIdx.x] = lse[state_row0 + i0 + threadIdx.x];
        D_tile[threadIdx.x] = D[state_row0 + i0 + threadIdx.x];
      }
      __syncthreads();
      if (!active || i0 + rows <= j) continue;  // warp-uniform: no query of the tile sees key j
      const int i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i >= j && lane < rows && j >= first_key(s, b, i)) {
        p = expf(dot(q_tile + lane * stride, k, s.hs) * s.scale - lse_tile[lane]);
        const float dp = dot(dout_tile + lane * stride, v, s.hs);
        ds = p * (dp - D_tile[lane]) * s.scale;
      }
      const int begin = max(0, j - i0);
      accumulate_rows(dv, p, dout_tile, stride, begin, rows, s.hs);
      accumulate_rows(dk, ds, q_tile, stride, begin, rows, s.hs);
    }
  }
  if (!active) return;
  store_row(dqkv + qkv_row0 + static_cast<size_t>(j) * s.W + k_offset, dk, 1.0f, s.hs);
  store_row(dqkv + qkv_row0 + static_cast<size_t>(j) * s.W + v_offset, dv, 1.0f, s.hs);
}

// Launches `kernel` with `shared_bytes` of dynamic shared memory, opting in above the default.
template <typename Kernel, typename... Args>
void launch(const CudaContext& ctx, Kernel kernel, unsigned int blocks, size_t shared_bytes, Args... args) {
  if (shared_bytes > kDefaultSharedBytes)
    FEAST_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(shared_bytes)));
  kernel<<<blocks, kWarps * 32, shared_bytes, ctx.stream>>>(args...);
}

void check_head_dim(int head_dim) {
  FEAST_CHECK(head_dim >= 1 && head_dim <= kMaxHeadDim,
              "cuda attention supports head_dim 1.." << kMaxHeadDim << ", not " << head_dim);
}

}  // namespace

size_t attention_state_floats(int B, int T, int n_head) { return 2 * static_cast<size_t>(B) * n_head * T; }

void attention_forward(const CudaContext& ctx, DType dt, void* out, float* state, const void* qkv, int B, int T,
                       int n_head, int n_kv_head, int head_dim, const int32_t* positions) {
  if (B == 0 || T == 0) return;
  check_head_dim(head_dim);
  const Shape s = make_shape(T, n_head, n_kv_head, head_dim, positions);
  const unsigned int blocks = static_cast<unsigned int>(B) * n_head * row_blocks(T);
  dispatch_compute(dt, "attention_forward", [&](auto tag) {
    using Dt = decltype(tag);
    launch(ctx, forward_kernel<Dt>, blocks, forward_shared_bytes(head_dim), static_cast<Dt*>(out), state,
           static_cast<const Dt*>(qkv), s);
    FEAST_CUDA_LAUNCH_CHECK(forward_kernel);
  });
}

void attention_backward(const CudaContext& ctx, DType dt, void* dqkv, const void* dout, const void* qkv, float* state,
                        int B, int T, int n_head, int n_kv_head, int head_dim, const int32_t* positions) {
  if (B == 0 || T == 0) return;
  check_head_dim(head_dim);
  const Shape s = make_shape(T, n_head, n_kv_head, head_dim, positions);
  const float* lse = state;
  float* D = state + static_cast<size_t>(B) * n_head * T;
  dispatch_compute(dt, "attention_backward", [&](auto tag) {
    using Dt = decltype(tag);
    // dkv_kernel reads the D that dq_kernel writes: both on ctx.stream, in this order.
    launch(ctx, dq_kernel<Dt>, static_cast<unsigned int>(B) * n_head * row_blocks(T), dq_shared_bytes(head_dim),
           static_cast<Dt*>(dqkv), D, static_cast<const Dt*>(dout), static_cast<const Dt*>(qkv), lse, s);
    FEAST_CUDA_LAUNCH_CHECK(dq_kernel);
    launch(ctx, dkv_kernel<Dt>, static_cast<unsigned int>(B) * n_kv_head * row_blocks(T),
           dkv_shared_bytes(head_dim), static_cast<Dt*>(dqkv), static_cast<const Dt*>(dout),
           static_cast<const Dt*>(qkv), lse, static_cast<const float*>(D), s);
    FEAST_CUDA_LAUNCH_CHECK(dkv_kernel);
  });
}

}  // namespace feast::cuda
