#include "backend/cpu/ring_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/blas.h"
#include "backend/scalar_math.h"
#include "core/error.h"

namespace feast::cpu {
namespace {

// Which keys of a half a query of chunk q sees: all (an earlier chunk), those up to itself (its
// own chunk), none (a later chunk).
enum class Visibility { kAll, kCausal, kNone };
Visibility visibility(int q_chunk, int kv_chunk) {
  return q_chunk > kv_chunk ? Visibility::kAll : q_chunk == kv_chunk ? Visibility::kCausal : Visibility::kNone;
}

struct HalfMask {
  Visibility half[2];
  bool any() const { return half[0] != Visibility::kNone || half[1] != Visibility::kNone; }
  // The key rows [begin, end) of 2c that any query of the half may see: a half no query sees is
  // left out of the products (the two halves are contiguous rows, so what remains is one range).
  int begin(int c) const { return half[0] == Visibility::kNone ? c : 0; }
  int end(int c) const { return half[1] == Visibility::kNone ? c : 2 * c; }
  // Calls hide(from, to) for the columns of query row i's scores (the key rows j0 + column, of
  // the window [begin, end) of n) that it does not see: the keys of a half it sees are a prefix
  // of that half (all of it, or up to the query itself).
  template <typename Hide>
  void hidden_columns(int i, int c, int j0, int n, Hide hide) const {
    for (int h = 0; h < 2; ++h) {
      const int start = h * c - j0;
      if (start < 0 || start >= n) continue;  // the half is outside the window
      const int seen = half[h] == Visibility::kAll ? c : half[h] == Visibility::kCausal ? i + 1 : 0;
      if (seen < c) hide(start + seen, start + c);
    }
  }
};

HalfMask mask_of(int q_chunk, ChunkPair kv) { return {{visibility(q_chunk, kv.first), visibility(q_chunk, kv.second)}}; }

void check_shape(int Tn, int NH, int NKV, size_t per_thread, size_t workspace_elems, int hs) {
  FEAST_CHECK(Tn % 2 == 0, "ring attention: " << Tn << " local tokens are not two equal chunks");
  FEAST_CHECK(NKV > 0 && NH % NKV == 0, "ring attention: " << NH << " query heads do not share " << NKV
                                                           << " key/value heads evenly");
  FEAST_CHECK(workspace_elems >= per_thread, "ring attention workspace of " << workspace_elems
                                                 << " elements cannot hold one thread's " << per_thread
                                                 << " (T " << Tn << ", head size " << hs << ")");
}

// Two (c, 2c) matrices, a (c, hs) block output and c block log-sum-exps.
size_t per_thread_elems(int Tn, int hs) {
  const size_t c = size_t(Tn / 2);
  return 2 * c * size_t(Tn) + c * size_t(hs) + c;
}

}  // namespace

size_t ring_attention_workspace(int Tn, int hs, int threads) { return size_t(threads) * per_thread_elems(Tn, hs); }

template <typename F>
void ring_attention_forward(F* out, F* lse, const F* qkv, const F* kv, int B, int Tn, int NH, int NKV, int hs,
                            ChunkPair q_chunks, ChunkPair kv_chunks, bool first, F* workspace,
                            size_t workspace_elems) {
  const size_t per_thread = per_thread_elems(Tn, hs);
  check_shape(Tn, NH, NKV, per_thread, workspace_elems, hs);
  const int c = Tn / 2, W = (NH + 2 * NKV) * hs, KW = 2 * NKV * hs, C = NH * hs, group = NH / NKV;
  const F scale = F(1) / std::sqrt(F(hs)), minus_inf = -std::numeric_limits<F>::infinity();
  const int threads = int(std::min<size_t>(size_t(omp_get_max_threads()), workspace_elems / per_thread));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH, g = h / group;
    F* s = workspace + size_t(omp_get_thread_num()) * per_thread;  // (c, 2c) scores, then probabilities
    F* o = s + 2 * size_t(c) * size_t(Tn);                          // (c, hs) the block's output
    F* block_lse = o + size_t(c) * size_t(hs);                      // (c)
    const F* k = kv + size_t(b) * Tn * KW + g * hs;                 // (2c, hs), row stride KW
    const F* v = k + NKV * hs;
    for (int qh = 0; qh < 2; ++qh) {
      const int row0 = qh * c;
      F* y = out + (size_t(b) * Tn + row0) * C + h * hs;  // (c, hs), row stride C
      F* l = lse + (size_t(b) * NH + h) * Tn + row0;
      if (first)
        for (int i = 0; i < c; ++i) {
          l[i] = minus_inf;
          std::fill(y + size_t(i) * C, y + size_t(i) * C + hs, F(0));
        }
      const HalfMask mask = mask_of(qh == 0 ? q_chunks.first : q_chunks.second, kv_chunks);
      if (!mask.any()) continue;
      const F* q = qkv + (size_t(b) * Tn + row0) * W + h * hs;  // (c, hs), row stride W
      // Scores over the visible key rows [j0, j1) only: s is (c, n), row stride n.
      const int j0 = mask.begin(c), j1 = mask.end(c), n = j1 - j0;
      gemm(false, true, c, n, hs, scale, q, W, k + size_t(j0) * KW, KW, F(0), s, n);
      for (int i = 0; i < c; ++i) {
        F* row = s + size_t(i) * n;
        mask.hidden_columns(i, c, j0, n, [&](int from, int to) { std::fill(row + from, row + to, minus_inf); });
        F mx = minus_inf;
        for (int j = 0; j < n; ++j) mx = std::max(mx, row[j]);
#pragma omp simd
        for (int j = 0; j < n; ++j) row[j] = fast_exp(row[j] - mx);
        // fast_exp flushes exp(-inf) to 1e-38, not 0: the hidden keys get exactly nothing.
        mask.hidden_columns(i, c, j0, n, [&](int from, int to) { std::fill(row + from, row + to, F(0)); });
        F sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < n; ++j) sum += row[j];
        const F inv = F(1) / sum;
        for (int j = 0; j < n; ++j) row[j] *= inv;
        block_lse[i] = mx + std::log(sum);
      }
      gemm(false, false, c, hs, n, F(1), s, n, v + size_t(j0) * KW, KW, F(0), o, hs);
      // The online softmax's merge: both parts rescaled to the combined normaliser.
      for (int i = 0; i < c; ++i) {
        const F old = l[i], add = block_lse[i];
        const F mx = std::max(old, add);
        const F merged = mx + std::log(std::exp(old - mx) + std::exp(add - mx));
        const F keep = std::exp(old - merged), take = std::exp(add - merged);
        F* yr = y + size_t(i) * C;
        const F* orow = o + size_t(i) * hs;
        for (int d = 0; d < hs; ++d) yr[d] = keep * yr[d] + take * orow[d];
        l[i] = merged;
      }
    }
  }
}

