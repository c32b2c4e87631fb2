// The parameter table: names, shapes, flat offsets, placement and ties as data, tensor-parallel
// slices (unequal fused blocks too) and their logical rectangles, the decay mask and seeded
// initialisation, for both families.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/architecture.h"
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

// A small Llama: 4 query heads of 4 channels sharing 2 key/value heads, SwiGLU width 24.
ModelConfig small_llama() {
  ModelConfig c = small();
  c.arch = "llama";
  c.n_head = 4;
  c.n_kv_head = 2;
  c.intermediate_size = 24;
  return c;
}

TEST(Parameters, Gpt2TableIsContiguousAndComplete) {
  const ModelConfig c = small();
  const ParamTable t = decoder_param_table(c);
  EXPECT_EQ(t.specs().size(), 3u + 12u * 2 + 2u);  // wte, the tied lm_head, wpe; layers; ln_f
  size_t expected_offset = 0;
  for (const ParamSpec& s : t.specs()) {
    if (s.tied_to >= 0) continue;
    EXPECT_EQ(s.offset, expected_offset) << s.name;
    expected_offset += s.numel;
    EXPECT_EQ(s.weight_decay, s.shape.size() == 2) << s.name;  // matrices only
  }
  EXPECT_EQ(t.total_numel(), expected_offset);
  // GPT-2 parameter count with the vocabulary padded to 256 (tied head counted once).
  const size_t C = 16, L = 2, Vp = 256, maxT = 32;
  EXPECT_EQ(t.total_numel(), Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(t.at("layers.1.attn.qkv.weight").shape, (std::vector<int64_t>{48, 16}));
  EXPECT_EQ(t.at("layers.1.attn.qkv.weight").blocks, (std::vector<int64_t>{16, 16, 16}));
  EXPECT_EQ(t.at("layers.0.mlp.proj.weight").split, TpSplit::kInputCols);
  const ParamSpec& head = t.at("lm_head.weight");
  EXPECT_EQ(head.tied_to, 0);
  EXPECT_EQ(t.specs()[0].name, "wte.weight");
  EXPECT_EQ(head.placement.kind, Placement::Kind::kLastStage);
  EXPECT_THROW(t.at("layers.2.ln_1.weight"), std::exception);
}

TEST(Parameters, LlamaTableHasGroupedQkvSwiGluAndAnUntiedHead) {
  const ModelConfig c = small_llama();
  const ParamTable t = decoder_param_table(c);
  const int64_t C = 16, hs = 4, I = 24, Vp = 256, L = 2;
  EXPECT_EQ(t.at("layers.0.attn.qkv.weight").shape, (std::vector<int64_t>{(4 + 2 * 2) * hs, C}));
  EXPECT_EQ(t.at("layers.0.attn.qkv.weight").blocks, (std::vector<int64_t>{16, 8, 8}));
  EXPECT_EQ(t.at("layers.0.mlp.fc.weight").shape, (std::vector<int64_t>{2 * I, C}));
  EXPECT_EQ(t.at("layers.0.mlp.fc.weight").blocks, (std::vector<int64_t>{I, I}));
  EXPECT_EQ(t.at("layers.0.mlp.proj.weight").shape, (std::vector<int64_t>{C, I}));
  EXPECT_EQ(t.at("lm_head.weight").tied_to, -1);
  for (const char* absent : {"wpe.weight", "layers.0.ln_1.bias", "layers.0.attn.qkv.bias", "layers.0.attn.proj.bias",
                             "layers.0.mlp.fc.bias", "ln_f.bias"})
    EXPECT_THROW(t.at(absent), Error) << absent;
  // wte and lm_head, per layer qkv + proj + fc + proj + two norms, and ln_f.
  EXPECT_EQ(t.total_numel(), size_t(2 * Vp * C + L * ((16 + 16) * C + C * 16 + 2 * I * C + C * I + 2 * C) + C));
  ModelConfig qwen = c;
  qwen.qkv_bias = true;
  qwen.tie_embeddings = true;
  const ParamTable q = decoder_param_table(qwen);
  EXPECT_EQ(q.at("layers.1.attn.qkv.bias").blocks, (std::vector<int64_t>{16, 8, 8}));
  EXPECT_EQ(q.at("lm_head.weight").tied_to, 0);
}

TEST(Parameters, PaddedVocabulary) {
  ModelConfig c = small();
  EXPECT_EQ(c.padded_vocab(), 256);
  c.vocab_size = 50257;
  EXPECT_EQ(c.padded_vocab(), 50304);
  c.vocab_size = 256;
  EXPECT_EQ(c.padded_vocab(), 256);
}

std::vector<float> init_stage(const LocalTable& local, uint64_t seed) {
  std::vector<float> v(local.total_numel());
  for (const LocalParam& p : local.params()) init_local_parameter(p, seed, v.data() + p.offset);
  return v;
}

std::vector<float> init_whole(const ModelConfig& c, const ParamTable& t, uint64_t seed) {
  return init_stage(LocalTable(t, StageSpec::whole(c)), seed);
}

TEST(Parameters, InitialisationIsSeededAndPadsWithZeros) {
  const ModelConfig c = small();
  const ParamTable t = decoder_param_table(c);
  const std::vector<float> a = init_whole(c, t, 42), b = init_whole(c, t, 42), other = init_whole(c, t, 43);
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
void expect_slices_tile(const ModelConfig& c) {
  const ParamTable t = decoder_param_table(c);
  const LocalTable whole_table(t, StageSpec::whole(c));
  const std::vector<float> whole = init_stage(whole_table, 9);
  for (int tp : {2, 4}) {
    if (c.kv_heads() % tp != 0) continue;
    std::map<std::string, std::vector<int>> seen;
    for (int r = 0; r < tp; ++r) {
      StageSpec spec = StageSpec::whole(c);
      spec.tp = tp;
      spec.tp_rank = r;
      const LocalTable local(t, spec);
      const std::vector<float> mine = init_stage(local, 9);
      for (const LocalParam& p : local.params()) {
        auto& count = seen[p.spec->name];
        count.resize(p.spec->numel);
        const size_t whole_offset = whole_table.at(p.spec->name).offset;
        for (size_t i = 0; i < p.numel; ++i) {
          const int64_t li = p.logical_index(int64_t(i));
          ASSERT_GE(li, 0);
          ASSERT_LT(size_t(li), p.spec->numel) << p.spec->name;
          ++count[size_t(li)];
          ASSERT_EQ(mine[p.offset + i], whole[whole_offset + size_t(li)]) << p.spec->name << " element " << i;
        }
      }
    }
    for (const ParamSpec& s : t.specs()) {
      if (s.tied_to >= 0) continue;
      const int expected = s.split == TpSplit::kReplicated ? tp : 1;
      for (int n : seen[s.name]) ASSERT_EQ(n, expected) << s.name << " at tp " << tp;
    }
  }
}

TEST(Parameters, TensorParallelSlicesTileTheLogicalTensors) {
  ModelConfig c = small();
  c.vocab_size = 300;  // pads to 384: three 128-row blocks, so tp = 2 splits mid-block
  expect_slices_tile(c);
  ModelConfig llama = small_llama();
  llama.vocab_size = 300;
  llama.n_kv_head = 4;  // tp 4 needs 4 key/value heads
  expect_slices_tile(llama);
  llama.n_kv_head = 2;
  expect_slices_tile(llama);  // tp 2 only
}

TEST(Parameters, QkvSliceHoldsWholeHeadsOfQKAndV) {
  ModelConfig c = small();  // C = 16, 2 heads of 8
  StageSpec spec = StageSpec::whole(c);
  spec.tp = 2;
  spec.tp_rank = 1;
  const ParamTable t = decoder_param_table(c);
  const LocalParam& qkv = LocalTable(t, spec).at("layers.0.attn.qkv.bias");
  ASSERT_EQ(qkv.numel, 24u);
  // Rank 1 holds the second head of q (8..15), of k (24..31) and of v (40..47).
  EXPECT_EQ(qkv.logical_index(0), 8);
  EXPECT_EQ(qkv.logical_index(8), 24);
  EXPECT_EQ(qkv.logical_index(23), 47);

  // Grouped-query: 4 q heads and 2 k/v heads of 4 channels; rank 1 of 2 holds q heads 2 and 3
  // (rows 8..15), k head 1 (rows 20..23) and v head 1 (rows 28..31).
  ModelConfig l = small_llama();
  l.qkv_bias = true;
  const ParamTable lt = decoder_param_table(l);
  const LocalParam& gq = LocalTable(lt, spec).at("layers.0.attn.qkv.bias");
  ASSERT_EQ(gq.numel, 16u);
  EXPECT_EQ(gq.logical_index(0), 8);
  EXPECT_EQ(gq.logical_index(7), 15);
  EXPECT_EQ(gq.logical_index(8), 20);
  EXPECT_EQ(gq.logical_index(12), 28);
  EXPECT_EQ(gq.logical_index(15), 31);
}

TEST(Parameters, TensorParallelDegreeMustDivideEveryBlock) {
  ModelConfig c = small();
  StageSpec spec = StageSpec::whole(c);
  spec.tp = 3;
  EXPECT_THROW(LocalTable(decoder_param_table(c), spec), ConfigError);
  ModelConfig l = small_llama();  // one key/value head of 4 rows cannot split 8 ways
  l.n_kv_head = 1;
  spec.tp = 8;
  try {
    LocalTable(decoder_param_table(l), spec);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("a block of layers.0.attn.qkv.weight"), std::string::npos) << e.what();
  }
}

TEST(Parameters, StagesHoldTheirLayersAndTheTiedEmbedding) {
  ModelConfig c = small();
  const ParamTable t = decoder_param_table(c);
  const LocalTable first(t, {{{0, 1}}, true, false, 0, 1});
  const LocalTable last(t, {{{1, 1}}, false, true, 0, 1});
  EXPECT_TRUE(first.contains("wte.weight"));
  EXPECT_TRUE(first.contains("wpe.weight"));
  EXPECT_FALSE(first.contains("ln_f.weight"));
  EXPECT_FALSE(first.contains("lm_head.weight"));
  EXPECT_FALSE(first.contains("layers.1.ln_1.weight"));
  EXPECT_FALSE(last.contains("wte.weight"));
  EXPECT_FALSE(last.contains("wpe.weight"));
  EXPECT_TRUE(last.contains("ln_f.bias"));
  // The last stage stores a copy of wte as its head, first in its buffer; both ends are tied
  // across stages and the copy is counted once in the gradient norm: on the first stage.
  const LocalParam& copy = last.at("lm_head.weight");
  EXPECT_TRUE(copy.is_tied_copy());
  EXPECT_EQ(copy.logical->name, "wte.weight");
  EXPECT_EQ(copy.offset, 0u);
  EXPECT_TRUE(copy.tied_across_stages);
  EXPECT_TRUE(first.at("wte.weight").tied_across_stages);
  EXPECT_TRUE(first.at("wte.weight").counts_in_norm);
  EXPECT_FALSE(copy.counts_in_norm);
  // Its initial values are the embedding's.
  const std::vector<float> a = init_stage(first, 5), b = init_stage(last, 5);
  for (size_t i = 0; i < copy.numel; ++i) ASSERT_EQ(a[first.at("wte.weight").offset + i], b[copy.offset + i]);
  // On one stage the head is the embedding itself: no copy, nothing tied across stages.
  const LocalTable whole(t, StageSpec::whole(c));
  EXPECT_EQ(&whole.at("lm_head.weight"), &whole.at("wte.weight"));
  EXPECT_FALSE(whole.at("wte.weight").tied_across_stages);
  EXPECT_EQ(whole.total_numel(), t.total_numel());
}

TEST(Parameters, AnUntiedHeadIsItsOwnTensor) {
  const ModelConfig c = small_llama();
  const ParamTable t = decoder_param_table(c);
  const LocalTable first(t, {{{0, 1}}, true, false, 0, 1});
  const LocalTable last(t, {{{1, 1}}, false, true, 0, 1});
  EXPECT_FALSE(first.contains("lm_head.weight"));
  const LocalParam& head = last.at("lm_head.weight");
  EXPECT_FALSE(head.is_tied_copy());
  EXPECT_FALSE(head.tied_across_stages);
  EXPECT_TRUE(head.counts_in_norm);
  EXPECT_FALSE(first.at("wte.weight").tied_across_stages);
}

TEST(Parameters, PlacementIsDataNotNames) {
  // Names that look like other tensors' do not move them: only the placement does.
  auto spec = [](std::string name, Placement where) {
    ParamSpec s;
    s.name = std::move(name);
    s.shape = {3};
    s.placement = where;
    return s;
  };
  const ParamTable t({spec("layers.0.looks_like_layer_0", Placement::last_stage()),
                      spec("wte.weight", Placement::in_layer(1)), spec("anything", Placement::first_stage())});
  const LocalTable first(t, {{{0, 1}}, true, false, 0, 1}), last(t, {{{1, 1}}, false, true, 0, 1});
  EXPECT_TRUE(first.contains("anything"));
  EXPECT_FALSE(first.contains("layers.0.looks_like_layer_0"));
  EXPECT_FALSE(first.contains("wte.weight"));
  EXPECT_TRUE(last.contains("layers.0.looks_like_layer_0"));
  EXPECT_TRUE(last.contains("wte.weight"));
}

// Every local element [begin, end) appears once in the slices, at the logical index
// logical_index() gives it, and the slices come in local order.
void expect_slices_match(const LocalParam& p, size_t begin, size_t end) {
  const std::vector<LogicalSlice> slices = p.logical_slices(begin, end);
  const int64_t cols = p.logical->shape.size() > 1 ? p.logical->shape[1] : 1;
  size_t next = begin;
  for (const LogicalSlice& s : slices) {
    ASSERT_EQ(s.local_offset, next) << p.spec->name;
    const int64_t rows = s.count[0], width = s.count.size() > 1 ? s.count[1] : 1;
    const int64_t row0 = s.start[0], col0 = s.start.size() > 1 ? s.start[1] : 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < width; ++k) {
        const size_t local = s.local_offset + size_t(r * width + k);
        ASSERT_EQ(p.logical_index(int64_t(local)), (row0 + r) * cols + col0 + k)
            << p.spec->name << " local " << local << " slice at " << s.local_offset;
      }
    next += s.numel();
  }
  ASSERT_EQ(next, end) << p.spec->name;
}

