// Token and position embeddings, vocab-parallel: this rank holds wte rows [vocab_begin,
// vocab_end). The backward adds each token's gradient rows in token order, as the CPU does,
// without atomics, so its result is the same every run.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;

// Blocks stride over the N rows, threads over a row's C channels.
template <typename T>
__global__ void embedding_forward_kernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                                         const T* __restrict__ wte, const T* __restrict__ wpe,
                                         const int32_t* __restrict__ positions, int N, int Tn, int C,
                                         int vocab_begin, int vocab_end) {
  for (int bt = blockIdx.x; bt < N; bt += gridDim.x) {
    const int tok = tokens[bt];
    const T* e = tok >= vocab_begin && tok < vocab_end ? wte + size_t(tok - vocab_begin) * C : nullptr;
    const T* p = wpe ? wpe + size_t(positions ? positions[bt] : bt % Tn) * C : nullptr;
    T* o = out + size_t(bt) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float v = e ? to_float(e[c]) : 0.0f;
      if (p) v += to_float(p[c]);
      o[c] = from_float<T>(v);
    }
  }
}

// dwte += dout rows of the local tokens, in token order. Block (cls, chunk) owns the wte rows
// whose local index is cls modulo gridDim.x and the channels of its chunk, so no other block
// writes what it writes. It walks the tokens in tiles of kThreads: the tile's tokens of its
// class are listed in order in shared memory, and then each thread adds their rows for its
// channel in that order. A thread keeps the row it is adding to in a register while the same
// token repeats; that performs exactly the additions a read-modify-write per token would.
template <typename T>
__global__ void embedding_backward_wte_kernel(float* __restrict__ dwte, const T* __restrict__ dout,
                                              const int32_t* __restrict__ tokens, int N, int C, int vocab_begin,
                                              int vocab_end) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kPrefetch = 4;  // dout loads in flight per thread while the additions stay in order
  __shared__ int listed_pos[kThreads];
  __shared__ int listed_row[kThreads];
  __shared__ int warp_counts[kWarps];
  const int classes = gridDim.x, cls = blockIdx.x;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int held_row = -1;
  float held = 0.0f;
  for (int tile = 0; tile < N; tile += kThreads) {
    const int bt = tile + threadIdx.x;
    int row = -1;
    if (bt < N) {
      const int tok = tokens[bt];
      if (tok >= vocab_begin && tok < vocab_end && (tok - vocab_begin) % classes == cls) row = tok - vocab_begin;
    }
    const unsigned int mine = __ballot_sync(0xffffffffu, row >= 0);
    if (lane == 0) warp_counts[warp] = __popc(mine);
    __syncthreads();
    int slot = 0, listed = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) slot += warp_counts[w];
      listed += warp_counts[w];
    }
    if (row >= 0) {
      slot += __popc(mine & ((1u << lane) - 1u));
      listed_pos[slot] = bt;
      listed_row[slot] = row;
    }
    __syncthreads();
    if (c < C) {
      for (int k = 0; k < listed; k += kPrefetch) {
        float d[kPrefetch];
#pragma unroll
        for (int j = 0; j < kPrefetch; ++j)
          d[j] = k + j < listed ? to_float(dout[size_t(listed_pos[k + j]) * C + c]) : 0.0f;
#pragma unroll
        for (int j = 0; j < kPrefetch; ++j) {
          if (k + j >= listed) break;
          const int r = listed_row[k + j];
          if (r != held_row) {
            if (held_row >= 0) dwte[size_t(held_row) * C + c] = held;
            held_row = r;
            held = dwte[size_t(r) * C + c];
          }
          held += d[j];
        }
      }
    }
    __syncthreads();  // the next tile overwrites the lists and the counts
  }
  if (held_row >= 0) dwte[size_t(held_row) * C + c] = held;
}

// dwpe (T, C) += dout summed over the batch: a thread per (t, c) adds b = 0, 1, ... in order.
template <typename T>
__global__ void embedding_backward_wpe_kernel(float* __restrict__ dwpe, const T* __restrict__ dout, int B, int Tn,
                                              int C) {
  const size_t count = size_t(Tn) * C;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += to_float(dout[size_t(b) * count + i]);
    dwpe[i] = acc;
  }
}