template <typename F>
void ring_attention_backward(F* dq, F* dkv, const F* dout, const F* out, const F* lse, const F* qkv, const F* kv,
                             int B, int Tn, int NH, int NKV, int hs, ChunkPair q_chunks, ChunkPair kv_chunks,
                             F* workspace, size_t workspace_elems) {
  const size_t per_thread = per_thread_elems(Tn, hs);
  check_shape(Tn, NH, NKV, per_thread, workspace_elems, hs);
  const int c = Tn / 2, W = (NH + 2 * NKV) * hs, KW = 2 * NKV * hs, C = NH * hs, group = NH / NKV;
  const F scale = F(1) / std::sqrt(F(hs));
  const int threads = int(std::min<size_t>(size_t(omp_get_max_threads()), workspace_elems / per_thread));
  // One (batch, key/value head) per iteration: a group's query heads add into the same dk and
  // dv, so they run in order on one thread (deterministic, no races).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int bg = 0; bg < B * NKV; ++bg) {
    const int b = bg / NKV, g = bg % NKV;
    F* p = workspace + size_t(omp_get_thread_num()) * per_thread;  // (c, 2c) probabilities
    F* ds = p + size_t(c) * size_t(Tn);                             // (c, 2c) score gradients
    const F* k = kv + size_t(b) * Tn * KW + g * hs;
    const F* v = k + NKV * hs;
    F* dk = dkv + size_t(b) * Tn * KW + g * hs;
    F* dv = dk + NKV * hs;
    for (int h = g * group; h < (g + 1) * group; ++h)
      for (int qh = 0; qh < 2; ++qh) {
        const HalfMask mask = mask_of(qh == 0 ? q_chunks.first : q_chunks.second, kv_chunks);
        if (!mask.any()) continue;
        const int row0 = qh * c;
        const F* q = qkv + (size_t(b) * Tn + row0) * W + h * hs;
        const F* dy = dout + (size_t(b) * Tn + row0) * C + h * hs;
        const F* y = out + (size_t(b) * Tn + row0) * C + h * hs;
        const F* l = lse + (size_t(b) * NH + h) * Tn + row0;
        F* dqh = dq + (size_t(b) * Tn + row0) * C + h * hs;
        // Over the visible key rows [j0, j1) only: p and ds are (c, n), row stride n.
        const int j0 = mask.begin(c), j1 = mask.end(c), n = j1 - j0;
        const size_t kv0 = size_t(j0) * KW;
        gemm(false, true, c, n, hs, scale, q, W, k + kv0, KW, F(0), p, n);
        for (int i = 0; i < c; ++i) {
          F* row = p + size_t(i) * n;
          const F li = l[i];
#pragma omp simd
          for (int j = 0; j < n; ++j) row[j] = fast_exp(row[j] - li);
          mask.hidden_columns(i, c, j0, n, [&](int from, int to) { std::fill(row + from, row + to, F(0)); });
        }
        gemm(true, false, n, hs, c, F(1), p, n, dy, C, F(1), dv + kv0, KW);  // dv += p^T dy
        gemm(false, true, c, n, hs, F(1), dy, C, v + kv0, KW, F(0), ds, n);  // dp = dy v^T
        for (int i = 0; i < c; ++i) {
          F dot = 0;  // sum_j p dp = dy . y, the final output's row
          for (int d = 0; d < hs; ++d) dot += dy[size_t(i) * C + d] * y[size_t(i) * C + d];
          const F* prow = p + size_t(i) * n;
          F* row = ds + size_t(i) * n;
          for (int j = 0; j < n; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
        }
        gemm(false, false, c, hs, n, F(1), ds, n, k + kv0, KW, F(1), dqh, C);  // dq += ds k
        gemm(true, false, n, hs, c, F(1), ds, n, q, W, F(1), dk + kv0, KW);    // dk += ds^T q
      }
  }
}

