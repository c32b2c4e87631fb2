// Hugging Face import and export under mpirun (one rank, and tp2 pp2 on four), against the
// reference numbers transformers computed for the tiny models in tests/fixtures/hf (made by
// tests/fixtures/hf/make_hf_fixtures.py):
//  - import: the validation loss of the reference tokens within 1e-5 relative and the
//    last-position logits within 1e-4, for GPT-2 (tied, Conv1D, fused c_attn), GPT-2 as the Hub
//    stores it (no `transformer.` prefix, attn.bias buffers), Llama (grouped-query heads, sharded
//    safetensors), a bf16 Llama-3 (llama3 rope scaling) and an fp16 Qwen2 (q/k/v biases, one
//    key/value head, tied head, linear rope scaling written as "type");
//  - fine-tuning: 5 AdamW steps from the imported weights follow transformers + torch.optim.AdamW
//    (decay on every matrix, none on norms and biases, clipping at 1) within 1e-4 relative;
//  - generation: greedy decoding with the key/value cache from the imported weights gives
//    transformers' generate() tokens, token for token;
//  - export then re-import: the exported tensors equal the original files' values, a bf16 export
//    of the bf16 model is the same bytes, and re-importing the export gives bit-identical
//    parameters;
//  - LoRA against PEFT (tests/fixtures/hf/lora), and QLoRA against the numpy reference of
//    bitsandbytes' NF4 (tests/fixtures/hf/qlora): the quantizer bit for bit, the loss over the
//    dequantized base, 5 steps against PEFT over that base.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/model/fixture.h"
#include "tests/support/mpi_test_support.h"
#include "checkpoint/checkpoint_file.h"
#include "backend/nf4.h"
#include "interop/hf/hf_weights.h"
#include "interop/hf/safetensors_file.h"
#include "interop/hf/safetensors_model.h"
#include "interop/hf/safetensors_writer.h"
#include "core/log.h"
#include "data/shard.h"
#include "model/architecture.h"
#include "model/decoder_stage.h"
#include "model/kv_cache_decoder.h"
#include "model/token_sampling.h"
#include "comm/mpi_world.h"
#include "tests/support/run_verb.h"
#include "tests/interop/hf/hf_run_support.h"
#include "train/training_run.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

using testing::imported_run;
using testing::relative;
using testing::shared_dir;
using testing::world_rank;

const std::string kFixtures = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf";

const std::map<std::string, testing::FixtureArray>& reference() {
  static const auto r = testing::read_fixture(kFixtures + "/reference.bin");
  return r;
}
const testing::FixtureArray& ref(const std::string& model, const std::string& name) {
  return reference().at(model + "." + name);
}

using testing::world_size;


// tp2 pp2 on four ranks, or pp2 dp2 for a model whose single key/value head tensor parallelism
// cannot split (Qwen2's multi-query attention); one rank otherwise. Two sequences per step.
std::vector<std::string> layout_overrides(const std::string& init_from) {
  const bool four = world_size() == 4;
  const int kv_heads = parse_config("", "hf_mpi_test", {"model.init_from=\"" + init_from + "\""}).model.kv_heads();
  const int tp = four && kv_heads % 2 == 0 ? 2 : 1;
  return {"parallel.tp=" + std::to_string(tp), four ? "parallel.pp=2" : "parallel.pp=1",
          "parallel.micro_batch_size=1", "training.batch_size=2", "training.seq_len=16", "training.threads=1"};
}

Config config_for(const std::string& init_from, std::vector<std::string> overrides) {
  overrides.push_back("model.init_from=\"" + init_from + "\"");
  for (const std::string& o : layout_overrides(init_from)) overrides.push_back(o);
  return parse_config("", "hf_mpi_test", overrides);
}