TEST(Parameters, ExpertParallelRanksHoldTheirOwnExpertsAndCountTheDenseTensorsOnce) {
  ModelConfig c = small_llama();
  c.moe.n_experts = 8;
  c.moe.top_k = 2;
  c.moe.every = 2;  // block 1 of the 2
  const ParamTable logical = decoder_param_table(c);
  int expert_specs = 0;
  for (const ParamSpec& s : logical.specs())
    if (s.name.find(".experts.") != std::string::npos) {
      ++expert_specs;
      EXPECT_EQ(s.experts, 8) << s.name;
      EXPECT_EQ(s.name.find(".experts." + std::to_string(s.expert) + "."), s.name.find(".experts.")) << s.name;
    } else {
      EXPECT_EQ(s.expert, -1) << s.name;
    }
  EXPECT_EQ(expert_specs, 2 * 8);  // fc and proj of 8 experts
  const LocalTable whole(logical, StageSpec::whole(c));
  size_t dense = 0, experts = 0;
  for (const LocalParam& p : whole.params()) (p.spec->expert >= 0 ? experts : dense) += p.numel;
  for (int ep : {2, 4}) {
    size_t held_experts = 0;
    for (int r = 0; r < ep; ++r) {
      StageSpec spec = StageSpec::whole(c);
      spec.ep = ep;
      spec.ep_rank = r;
      const LocalTable table(logical, spec);
      EXPECT_EQ(table.total_numel(), dense + experts / size_t(ep)) << "ep " << ep << " rank " << r;
      for (const LocalParam& p : table.params()) {
        if (p.spec->expert < 0) {
          EXPECT_EQ(p.counts_in_norm, r == 0) << p.spec->name << " at ep rank " << r;
          continue;
        }
        EXPECT_EQ(p.spec->expert / (8 / ep), r) << p.spec->name << " at ep rank " << r;
        EXPECT_TRUE(p.counts_in_norm) << p.spec->name;
        held_experts += p.numel;
      }
      EXPECT_FALSE(table.contains("layers.1.mlp.experts." + std::to_string(r == 0 ? 7 : 0) + ".fc.weight"));
    }
    EXPECT_EQ(held_experts, experts) << "the ep ranks together hold every expert once, at ep " << ep;
  }
}

