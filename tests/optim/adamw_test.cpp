// AdamW against a hand-written float64 reference of PyTorch's update, the decay mask,
// clipping, sharding, master weights and the per-tensor view of its state.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "model/architecture.h"
#include "backend/cpu/adamw.h"
#include "backend/cpu/cpu_backend.h"
#include "optim/adamw.h"

namespace feast {
namespace {

// A whole GPT-2 of the given shape on one rank: its logical table and the rank's flat layout.
struct WholeModel {
  WholeModel(int layers, int heads, int embd, int vocab, int seq)
      : logical(decoder_param_table(config(layers, heads, embd, vocab, seq))),
        table(logical, StageSpec::whole(config(layers, heads, embd, vocab, seq))) {}
  static ModelConfig config(int layers, int heads, int embd, int vocab, int seq) {
    ModelConfig c;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_embd = embd;
    c.vocab_size = vocab;
    c.max_seq_len = seq;
    return c;
  }
  ParamTable logical;
  LocalTable table;  // points into `logical`
};

CpuBackend backend;

TEST(AdamW, MatchesReferenceUpdateAndDecaysMatricesOnly) {
  const WholeModel model(1, 1, 4, 3, 2);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> p(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = 0.5f - 0.001f * float(i % 997);
    g[i] = 0.01f * float(int(i % 13) - 6);
  }
  AdamWConfig oc;
  oc.grad_clip = 0;  // no clipping here
  AdamW opt(backend, t, host_view(p.data(), n), 0, n, oc);
  EXPECT_FALSE(opt.separate_master());  // float32 parameters are the master weights
  std::vector<double> ref_p(p.begin(), p.end()), m(n, 0.0), v(n, 0.0);
  for (int step = 1; step <= 3; ++step) {
    const double lr = 0.01 * step;
    opt.step(host_view(g.data(), n), step, lr, 1.0);
    for (const LocalParam& s : t.params()) {
      const double wd = s.spec->weight_decay ? oc.weight_decay : 0.0;
      for (size_t i = s.offset; i < s.offset + s.numel; ++i) {
        m[i] = oc.beta1 * m[i] + (1 - oc.beta1) * g[i];
        v[i] = oc.beta2 * v[i] + (1 - oc.beta2) * double(g[i]) * g[i];
        ref_p[i] *= 1 - lr * wd;
        const double mhat = m[i] / (1 - std::pow(oc.beta1, step));
        const double vhat = v[i] / (1 - std::pow(oc.beta2, step));
        ref_p[i] -= lr * mhat / (std::sqrt(vhat) + oc.eps);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], ref_p[i], 1e-6) << "element " << i;
}

TEST(AdamW, ClipsToTheMaxNorm) {
  const WholeModel model(1, 1, 4, 3, 2);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> g(n, 1.0f), p1(n, 0.0f), p2(n, 0.0f);
  AdamWConfig oc;
  oc.weight_decay = 0;
  oc.beta1 = 0;  // the first update is then -lr * g / (|g| + eps): scale-free...
  oc.beta2 = 0;
  oc.eps = 1.0;  // ...unless eps is large, so the clipped gradient shows in the update
  oc.grad_clip = 2.0;
  const double norm = std::sqrt(counted_sum_of_squares(backend, t, host_view(g.data(), n), 0, n));
  EXPECT_NEAR(norm, std::sqrt(double(n)), 1e-9);
  AdamW clipped(backend, t, host_view(p1.data(), n), 0, n, oc);
  clipped.step(host_view(g.data(), n), 1, 1.0, norm);
  const double gc = 2.0 / (std::sqrt(double(n)) + 1e-6);  // clipped gradient element
  EXPECT_NEAR(p1[0], -gc / (gc + 1.0), 1e-6);
  oc.grad_clip = 0;
  AdamW unclipped(backend, t, host_view(p2.data(), n), 0, n, oc);
  unclipped.step(host_view(g.data(), n), 1, 1.0, norm);
  EXPECT_NEAR(p2[0], -0.5, 1e-6);
}

// A sharded optimizer (ZeRO) updating [begin, end) gives the same result as the whole one.
TEST(AdamW, ShardsUpdateLikeTheWhole) {
  const WholeModel model(2, 2, 8, 50, 4);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> g(n), whole(n), sharded(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = 0.001f * float(int(i % 101) - 50);
    whole[i] = sharded[i] = 0.01f * float(i % 17);
  }
  AdamWConfig oc;
  AdamW all(backend, t, host_view(whole.data(), n), 0, n, oc);
  const size_t cuts[] = {0, n / 3 + 5, 2 * n / 3 + 1, n};
  std::vector<std::unique_ptr<AdamW>> parts;
  for (int s = 0; s < 3; ++s)
    parts.push_back(std::make_unique<AdamW>(backend, t, host_view(sharded.data(), n), cuts[s], cuts[s + 1], oc));
  for (int step = 1; step <= 2; ++step) {
    all.step(host_view(g.data(), n), step, 0.1, 5.0);
    for (auto& a : parts) a->step(host_view(g.data() + a->begin(), a->end() - a->begin()), step, 0.1, 5.0);
  }
  EXPECT_EQ(whole, sharded);
}

// A separate float32 master copy (what bfloat16 parameters need) updates exactly as updating the
// parameters in place, and refreshes the parameters after each step.
TEST(AdamW, SeparateMasterWeightsGiveTheSameUpdate) {
  const WholeModel model(1, 2, 8, 20, 4);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> g(n), shared(n), separate(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = 0.003f * float(int(i % 31) - 15);
    shared[i] = separate[i] = 0.02f * float(i % 23) - 0.2f;
  }
  AdamWConfig oc;
  AdamW a(backend, t, host_view(shared.data(), n), 0, n, oc);
  AdamW b(backend, t, host_view(separate.data(), n), 0, n, oc, MasterWeights::kSeparate);
  EXPECT_TRUE(b.separate_master());
  EXPECT_EQ(b.state_bytes(), a.state_bytes() + n * sizeof(float));
  for (int step = 1; step <= 3; ++step) {
    a.step(host_view(g.data(), n), step, 0.05, 2.0);
    b.step(host_view(g.data(), n), step, 0.05, 2.0);
    ASSERT_EQ(shared, separate) << "step " << step;
  }
}

// Offloaded: the state in host memory, the gradients copied there, the weights copied back,
// chunk by chunk (several here, which the runs of one weight decay cross); the same bits as the
// optimizer that keeps its state with the parameters, and none of its state counted on the
// device.
TEST(AdamW, OffloadedStateGivesTheSameUpdate) {
  const WholeModel model(2, 2, 32, 50, 8);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel(), begin = n / 5, end = n - n / 7;  // a shard, as under ZeRO
  ASSERT_LE(3 * offload_chunk_elements(end - begin), end - begin) << "the range should make several chunks";
  std::vector<float> g(end - begin), kept(n), offloaded(n);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.003f * float(int(i % 31) - 15);
  for (size_t i = 0; i < n; ++i) kept[i] = offloaded[i] = 0.02f * float(i % 23) - 0.2f;
  AdamWConfig oc;
  CpuBackend host;
  AdamW a(backend, t, host_view(kept.data(), n), begin, end, oc);
  AdamW b(backend, t, host_view(offloaded.data(), n), begin, end, oc, MasterWeights::kShareWhenFloat32, &host);
  EXPECT_TRUE(b.offloaded());
  EXPECT_TRUE(b.separate_master());
  EXPECT_EQ(b.state_bytes(), 0u);
  EXPECT_EQ(b.offloaded_bytes(), 4 * (end - begin) * sizeof(float));  // master, moments, gradients
  EXPECT_EQ(a.offloaded_bytes(), 0u);
  for (int step = 1; step <= 3; ++step) {
    a.step(host_view(g.data(), g.size()), step, 0.05, 2.0);
    b.step(host_view(g.data(), g.size()), step, 0.05, 2.0);
    ASSERT_EQ(kept, offloaded) << "step " << step;
  }
  for (const char* name : {"layers.0.attn.qkv.weight", "ln_f.weight"}) {
    const auto sa = a.state_of(name), sb = b.state_of(name);
    ASSERT_EQ(sa.has_value(), sb.has_value()) << name;
    if (!sa) continue;
    for (auto [x, y] : {std::pair{sa->exp_avg, sb->exp_avg}, std::pair{sa->exp_avg_sq, sb->exp_avg_sq},
                        std::pair{sa->master, sb->master}}) {
      ASSERT_EQ(x.numel, y.numel) << name;
      EXPECT_EQ(0, std::memcmp(x.data, y.data, x.bytes())) << name;
      EXPECT_NE(x.data, y.data) << name << ": the offloaded state is a copy of its own";
    }
  }
}

// The gradients' copies may start before the step (while the norm is reduced); a step that is
// then skipped leaves nothing behind, and a step given other gradients than those started uses
// its own.
TEST(AdamW, OffloadedGradientsStartedEarlyOrForAnotherBuffer) {
  const WholeModel model(2, 2, 32, 50, 8);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> g(n), other(n, 7.0f), kept(n), offloaded(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = 0.002f * float(int(i % 37) - 18);
    kept[i] = offloaded[i] = 0.01f * float(i % 19) - 0.1f;
  }
  CpuBackend host;
  AdamW a(backend, t, host_view(kept.data(), n), 0, n, AdamWConfig{});
  AdamW b(backend, t, host_view(offloaded.data(), n), 0, n, AdamWConfig{}, MasterWeights::kShareWhenFloat32, &host);
  b.start_gradient_copies(host_view(other.data(), n));  // a step skipped after its copies began
  b.start_gradient_copies(host_view(g.data(), n));      // the next step's, started early
  a.step(host_view(g.data(), n), 1, 0.05, 1.0);
  b.step(host_view(g.data(), n), 1, 0.05, 1.0);
  ASSERT_EQ(kept, offloaded);
  b.start_gradient_copies(host_view(other.data(), n));  // started for one buffer, stepped with another
  a.step(host_view(g.data(), n), 2, 0.05, 1.0);
  b.step(host_view(g.data(), n), 2, 0.05, 1.0);
  ASSERT_EQ(kept, offloaded);
  EXPECT_GE(b.offload_times().update, 0.0);
}

TEST(AdamW, StateIsReachablePerTensor) {
  const WholeModel model(2, 2, 8, 50, 4);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> g(n), p(n, 0.5f);
  for (size_t i = 0; i < n; ++i) g[i] = 0.01f * float(int(i % 7) - 3);
  AdamWConfig oc;
  oc.grad_clip = 0;
  const size_t cuts[] = {0, n / 3 + 5, 2 * n / 3 + 1, n};
  std::vector<std::unique_ptr<AdamW>> shards;
  for (int s = 0; s < 3; ++s) {
    shards.push_back(std::make_unique<AdamW>(backend, t, host_view(p.data(), n), cuts[s], cuts[s + 1], oc));
    shards.back()->step(host_view(g.data() + cuts[s], cuts[s + 1] - cuts[s]), 1, 0.01, 1.0);
  }
  // Over the shards every element of every tensor appears once, with exp_avg = (1 - beta1) g
  // and the master weight being the parameter.
  for (const LocalParam& lp : t.params()) {
    size_t covered = 0;
    for (const auto& opt : shards) {
      const auto st = opt->state_of(lp.spec->name);
      if (!st) continue;
      EXPECT_EQ(st->param, &lp);
      for (size_t i = st->local_begin; i < st->local_end; ++i) {
        const size_t k = i - st->local_begin;
        ASSERT_FLOAT_EQ(st->exp_avg.as<float>()[k], float(1 - oc.beta1) * g[lp.offset + i]) << lp.spec->name;
        ASSERT_EQ(st->master.as<float>()[k], p[lp.offset + i]);
      }
      covered += st->local_end - st->local_begin;
    }
    EXPECT_EQ(covered, lp.numel) << lp.spec->name;
  }
}

TEST(AdamW, SumOfSquaresIsExactForSmallIntegers) {
  std::vector<float> x(300000);
  double expected = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = float(i % 7);
    expected += double(i % 7) * double(i % 7);
  }
  EXPECT_EQ(cpu::sum_of_squares(x.data(), x.size()), expected);
}

}  // namespace
}  // namespace feast