// Windows (rows of T + 1 tokens) as a validation split: one shard per window, so that
// validation window k is row k.
std::string val_split_of(const std::string& split_name, const testing::FixtureArray& t) {
  const std::string dir = shared_dir("val_" + split_name);
  if (world_rank() == 0) {
    const int64_t rows = t.shape[0], len = t.shape[1];
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int32_t> ids(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) ids[size_t(i)] = int32_t(t.data[size_t(r * len + i)]);
      char name[64];
      std::snprintf(name, sizeof name, "/val_%03lld.bin", static_cast<long long>(r));
      write_shard(dir + name, ids, TokenWidth::u16);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir + "/val_*.bin";
}

// The reference tokens as a validation split.
std::string reference_val_split(const std::string& model) { return val_split_of(model, ref(model, "tokens")); }


// The fixtures' 5 fine-tuning steps (make_hf_fixtures.py's FT_* and make_lora_fixtures.py's):
// AdamW at a constant 1e-2, decay 0.1, clipping at 1, on the model's fine-tuning window.

std::vector<std::string> finetune_overrides(const std::string& model) {
  return testing::finetune_overrides(kFixtures + "/finetune-" + model + ".bin", "1e-2");
}

class HfModels : public ::testing::TestWithParam<std::string> {};

TEST_P(HfModels, ImportReproducesTheReferenceLossAndLogits) {
  const std::string model = GetParam();
  const Config c = config_for(kFixtures + "/" + model,
                              {"data.val=\"" + reference_val_split(model) + "\"", "training.eval_batches=0"});
  const log::Quiet quiet;
  const std::unique_ptr<TrainingRun> owner = imported_run(c, RunPurpose::kEvaluate);
  TrainingRun& run = *owner;
  const double loss = run.validate().value();
  const double expected = ref(model, "loss").data[0];
  EXPECT_LT(relative(loss, expected), 1e-5) << model << ": loss " << loss << ", transformers " << expected;

  // The last micro-batch this replica evaluated (the one global batch of two sequences, dealt
  // dp rank by dp rank); its last position's logits, on this rank's slice of the vocabulary.
  const StageSpec spec = run.plan().stage_of(world_rank());
  if (!spec.has_head) return;
  const auto& stage = dynamic_cast<const DecoderStage&>(run.stage());
  const TensorView logits = stage.logits(0);
  const RankCoord me = run.plan().layout.coord(world_rank());
  const int tp = run.plan().layout.tp(), tp_rank = me.tp, m = run.plan().micro_batches;
  const size_t sequence = size_t(me.dp * m + m - 1);
  const int V = c.model.vocab_size, Vl = c.model.padded_vocab() / tp, T = c.training.seq_len;
  const testing::FixtureArray& want = ref(model, "logits_last");
  const float* row = logits.as<float>() + size_t(T - 1) * size_t(Vl);
  double worst = 0;
  for (int v = 0; v < Vl && tp_rank * Vl + v < V; ++v) {
    const double w = want.data[sequence * size_t(V) + size_t(tp_rank * Vl + v)];
    worst = std::max(worst, std::abs(row[v] - w) / std::max(1.0, std::abs(w)));
  }
  EXPECT_LT(worst, 1e-4) << model << ": last-position logits differ from transformers'";
}

TEST_P(HfModels, FineTuningFollowsTransformersAndAdamW) {
  const std::string model = GetParam();
  const Config c = config_for(kFixtures + "/" + model, finetune_overrides(model));
  const log::Quiet quiet;
  const std::unique_ptr<TrainingRun> owner = imported_run(c);
  TrainingRun& run = *owner;
  const testing::FixtureArray& losses = ref(model, "finetune_losses");
  const testing::FixtureArray& norms = ref(model, "finetune_grad_norms");
  for (int s = 0; s < 5; ++s) {
    const StepResult r = run.step();
    EXPECT_LT(relative(r.loss, losses.data[size_t(s)]), 1e-4)
        << model << " step " << s + 1 << ": loss " << r.loss << ", transformers " << losses.data[size_t(s)];
    EXPECT_LT(relative(r.grad_norm, norms.data[size_t(s)]), 1e-4)
        << model << " step " << s + 1 << ": gradient norm " << r.grad_norm << ", torch " << norms.data[size_t(s)];
  }
}

TEST_P(HfModels, GreedyGenerationMatchesTransformers) {
  if (world_rank() != 0) return;  // generation runs on one process
  const std::string model = GetParam();
  const Config c = parse_config("", "hf_mpi_test", {"model.init_from=\"" + kFixtures + "/" + model + "\""});
  KvCacheDecoder decoder = testing::folder_decoder(c.model);
  const testing::FixtureArray& prompt = ref(model, "greedy_prompt");
  const testing::FixtureArray& want = ref(model, "greedy");
  std::vector<int32_t> context;
  for (float id : prompt.data) context.push_back(int32_t(id));
  SamplingOptions greedy;
  greedy.temperature = 0;
  std::vector<float> logits = decoder.forward(context);
  for (size_t k = 0; k < want.data.size(); ++k) {
    const int32_t next = sample_token(logits, greedy, k);
    ASSERT_EQ(next, int32_t(want.data[k])) << model << ": generated token " << k;
    logits = decoder.forward(std::span(&next, 1));
  }
}

// This rank's parameters after importing `folder`.
std::vector<float> imported_parameters(const std::string& folder, const std::string& data) {
  const Config c = config_for(folder, {"data.train=\"" + data + "\""});
  const log::Quiet quiet;
  const std::unique_ptr<TrainingRun> owner = imported_run(c);
  TrainingRun& run = *owner;
  const float* p = run.rank_state().params.as<float>();
  return {p, p + run.rank_state().params.numel};
}

TEST_P(HfModels, ExportThenReimportIsBitForBit) {
  const std::string model = GetParam(), source = kFixtures + "/" + model;
  const std::string data = kFixtures + "/finetune-" + model + ".bin";
  const std::string dir = shared_dir("export_" + model);
  const std::string checkpoint = dir + "/step_00000000.h5";
  std::vector<float> first;
  {
    const Config c = config_for(source, {"data.train=\"" + data + "\""});
    const log::Quiet quiet;
    const std::unique_ptr<TrainingRun> owner = imported_run(c);
    TrainingRun& run = *owner;
    const RankState st = run.rank_state();
    first.assign(st.params.as<float>(), st.params.as<float>() + st.params.numel);
    CheckpointMeta meta;
    meta.config = to_toml(c);
    write_checkpoint(checkpoint, run.world(), st, meta);
  }
  const bool bf16 = model == "llama3-tiny";
  if (world_rank() == 0) {
    const log::Quiet quiet;
    EXPECT_EQ(testing::run_verb("export", {checkpoint, "--out", dir + "/f32", "--max-shard-size", "40KB"}), 0);
    if (bf16) {
      EXPECT_EQ(testing::run_verb("export", {checkpoint, "--out", dir + "/bf16", "--dtype", "bfloat16"}), 0);
    }
    // Every weight of the original folder, with its values (bf16 and fp16 widen exactly to
    // float32). feast writes GPT-2 names with the "transformer." prefix, which a folder saved the
    // Hub's way (gpt2-hub, by GPT2Model) lacks, and writes neither the causal-mask buffers such
    // folders carry nor a tied head saved anyway.
    const SafetensorsModel original(source), exported(dir + "/f32");
    const std::string prefix = "transformer.";
    auto original_name = [&](const std::string& name) {
      if (original.find(name) || name.rfind(prefix, 0) != 0) return name;
      return name.substr(prefix.size());
    };
    size_t weights = 0;
    for (const std::string& name : original.names()) {
      const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
      weights += !buffer && !(name == "lm_head.weight" && !exported.find(name));
    }
    EXPECT_EQ(exported.names().size(), weights);
    for (const std::string& name : exported.names()) {
      const std::string from = original_name(name);
      ASSERT_NE(original.find(from), nullptr) << name << " is not in the original folder";
      EXPECT_EQ(exported.find(name)->shape, original.find(from)->shape) << name;
      EXPECT_EQ(exported.read_f32(name), original.read_f32(from)) << name;
    }
    EXPECT_TRUE(fs::exists(dir + "/f32/config.json"));
    EXPECT_TRUE(fs::exists(dir + "/f32/model.safetensors.index.json")) << "40KB shards expected";
    if (bf16) {
      const SafetensorsModel again(dir + "/bf16");
      for (const std::string& name : again.names()) {
        const SafetensorsTensor* a = again.find(name);
        const SafetensorsTensor* b = original.find(name);
        ASSERT_EQ(a->dtype, "BF16");
        ASSERT_EQ(a->end - a->begin, b->end - b->begin) << name;
        EXPECT_EQ(std::memcmp(again.file_of(name).bytes(*a), original.file_of(name).bytes(*b), a->end - a->begin), 0)
            << name;
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(imported_parameters(dir + "/f32", data), first) << "re-importing the export changed parameters";
}

// ---- LoRA against PEFT (tests/fixtures/hf/lora, made by make_lora_fixtures.py) ------------------

const std::map<std::string, testing::FixtureArray>& lora_reference() {
  static const auto r = testing::read_fixture(kFixtures + "/lora/reference.bin");
  return r;
}
const testing::FixtureArray& lora_ref(const std::string& model, const std::string& name) {
  return lora_reference().at(model + "." + name);
}

// The fine-tuning window twice, as a validation split of two one-window shards: the evaluated
// micro-batch's logits are the window's.
std::string lora_val_split(const std::string& model) {
  const std::string dir = shared_dir("lora_val_" + model);
  if (world_rank() == 0) {
    const testing::FixtureArray& t = lora_ref(model, "tokens");
    std::vector<int32_t> ids;
    for (float v : t.data) ids.push_back(int32_t(v));
    write_shard(dir + "/val_000.bin", ids, TokenWidth::u16);
    write_shard(dir + "/val_001.bin", ids, TokenWidth::u16);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir + "/val_*.bin";
}

// LoRA of rank 4, alpha 8 on every product of the tiny model, fine-tuned as the fixtures were.
std::vector<std::string> lora_overrides(const std::string& model) {
  std::vector<std::string> o = finetune_overrides(model);
  o.push_back("data.val=\"" + lora_val_split(model) + "\"");
  o.push_back("training.eval_batches=0");
  o.push_back("lora.rank=4");
  o.push_back("lora.alpha=8");
  o.push_back(model == "llama-tiny" ? "lora.targets=[\"q\",\"k\",\"v\",\"o\",\"gate\",\"up\",\"down\"]"
                                    : "lora.targets=[\"qkv\",\"proj\",\"fc\",\"fc_proj\"]");
  return o;
}

// 5 steps of `run` follow the reference's losses and gradient norms within 1e-4 relative.
void expect_steps_follow(TrainingRun& run, const std::vector<float>& losses, const std::vector<float>& norms,
                         const std::string& what) {
  for (int s = 0; s < 5; ++s) {
    const StepResult r = run.step();
    EXPECT_LT(relative(r.loss, losses[size_t(s)]), 1e-4)
        << what << " step " << s + 1 << ": loss " << r.loss << ", reference " << losses[size_t(s)];
    EXPECT_LT(relative(r.grad_norm, norms[size_t(s)]), 1e-4)
        << what << " step " << s + 1 << ": gradient norm " << r.grad_norm << ", reference " << norms[size_t(s)];
  }
}

// The tiny model with `overrides`, its adapters started from PEFT's initial adapter
// (tests/fixtures/hf/lora/<model>-init); and a run of such a config, which must outlive it.
Config peft_init_config(const std::string& model, std::vector<std::string> overrides) {
  overrides.push_back("lora.init_from=\"" + kFixtures + "/lora/" + model + "-init\"");
  return config_for(kFixtures + "/" + model, overrides);
}
std::unique_ptr<TrainingRun> from_peft_init(const Config& c) {
  std::unique_ptr<TrainingRun> run = imported_run(c);
  run->import_initial_adapters();
  return run;
}

class LoraModels : public ::testing::TestWithParam<std::string> {};

// 5 LoRA steps from PEFT's initial adapter (every product adapted, rank 4, alpha 8) follow PEFT +
// torch.optim.AdamW in loss and gradient norm within 1e-4 relative, at one rank and at tp 2 x pp 2
// (the column-parallel adapters' A and the row-parallel ones' B summed over tp); afterwards the
// window's logits are PEFT's trained model's, and the checkpoint exported as a PEFT folder holds
// PEFT's trained A and B.
TEST_P(LoraModels, FineTuningFollowsPeftAndExportsItsAdapter) {
  const std::string model = GetParam();
  const Config c = peft_init_config(model, lora_overrides(model));
  const log::Quiet quiet;
  const std::unique_ptr<TrainingRun> owner = from_peft_init(c);
  TrainingRun& run = *owner;
  // The stage trains the adapters only: 2 layers x targets x (A, B), none of the model's tensors.
  for (const LocalParam& p : run.stage().table().params()) EXPECT_NE(p.spec->name.find(".lora."), std::string::npos);
  ASSERT_NE(run.stage().frozen_table(), nullptr);
  expect_steps_follow(run, lora_ref(model, "losses").data, lora_ref(model, "grad_norms").data, model + ", PEFT");
  (void)run.validate();
  const StageSpec spec = run.plan().stage_of(world_rank());
  if (spec.has_head) {
    const auto& stage = dynamic_cast<const DecoderStage&>(run.stage());
    const int tp = run.plan().layout.tp(), tp_rank = run.plan().layout.coord(world_rank()).tp;
    const int V = c.model.vocab_size, Vl = c.model.padded_vocab() / tp, T = c.training.seq_len;
    const testing::FixtureArray& want = lora_ref(model, "trained_logits");
    const float* logits = stage.logits(0).as<float>();
    double worst = 0;
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < Vl && tp_rank * Vl + v < V; ++v) {
        const double w = want.data[size_t(t) * size_t(V) + size_t(tp_rank * Vl + v)];
        worst = std::max(worst, std::abs(logits[size_t(t) * size_t(Vl) + size_t(v)] - w) / std::max(1.0, std::abs(w)));
      }
    EXPECT_LT(worst, 1e-4) << model << ": the trained model's logits differ from PEFT's";
  }

  const std::string dir = shared_dir("lora_export_" + model);
  CheckpointMeta meta;
  meta.config = to_toml(c);
  meta.lora_base = run.base_fingerprint();
  write_checkpoint(dir + "/step_00000005.h5", run.world(), run.rank_state(), meta);
  if (world_rank() != 0) return;
  ASSERT_EQ(testing::run_verb("export", {dir + "/step_00000005.h5", "--out", dir + "/peft"}), 0);
  const SafetensorsFile mine(dir + "/peft/adapter_model.safetensors"),
      peft(kFixtures + "/lora/" + model + "-trained/adapter_model.safetensors");
  ASSERT_EQ(mine.tensors().size(), peft.tensors().size());
  for (const SafetensorsTensor& t : peft.tensors()) {
    ASSERT_NE(mine.find(t.name), nullptr) << t.name << " is missing from feast's export";
    const std::vector<float> a = mine.read_f32(t.name), b = peft.read_f32(t.name);
    ASSERT_EQ(a.size(), b.size()) << t.name;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, double(std::abs(a[i] - b[i])));
      scale = std::max(scale, double(std::abs(b[i])));
    }
    EXPECT_LT(worst, 1e-4 * std::max(1.0, scale)) << t.name << ": feast's trained value differs from PEFT's";
  }
}

// LoRA dropout against PEFT drawing feast's masks (tests/fixtures/hf/lora/dropout.bin, made by
// make_lora_dropout_fixtures.py: PEFT's lora_dropout modules replaced by feast's counter-based
// mask, reproduced in numpy): 5 steps at p = 0.25 from the same initial adapter follow PEFT +
// AdamW within 1e-4, at one rank and at tp 2 x pp 2 (the row-parallel products' inputs split
// by columns, so each rank draws its slice of the mask).
TEST_P(LoraModels, DropoutFollowsPeftDrawingTheSameMasks) {
  const std::string model = GetParam();
  static const auto dropout = testing::read_fixture(kFixtures + "/lora/dropout.bin");
  std::vector<std::string> overrides = lora_overrides(model);
  overrides.push_back("lora.dropout=" + std::to_string(dropout.at(model + ".dropout").data[0]));
  const Config c = peft_init_config(model, overrides);
  ASSERT_EQ(c.training.seed, 1337u) << "the fixture draws its masks from the default seed";
  const log::Quiet quiet;
  const std::unique_ptr<TrainingRun> owner = from_peft_init(c);
  expect_steps_follow(*owner, dropout.at(model + ".losses").data, dropout.at(model + ".grad_norms").data,
                      model + ", PEFT with dropout");
  // Without dropout the same run follows the other trajectory (the dropout changes the steps).
  const testing::FixtureArray& plain = lora_ref(model, "losses");
  EXPECT_GT(relative(dropout.at(model + ".losses").data[4], plain.data[4]), 1e-3);
}

// ---- QLoRA against the numpy reference of bitsandbytes (tests/fixtures/hf/qlora, made by
// make_qlora_fixtures.py) -------------------------------------------------------------------------

const std::map<std::string, testing::FixtureArray>& qlora_reference() {
  static const auto r = testing::read_fixture(kFixtures + "/qlora/reference.bin");
  return r;
}
const testing::FixtureArray& qlora_ref(const std::string& name) { return qlora_reference().at(name); }

// t equals the reference's arrays `prefix`.* bit for bit, and so do its dequantized values.
void expect_quantized_as(const Nf4Tensor& t, const std::string& prefix) {
  const std::vector<float>& codes = qlora_ref(prefix + ".codes").data;
  ASSERT_EQ(t.codes.size(), codes.size()) << prefix;
  size_t differ = 0;
  for (size_t i = 0; i < codes.size(); ++i) differ += t.codes[i] != uint8_t(codes[i]);
  EXPECT_EQ(differ, 0u) << prefix << ": packed codes differ from the reference's";
  auto same_floats = [&](const std::vector<float>& mine, const std::string& name) {
    const std::vector<float>& want = qlora_ref(prefix + "." + name).data;
    ASSERT_EQ(mine.size(), want.size()) << prefix << "." << name;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(mine[i], want[i]) << prefix << "." << name << "[" << i << "]";
  };
  if (!t.double_quant) {
    same_floats(t.absmax, "absmax");
    return;
  }
  same_floats(std::vector<float>(t.absmax_codes.begin(), t.absmax_codes.end()), "absmax_codes");
  same_floats(t.absmax2, "absmax2");
  same_floats({t.offset}, "offset");
}

// The quantizer (backend/nf4.h) against the numpy reference: the dynamic map, a synthetic tensor
// of 301 blocks (two groups of 256, a short last block, a block of zeros) with its dequantized
// values, and every block weight of both tiny models, single and double quantized.
TEST(Nf4Quantization, EqualsTheReferenceOfBitsandbytesBitForBit) {
  const std::vector<float>& map = qlora_ref("dynamic_map").data;
  ASSERT_EQ(map.size(), 256u);
  for (size_t i = 0; i < map.size(); ++i) EXPECT_EQ(nf4_scale_code()[i], map[i]) << "dynamic map entry " << i;
  const std::vector<float>& values = qlora_ref("synthetic.values").data;
  for (const auto& [mode, dq] : {std::pair{"nf4", false}, std::pair{"dq", true}}) {
    const Nf4Tensor t = quantize_nf4(values.data(), values.size(), dq);
    expect_quantized_as(t, std::string("synthetic.") + mode);
    const std::vector<float>& want = qlora_ref(std::string("synthetic.") + mode + ".dequantized").data;
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(t.value(i), want[i]) << mode << " element " << i;
  }
  size_t weights = 0;
  for (const std::string model : {"llama-tiny", "gpt2-tiny"}) {
    const SafetensorsModel files(kFixtures + "/" + model);
    for (const auto& [name, array] : qlora_reference()) {
      const std::string head = model + ".", tail = ".nf4.codes";
      if (!name.starts_with(head) || !name.ends_with(tail)) continue;
      const std::string hf = name.substr(head.size(), name.size() - head.size() - tail.size());
      std::vector<float> w = files.read_f32(hf);
      const std::vector<int64_t>& shape = files.find(hf)->shape;
      if (model == "gpt2-tiny") {  // Conv1D (in, out): quantized as (out, in)
        std::vector<float> t(w.size());
        for (int64_t i = 0; i < shape[0]; ++i)
          for (int64_t o = 0; o < shape[1]; ++o) t[size_t(o * shape[0] + i)] = w[size_t(i * shape[1] + o)];
        w.swap(t);
      }
      expect_quantized_as(quantize_nf4(w.data(), w.size(), false), model + "." + hf + ".nf4");
      expect_quantized_as(quantize_nf4(w.data(), w.size(), true), model + "." + hf + ".dq");
      ++weights;
    }
  }
  EXPECT_EQ(weights, 14u + 8u);
}

class QloraModels : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> qlora_overrides(const std::string& model) {
  std::vector<std::string> o = lora_overrides(model);
  o.push_back("lora.base_dtype=\"nf4\"");
  return o;
}

// The model over its NF4 base (fresh adapters: B = 0 changes nothing) gives the loss of the model
// whose block weights are the reference's dequantized ones, single and double quantized, within
// 1e-5: at one rank, and at tp 2 x pp 2, where each rank keeps its slice of every unit's blocks.
TEST_P(QloraModels, AnNf4BaseGivesTheLossOfTheDequantizedReference) {
  const std::string model = GetParam();
  for (const auto& [mode, dq] : {std::pair{"nf4", false}, std::pair{"dq", true}}) {
    std::vector<std::string> o = qlora_overrides(model);
    o.push_back(dq ? "lora.double_quant=true" : "lora.double_quant=false");
    const Config c = config_for(kFixtures + "/" + model, o);
    const log::Quiet quiet;
    const std::unique_ptr<TrainingRun> owner = imported_run(c);
    TrainingRun& run = *owner;
    ASSERT_NE(run.stage().stored_apart(), nullptr);
    const double loss = run.step().loss, want = qlora_ref(model + "." + mode + ".loss").data[0];
    EXPECT_LT(relative(loss, want), 1e-5) << model << " " << mode << ": loss " << loss << ", reference " << want;
  }
}

// 5 QLoRA steps from PEFT's initial adapter follow PEFT + AdamW over the dequantized base within
// 1e-4 in loss and gradient norm, at one rank and at tp 2 x pp 2.
TEST_P(QloraModels, FineTuningFollowsPeftOverTheDequantizedBase) {
  const std::string model = GetParam();
  const Config c = peft_init_config(model, qlora_overrides(model));
  const log::Quiet quiet;
  const std::unique_ptr<TrainingRun> owner = from_peft_init(c);
  expect_steps_follow(*owner, qlora_ref(model + ".qlora.losses").data, qlora_ref(model + ".qlora.grad_norms").data,
                      model + " over NF4, PEFT over the dequantized base");
}

// Packed windows with document masks against transformers (tests/fixtures/hf/packing.bin, made by
// make_packing_fixtures.py): two windows of 33 tokens packing 7 documents each ended by the
// model's eos (the last cut by the window) give the token-weighted mean of the documents' own
// losses within 1e-6; without document masks the same windows give transformers' plain causal
// loss, which differs.
class PackedWindows : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedWindows, GiveTheMeanOfTheirDocumentsAlone) {
  const std::string model = GetParam();
  static const auto packing = testing::read_fixture(kFixtures + "/packing.bin");
  const std::string split = val_split_of("packed_" + model, packing.at(model + ".tokens"));
  const int eos = int(packing.at(model + ".eos").data[0]);
  for (const bool masks : {true, false}) {
    std::vector<std::string> o;
    for (const std::string& s : layout_overrides(kFixtures + "/" + model))
      if (s.rfind("training.seq_len", 0) != 0) o.push_back(s);
    for (const std::string& s : {"model.init_from=\"" + kFixtures + "/" + model + "\"", "data.val=\"" + split + "\"",
                                 std::string("training.seq_len=32"), std::string("training.eval_batches=0"),
                                 "data.document_mask=" + std::string(masks ? "true" : "false"),
                                 "data.eos_id=" + std::to_string(eos)})
      o.push_back(s);
    const Config c = parse_config("", "hf_mpi_test", o);
    const log::Quiet quiet;
    const std::unique_ptr<TrainingRun> owner = imported_run(c, RunPurpose::kEvaluate);
    const double loss = owner->validate().value();
    const double expected = packing.at(model + (masks ? ".loss" : ".unmasked")).data[0];
    EXPECT_LT(relative(loss, expected), masks ? 1e-6 : 1e-5)
        << model << (masks ? " with" : " without") << " document masks: loss " << loss << ", transformers "
        << expected;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, PackedWindows, ::testing::Values("gpt2-tiny", "llama-tiny"), [](const auto& param_info) {
  std::string n = param_info.param;
  for (char& ch : n) ch = ch == '-' ? '_' : ch;
  return n;
});

INSTANTIATE_TEST_SUITE_P(Tiny, QloraModels, ::testing::Values("gpt2-tiny", "llama-tiny"), [](const auto& param_info) {
  std::string n = param_info.param;
  for (char& ch : n) ch = ch == '-' ? '_' : ch;
  return n;
});

INSTANTIATE_TEST_SUITE_P(Tiny, LoraModels, ::testing::Values("gpt2-tiny", "llama-tiny"), [](const auto& param_info) {
  std::string n = param_info.param;
  for (char& ch : n) ch = ch == '-' ? '_' : ch;
  return n;
});

INSTANTIATE_TEST_SUITE_P(Tiny, HfModels,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "llama3-tiny", "gpt2-hub", "qwen2-tiny"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace feast