TEST(Parameters, LogicalSlicesAreRectanglesOfTheLogicalTensor) {
  ModelConfig c = small_llama();
  c.vocab_size = 300;
  c.qkv_bias = true;
  const ParamTable t = decoder_param_table(c);
  std::mt19937 gen(3);
  for (int tp : {1, 2}) {
    for (int r = 0; r < tp; ++r) {
      StageSpec spec = StageSpec::whole(c);
      spec.tp = tp;
      spec.tp_rank = r;
      const LocalTable local(t, spec);
      for (const LocalParam& p : local.params()) {
        expect_slices_match(p, 0, p.numel);
        for (int k = 0; k < 5; ++k) {  // arbitrary sub-ranges, as a ZeRO shard cuts them
          std::uniform_int_distribution<size_t> pick(0, p.numel);
          size_t a = pick(gen), b = pick(gen);
          if (a > b) std::swap(a, b);
          expect_slices_match(p, a, b);
        }
      }
      // Whole slices: a column-parallel weight is one rectangle per block; a row-parallel
      // weight one rectangle of its columns.
      if (tp == 2) {
        EXPECT_EQ(local.at("layers.0.attn.qkv.weight").logical_slices().size(), 3u);
        const std::vector<LogicalSlice> proj = local.at("layers.0.attn.proj.weight").logical_slices();
        ASSERT_EQ(proj.size(), 1u);
        EXPECT_EQ(proj[0].start, (std::vector<int64_t>{0, 8 * r}));
        EXPECT_EQ(proj[0].count, (std::vector<int64_t>{16, 8}));
      }
    }
  }
}

}  // namespace
}  // namespace feast
