// The parameter table: names, shapes, flat offsets, decay mask and seeded initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

TEST(Parameters, InitialisationIsSeededAndPadsWithZeros) {
  const ModelConfig c = small();
  const ParamTable t = gpt2_param_table(c);
  std::vector<float> a(t.total_numel()), b(t.total_numel()), other(t.total_numel());
  init_parameters(t, 42, a.data());
  init_parameters(t, 42, b.data());
  init_parameters(t, 43, other.data());
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

}  // namespace
}  // namespace feast
