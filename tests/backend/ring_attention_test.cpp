// Ring attention's block ops (context parallelism) against the whole-sequence attention, in
// float64: cp ranks simulated in one process, each holding sequence chunks r and 2cp-1-r, run
// the ring's steps (every rank's key/value block in ring order, merged by the online softmax)
// and the backward (each key/value block's gradient summed over the ranks it visits). Every
// rank's output rows and its rows of d qkv must equal the full attention's at those positions.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ring_attention.h"
#include "tests/backend/gradcheck.h"

namespace feast {
namespace {

using testing::random_vector;

// Row t of rank r's local sequence: its place in the whole one.
int position(int r, int cp, int t, int c) {
  const int chunk = t < c ? r : 2 * cp - 1 - r;
  return chunk * c + t % c;
}

void check_ring(int cp, int NH, int NKV, int c, uint32_t seed) {
  const int B = 2, hs = 4, Tw = 2 * cp * c, Tl = 2 * c;
  const int W = (NH + 2 * NKV) * hs, KW = 2 * NKV * hs, C = NH * hs;
  const std::vector<double> qkv = random_vector(size_t(B) * Tw * W, seed);
  const std::vector<double> dout = random_vector(size_t(B) * Tw * C, seed + 1);
  // The reference: attention over whole sequences.
  std::vector<double> ref_out(size_t(B) * Tw * C), att(size_t(B) * NH * Tw * Tw), ref_dqkv(size_t(B) * Tw * W);
  cpu::attention_forward(ref_out.data(), att.data(), qkv.data(), B, Tw, NH, NKV, hs);
  std::vector<double> scratch(size_t(cpu::attention_scratch_size(Tw, 4)));
  cpu::attention_backward(ref_dqkv.data(), dout.data(), qkv.data(), att.data(), B, Tw, NH, NKV, hs, nullptr, scratch.data(),
                          long(scratch.size()));

  // Each rank's rows of a (B, Tw, width) tensor.
  auto local_rows = [&](const std::vector<double>& whole, int width, int r) {
    std::vector<double> out(size_t(B) * Tl * width);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t)
        for (int x = 0; x < width; ++x)
          out[(size_t(b) * Tl + t) * width + x] = whole[(size_t(b) * Tw + position(r, cp, t, c)) * width + x];
    return out;
  };
  std::vector<std::vector<double>> q(cp), kv(cp), y(cp), lse(cp), dy(cp);
  for (int r = 0; r < cp; ++r) {
    q[size_t(r)] = local_rows(qkv, W, r);
    dy[size_t(r)] = local_rows(dout, C, r);
    kv[size_t(r)].resize(size_t(B) * Tl * KW);
    cpu::ring_attention_pack(kv[size_t(r)].data(), q[size_t(r)].data(), size_t(B) * Tl, NH, NKV, hs);
  }
  std::vector<double> ws(cpu::ring_attention_workspace(Tl, hs, 4));
  auto chunks = [&](int r) { return cpu::ChunkPair{r, 2 * cp - 1 - r}; };
  for (int r = 0; r < cp; ++r) {
    y[size_t(r)].assign(size_t(B) * Tl * C, 99.0);  // overwritten by the first step
    lse[size_t(r)].assign(size_t(B) * NH * Tl, 99.0);
    for (int step = 0; step < cp; ++step) {
      const int from = (r - step + cp) % cp;
      cpu::ring_attention_forward(y[size_t(r)].data(), lse[size_t(r)].data(), q[size_t(r)].data(),
                                  kv[size_t(from)].data(), B, Tl, NH, NKV, hs, chunks(r), chunks(from), step == 0,
                                  ws.data(), ws.size());
    }
    const std::vector<double> want = local_rows(ref_out, C, r);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(y[size_t(r)][i], want[i], 1e-12) << "cp " << cp << " rank " << r << " output element " << i;
  }
  std::vector<std::vector<double>> dq(cp), dkv(cp);
  for (int r = 0; r < cp; ++r) {
    dq[size_t(r)].assign(size_t(B) * Tl * C, 0.0);
    dkv[size_t(r)].assign(size_t(B) * Tl * KW, 0.0);
  }
  for (int r = 0; r < cp; ++r)
    for (int step = 0; step < cp; ++step) {
      const int from = (r - step + cp) % cp;
      cpu::ring_attention_backward(dq[size_t(r)].data(), dkv[size_t(from)].data(), dy[size_t(r)].data(),
                                   y[size_t(r)].data(), lse[size_t(r)].data(), q[size_t(r)].data(),
                                   kv[size_t(from)].data(), B, Tl, NH, NKV, hs, chunks(r), chunks(from), ws.data(),
                                   ws.size());
    }
  for (int r = 0; r < cp; ++r) {
    std::vector<double> dqkv(size_t(B) * Tl * W);
    cpu::ring_attention_unpack(dqkv.data(), dq[size_t(r)].data(), dkv[size_t(r)].data(), size_t(B) * Tl, NH, NKV,
                               hs);
    const std::vector<double> want = local_rows(ref_dqkv, W, r);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(dqkv[i], want[i], 1e-12) << "cp " << cp << " rank " << r << " d qkv element " << i;
  }
}

TEST(RingAttention, OneRankIsCausalAttention) { check_ring(1, 2, 2, 3, 70); }
TEST(RingAttention, TwoRanks) { check_ring(2, 2, 2, 3, 71); }
TEST(RingAttention, ThreeRanksGroupedQuery) { check_ring(3, 4, 2, 2, 72); }
TEST(RingAttention, FourRanksMultiQuery) { check_ring(4, 3, 1, 2, 73); }
TEST(RingAttention, ChunksOfOneToken) { check_ring(4, 2, 2, 1, 74); }

// A block no query of this rank may see (every key/value chunk later than both query chunks)
// changes nothing, and a first step with such a block leaves the rows empty (log-sum-exp -inf),
// for the next block to fill.
TEST(RingAttention, InvisibleBlockChangesNothing) {
  const int B = 1, NH = 2, NKV = 1, hs = 4, Tl = 4, W = (NH + 2 * NKV) * hs, KW = 2 * NKV * hs, C = NH * hs;
  const std::vector<double> q = random_vector(size_t(B) * Tl * W, 80), kv = random_vector(size_t(B) * Tl * KW, 81);
  std::vector<double> ws(cpu::ring_attention_workspace(Tl, hs, 4));
  std::vector<double> y(size_t(B) * Tl * C, 5.0), lse(size_t(B) * NH * Tl, 5.0);
  cpu::ring_attention_forward(y.data(), lse.data(), q.data(), kv.data(), B, Tl, NH, NKV, hs, {0, 1}, {2, 3}, false,
                              ws.data(), ws.size());
  for (double v : y) EXPECT_EQ(v, 5.0);
  for (double v : lse) EXPECT_EQ(v, 5.0);
  cpu::ring_attention_forward(y.data(), lse.data(), q.data(), kv.data(), B, Tl, NH, NKV, hs, {0, 1}, {2, 3}, true,
                              ws.data(), ws.size());
  for (double v : y) EXPECT_EQ(v, 0.0);
  for (double v : lse) EXPECT_TRUE(std::isinf(v) && v < 0);
}

}  // namespace
}  // namespace feast