template <typename F>
void ring_attention_pack(F* kv, const F* qkv, size_t N, int NH, int NKV, int hs) {
  const size_t W = size_t(NH + 2 * NKV) * hs, KW = 2 * size_t(NKV) * hs, C = size_t(NH) * hs;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < (long long)N; ++r) std::copy_n(qkv + size_t(r) * W + C, KW, kv + size_t(r) * KW);
}

template <typename F>
void ring_attention_unpack(F* dqkv, const F* dq, const F* dkv, size_t N, int NH, int NKV, int hs) {
  const size_t W = size_t(NH + 2 * NKV) * hs, KW = 2 * size_t(NKV) * hs, C = size_t(NH) * hs;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < (long long)N; ++r) {
    std::copy_n(dq + size_t(r) * C, C, dqkv + size_t(r) * W);
    std::copy_n(dkv + size_t(r) * KW, KW, dqkv + size_t(r) * W + C);
  }
}

template void ring_attention_pack<float>(float*, const float*, size_t, int, int, int);
template void ring_attention_pack<double>(double*, const double*, size_t, int, int, int);
template void ring_attention_unpack<float>(float*, const float*, const float*, size_t, int, int, int);
template void ring_attention_unpack<double>(double*, const double*, const double*, size_t, int, int, int);
template void ring_attention_forward<float>(float*, float*, const float*, const float*, int, int, int, int, int,
                                            ChunkPair, ChunkPair, bool, float*, size_t);
template void ring_attention_forward<double>(double*, double*, const double*, const double*, int, int, int, int, int,
                                             ChunkPair, ChunkPair, bool, double*, size_t);
template void ring_attention_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                             const float*, int, int, int, int, int, ChunkPair, ChunkPair, float*,
                                             size_t);
template void ring_attention_backward<double>(double*, double*, const double*, const double*, const double*,
                                              const double*, const double*, int, int, int, int, int, ChunkPair,
                                              ChunkPair, double*, size_t);

}  // namespace feast::cpu