// The same with document positions (positions (B, T)): dwpe[p] += the rows whose position is p,
// a thread per (p, c) walking the rows in order, as the CPU adds them. A row's position is at
// most its t, so row b's search for p starts at t = p. O(B T^2 C) compares: the learned position
// table meets document masks only when fine-tuning GPT-2 on packed data, at GPT-2's short windows.
template <typename T>
__global__ void embedding_backward_wpe_by_position_kernel(float* __restrict__ dwpe, const T* __restrict__ dout,
                                                          const int32_t* __restrict__ positions, int B, int Tn,
                                                          int C) {
  const size_t count = size_t(Tn) * C;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const int p = int(i / size_t(C)), c = int(i % size_t(C));
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b)
      for (int t = p; t < Tn; ++t) {
        const size_t row = size_t(b) * Tn + t;
        if (positions[row] == p) acc += to_float(dout[row * C + c]);
      }
    dwpe[i] = acc;
  }
}

// Blocks of the wte backward, to fill the device: the channel chunks times as many vocabulary
// classes as make up this many. The result does not depend on the split (every element adds
// its tokens in order whichever block owns it); more classes only spread the work.
constexpr unsigned int kWteTargetBlocks = 1024;

}  // namespace

void embedding_forward(const CudaContext& ctx, DType dt, void* out, const int32_t* tokens, const void* wte,
                       const void* wpe, const int32_t* positions, int B, int T, int C, int vocab_begin,
                       int vocab_end) {
  const int N = B * T;
  if (N <= 0 || C <= 0) return;
  const unsigned int grid = std::min(static_cast<unsigned int>(N), 32u * static_cast<unsigned int>(ctx.sm_count));
  dispatch_compute(dt, "embedding_forward", [&](auto tag) {
    using Tc = decltype(tag);
    embedding_forward_kernel<Tc><<<grid, kThreads, 0, ctx.stream>>>(
        static_cast<Tc*>(out), tokens, static_cast<const Tc*>(wte), static_cast<const Tc*>(wpe), positions, N,
        T, C, vocab_begin, vocab_end);
    FEAST_CUDA_LAUNCH_CHECK(embedding_forward_kernel);
  });
}

void embedding_backward(const CudaContext& ctx, DType dt, float* dwte, float* dwpe, const void* dout,
                        const int32_t* tokens, const int32_t* positions, int B, int T, int C, int vocab_begin,
                        int vocab_end) {
  const int N = B * T;
  if (N <= 0 || C <= 0) return;
  const int rows = vocab_end - vocab_begin;
  dispatch_compute(dt, "embedding_backward", [&](auto tag) {
    using Tc = decltype(tag);
    if (rows > 0) {
      const unsigned int chunks = blocks_for(C, kThreads);
      const unsigned int classes =
          std::min(static_cast<unsigned int>(rows), std::max(1u, kWteTargetBlocks / chunks));
      embedding_backward_wte_kernel<Tc><<<dim3(classes, chunks), kThreads, 0, ctx.stream>>>(
          dwte, static_cast<const Tc*>(dout), tokens, N, C, vocab_begin, vocab_end);
      FEAST_CUDA_LAUNCH_CHECK(embedding_backward_wte_kernel);
    }
    if (dwpe) {
      const size_t count = size_t(T) * C;
      const unsigned int grid =
          std::min(blocks_for(count, kThreads), 32u * static_cast<unsigned int>(ctx.sm_count));
      if (positions) {
        embedding_backward_wpe_by_position_kernel<Tc><<<grid, kThreads, 0, ctx.stream>>>(
            dwpe, static_cast<const Tc*>(dout), positions, B, T, C);
        FEAST_CUDA_LAUNCH_CHECK(embedding_backward_wpe_by_position_kernel);
      } else {
        embedding_backward_wpe_kernel<Tc><<<grid, kThreads, 0, ctx.stream>>>(dwpe, static_cast<const Tc*>(dout), B,
                                                                             T, C);
        FEAST_CUDA_LAUNCH_CHECK(embedding_backward_wpe_kernel);
      }
    }
  });
}

}  // namespace feast::cuda
