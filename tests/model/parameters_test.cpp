// The parameter table: names, shapes, flat offsets, decay mask and seeded initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"

#include "model/parameters.h"

namespace feast {
namespace {

ModelConfig small() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 200;
  c.max_seq_len = 32;
  return c;
}

TEST(Parameters, Gpt2TableIsContiguousAndComplete) {
  const ModelConfig c = small();
  const ParamTable t = gpt2_param_table(c);
  EXPECT_EQ(t.specs().size(), 2u + 12u * 2 + 2u);
  size_t expected_offset = 0;
  for (const ParamSpec& s : t.specs()) {
    EXPECT_EQ(s.offset, expected_offset) << s.name;
    expected_offset += s.numel;
    EXPECT_EQ(s.weight_decay, s.shape.size() == 2) << s.name;  // matrices only
  }
  EXPECT_EQ(t.total_numel(), expected_offset);
  // GPT-2 parameter count with the vocabulary padded to 256 (tied head counted once).
  const size_t C = 16, L = 2, Vp = 256, maxT = 32;
  EXPECT_EQ(t.total_numel(), Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(t.at("layers.1.attn.qkv.weight").shape, (std::vector<int64_t>{48, 16}));
  EXPECT_EQ(t.at("layers.1.attn.qkv.weight").split_blocks, 3);
  EXPECT_EQ(t.at("layers.0.mlp.proj.weight").split, TpSplit::kInputCols);
  EXPECT_THROW(t.at("layers.2.ln_1.weight"), std::exception);
}

TEST(Parameters, PaddedVocabulary) {
  ModelConfig c = small();
  EXPECT_EQ(c.padded_vocab(), 256);
  c.vocab_size = 50257;
  EXPECT_EQ(c.padded_vocab(), 50304);
  c.vocab_size = 256;
  EXPECT_EQ(c.padded_vocab(), 256);
}

std::vector<float> init_whole(const ModelConfig& c, uint64_t seed) {
  const ParamTable t = gpt2_param_table(c);
  const LocalTable local(t, StageSpec::whole(c));
  std::vector<float> v(local.total_numel());
  init_local_parameters(local, seed, v.data());
  return v;
}

TEST(Parameters, InitialisationIsSeededAndPadsWithZeros) {
  const ModelConfig c = small();
  const ParamTable t = gpt2_param_table(c);
  const std::vector<float> a = init_whole(c, 42), b = init_whole(c, 42), other = init_whole(c, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  const ParamSpec& wte = t.at("wte.weight");
  for (size_t i = size_t(c.vocab_size) * 16; i < wte.numel; ++i) ASSERT_EQ(a[wte.offset + i], 0.0f);
  EXPECT_EQ(a[t.at("layers.0.ln_1.weight").offset], 1.0f);
  EXPECT_EQ(a[t.at("layers.0.ln_1.bias").offset], 0.0f);
  // Standard deviations: 0.02 for matrices, 0.02 / sqrt(2 L) for residual projections.
  auto std_of = [&](const ParamSpec& s) {
    double sum2 = 0;
    for (size_t i = 0; i < s.numel; ++i) sum2 += double(a[s.offset + i]) * a[s.offset + i];
    return std::sqrt(sum2 / double(s.numel));
  };
  EXPECT_NEAR(std_of(t.at("layers.0.mlp.fc.weight")), 0.02, 0.002);
  EXPECT_NEAR(std_of(t.at("layers.0.mlp.proj.weight")), 0.01, 0.001);
}

// Tensor-parallel slices: over the tp ranks every logical element appears exactly once (or on
// every rank for replicated tensors), and a slice's initial values are the whole model's.
TEST(Parameters, TensorParallelSlicesTileTheLogicalTensors) {
  ModelConfig c = small();
  c.vocab_size = 300;  // pads to 384: three 128-row blocks, so tp = 2 splits mid-block
  const ParamTable t = gpt2_param_table(c);
  const std::vector<float> whole = init_whole(c, 9);
  for (int tp : {2, 4}) {
    std::map<std::string, std::vector<int>> seen;
    for (int r = 0; r < tp; ++r) {
      StageSpec spec = StageSpec::whole(c);
      spec.tp = tp;
      spec.tp_rank = r;
      const LocalTable local(t, spec);
      std::vector<float> mine(local.total_numel());
      init_local_parameters(local, 9, mine.data());
      for (const LocalParam& p : local.params()) {
        auto& count = seen[p.spec->name];
        count.resize(p.spec->numel);
        for (size_t i = 0; i < p.numel; ++i) {
          const int64_t li = p.logical_index(int64_t(i));
          ASSERT_GE(li, 0);
          ASSERT_LT(size_t(li), p.spec->numel) << p.spec->name;
          ++count[size_t(li)];
          ASSERT_EQ(mine[p.offset + i], whole[p.spec->offset + size_t(li)]) << p.spec->name << " element " << i;
        }
      }
    }
    for (const ParamSpec& s : t.specs()) {
      const int expected = s.split == TpSplit::kReplicated ? tp : 1;
      for (int n : seen[s.name]) ASSERT_EQ(n, expected) << s.name << " at tp " << tp;
    }
  }
}

TEST(Parameters, QkvSliceHoldsWholeHeadsOfQKAndV) {
  ModelConfig c = small();  // C = 16, 2 heads of 8
  const ParamTable t = gpt2_param_table(c);
  StageSpec spec = StageSpec::whole(c);
  spec.tp = 2;
  spec.tp_rank = 1;
  const LocalParam& qkv = LocalTable(t, spec).at("layers.0.attn.qkv.bias");
  ASSERT_EQ(qkv.numel, 24u);
  // Rank 1 holds the second head of q (8..15), of k (24..31) and of v (40..47).
  EXPECT_EQ(qkv.logical_index(0), 8);
  EXPECT_EQ(qkv.logical_index(8), 24);
  EXPECT_EQ(qkv.logical_index(23), 47);
}

TEST(Parameters, TensorParallelDegreeMustDivideTheVocabularyRows) {
  ModelConfig c = small();
  StageSpec spec = StageSpec::whole(c);
  spec.tp = 3;
  EXPECT_THROW(LocalTable(gpt2_param_table(c), spec), ConfigError);
}

TEST(Parameters, StagesHoldTheirLayersAndTheTiedEmbedding) {
  ModelConfig c = small();
  const ParamTable t = gpt2_param_table(c);
  const LocalTable first(t, {0, 1, true, false, 0, 1});
  const LocalTable last(t, {1, 1, false, true, 0, 1});
  EXPECT_TRUE(first.contains("wte.weight"));
  EXPECT_TRUE(first.contains("wpe.weight"));
  EXPECT_FALSE(first.contains("ln_f.weight"));
  EXPECT_FALSE(first.contains("layers.1.ln_1.weight"));
  EXPECT_TRUE(last.contains("wte.weight"));  // the tied head's copy
  EXPECT_FALSE(last.contains("wpe.weight"));
  EXPECT_TRUE(last.contains("ln_f.bias"));
  // The copy is counted once in the gradient norm: on the first stage.
  EXPECT_TRUE(first.at("wte.weight").counts_in_norm);
  EXPECT_FALSE(last.at("wte.weight").counts_in_norm);
}

}  // namespace
}  // namespace feast
