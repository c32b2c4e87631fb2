// Mixture-of-experts models against transformers (tests/fixtures/hf/make_moe_fixtures.py): a
// tiny MixtralForCausalLM (every block MoE, renormalised top 2, fp32, sharded files) and a tiny
// Qwen2MoeForCausalLM (MoE every second block, top 2 not renormalised, a gated shared expert,
// q/k/v biases, bf16), imported by model.init_from, on one rank, on four at every layout that
// fits (tp 2 x pp 2, dp 2 x pp 2, tp 2 x dp 2, dp 4, ep 2 x pp 2, ep 4) and on eight at
// ep 2 x tp 2 x pp 2:
//  - the cross-entropy of four reference sequences within 1e-5 and every logit within 1e-4;
//  - 5 AdamW steps (lr 1e-3) with transformers' load-balancing loss (router_aux_loss_coef with
//    output_router_logits): the cross-entropy, the aux loss and the gradient norm of each step
//    within 1e-4;
//  - trainer generate's cached decoder, token by token: every position's logits within 1e-4;
//  - export then import: every tensor of the original folder with its values, config.json read
//    back to the same [model], and the re-imported parameters bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_world.h"
#include "core/log.h"
#include "data/shard.h"
#include "interop/hf/hf_weights.h"
#include "interop/hf/safetensors_model.h"
#include "model/architecture.h"
#include "model/kv_cache_decoder.h"
#include "model/decoder_stage.h"
#include "tests/model/fixture.h"
#include "tests/support/mpi_test_support.h"
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
using testing::world_size;

const std::string kFixtures = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf";

const testing::FixtureArray& ref(const std::string& model, const std::string& name) {
  static const auto r = testing::read_fixture(kFixtures + "/moe.bin");
  return r.at(model + "." + name);
}



// The reference sequences as a validation split, one shard per sequence (window k is row k).
std::string val_split(const std::string& model) {
  const std::string dir = shared_dir("moe_val_" + model);
  const testing::FixtureArray& t = ref(model, "tokens");
  if (world_rank() == 0)
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < t.shape[1]; ++i) ids.push_back(int32_t(t.data[size_t(r * t.shape[1] + i)]));
      write_shard(dir + "/val_00" + std::to_string(r) + ".bin", ids, TokenWidth::u16);
    }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir + "/val_*.bin";
}

// The layouts of this job's world: one rank; on four every split of tp, pp and dp that the
// models' two key/value heads and their layers allow, and expert parallelism over 2 and 4
// data-parallel ranks; on eight, ep 2 x tp 2 x pp 2.
std::vector<std::vector<std::string>> layouts() {
  if (world_size() == 1) return {{"parallel.tp=1", "parallel.pp=1"}};
  if (world_size() == 8) return {{"parallel.tp=2", "parallel.pp=2", "parallel.ep=2"}};
  return {{"parallel.tp=2", "parallel.pp=2"},
          {"parallel.tp=1", "parallel.pp=2"},
          {"parallel.tp=2", "parallel.pp=1"},
          {"parallel.tp=1", "parallel.pp=1"},
          {"parallel.tp=1", "parallel.pp=2", "parallel.ep=2"},
          {"parallel.tp=1", "parallel.pp=1", "parallel.ep=4"}};
}

std::string describe(const std::vector<std::string>& layout) {
  std::string s;
  for (const std::string& key : layout) s += (s.empty() ? "" : " ") + key;
  return s;
}

// The model folder `model` (a fixture's name, or a path); one sequence per micro-batch (the
// load-balancing loss is a micro-batch's), four per step.
Config config_for(const std::string& model, const std::vector<std::string>& layout, std::vector<std::string> o) {
  o.push_back("model.init_from=\"" + (model.find('/') == std::string::npos ? kFixtures + "/" + model : model) + "\"");
  o.insert(o.end(), layout.begin(), layout.end());
  for (const char* s : {"parallel.micro_batch_size=1", "training.batch_size=4", "training.seq_len=16",
                        "training.threads=1"})
    o.push_back(s);
  return parse_config("", "hf_moe_mpi_test", o);
}


std::vector<std::string> finetune_overrides(const std::string& model) {
  return testing::finetune_overrides(kFixtures + "/finetune-" + model + ".bin", "1e-3");
}

class MoeModels : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeModels, ImportGivesTransformersLossAndLogits) {
  const std::string model = GetParam();
  const std::string val = val_split(model);
  for (const auto& layout : layouts()) {
    const Config c = config_for(model, layout, {"data.val=\"" + val + "\"", "training.eval_batches=0"});
    const log::Quiet quiet;
    const std::unique_ptr<TrainingRun> run = imported_run(c, RunPurpose::kEvaluate);
    const double loss = run->validate().value();
    EXPECT_LT(relative(loss, ref(model, "loss").data[0]), 1e-5)
        << model << " at " << describe(layout) << ": loss " << loss << ", transformers " << ref(model, "loss").data[0];
    // The last micro-batch this replica evaluated: sequence dp * m + m - 1, this rank's vocabulary.
    const StageSpec spec = run->plan().stage_of(world_rank());
    if (!spec.has_head) continue;
    const auto& stage = dynamic_cast<const DecoderStage&>(run->stage());
    const RankCoord me = run->plan().layout.coord(world_rank());
    const int tp = run->plan().layout.tp(), m = run->plan().micro_batches, T = 16;
    const int V = c.model.vocab_size, Vl = c.model.padded_vocab() / tp;
    const size_t sequence = size_t(me.dp * m + m - 1);
    const float* got = stage.logits(0).as<float>();
    const testing::FixtureArray& want = ref(model, "logits");
    double worst = 0;
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < Vl && me.tp * Vl + v < V; ++v) {
        const double w = want.data[(sequence * size_t(T) + size_t(t)) * size_t(V) + size_t(me.tp * Vl + v)];
        worst = std::max(worst, std::abs(got[size_t(t) * size_t(Vl) + size_t(v)] - w) / std::max(1.0, std::abs(w)));
      }
    EXPECT_LT(worst, 1e-4) << model << " at " << describe(layout) << ": logits differ from transformers'";
  }
}

TEST_P(MoeModels, FineTuningFollowsTransformersWithItsLoadBalancingLoss) {
  const std::string model = GetParam();
  for (const auto& layout : layouts()) {
    const Config c = config_for(model, layout, finetune_overrides(model));
    ASSERT_GT(c.model.moe.aux_loss_coef, 0) << "config.json's router_aux_loss_coef applies (output_router_logits)";
    const log::Quiet quiet;
    const std::unique_ptr<TrainingRun> run = imported_run(c);
    for (int s = 0; s < 5; ++s) {
      const StepResult r = run->step();
      const double loss = ref(model, "finetune_losses").data[size_t(s)];
      const double aux = ref(model, "finetune_aux").data[size_t(s)];
      const double norm = ref(model, "finetune_grad_norms").data[size_t(s)];
      const std::string at = model + " at " + describe(layout) + " step " + std::to_string(s + 1);
      EXPECT_LT(relative(r.loss, loss), 1e-4) << at << ": loss " << r.loss << ", transformers " << loss;
      ASSERT_TRUE(r.moe.has_value()) << at;
      EXPECT_LT(relative(r.moe->aux_loss, aux), 1e-4) << at << ": aux loss " << r.moe->aux_loss << ", transformers " << aux;
      EXPECT_LT(relative(r.grad_norm, norm), 1e-4) << at << ": gradient norm " << r.grad_norm << ", torch " << norm;
      // Every choice of every token lands on some expert: 4 sequences x 16 tokens x top 2 per block.
      for (const std::vector<double>& block : r.moe->load) {
        double total = 0;
        for (double x : block) total += x;
        EXPECT_EQ(total, 4.0 * 16.0 * c.model.moe.top_k) << at;
      }
    }
  }
}

TEST_P(MoeModels, ExportThenReimportIsBitForBit) {
  const std::string model = GetParam(), source = kFixtures + "/" + model;
  const std::string data = kFixtures + "/finetune-" + model + ".bin";
  const std::string dir = shared_dir("moe_export_" + model);
  const std::vector<std::string> layout = layouts().front();
  std::vector<float> first;
  {
    const Config c = config_for(model, layout, {"data.train=\"" + data + "\""});
    const log::Quiet quiet;
    const std::unique_ptr<TrainingRun> run = imported_run(c);
    const RankState st = run->rank_state();
    first.assign(st.params.as<float>(), st.params.as<float>() + st.params.numel);
    CheckpointMeta meta;
    meta.config = to_toml(c);
    write_checkpoint(dir + "/step_00000000.h5", run->world(), st, meta);
  }
  if (world_rank() == 0) {
    const log::Quiet quiet;
    ASSERT_EQ(testing::run_verb("export", {dir + "/step_00000000.h5", "--out", dir + "/f32"}), 0);
    const SafetensorsModel original(source), exported(dir + "/f32");
    EXPECT_EQ(exported.names().size(), original.names().size());
    for (const std::string& name : original.names()) {
      ASSERT_NE(exported.find(name), nullptr) << name << " was not exported";
      EXPECT_EQ(exported.find(name)->shape, original.find(name)->shape) << name;
      EXPECT_EQ(exported.read_f32(name), original.read_f32(name)) << name;
    }
    // The [model] sections' values (their comments name where each came from).
    auto model_values = [](const std::string& folder) {
      const std::string toml = to_toml(parse_config("", "moe", {"model.init_from=\"" + folder + "\""}));
      const size_t begin = toml.find("[model]"), end = toml.find("[parallel]");
      std::string out, line;
      std::istringstream in(toml.substr(begin, end - begin));
      while (std::getline(in, line))
        if (line.find("init_from") == std::string::npos) out += line.substr(0, line.find('#')) + "\n";
      return out;
    };
    EXPECT_EQ(model_values(source), model_values(dir + "/f32"))
        << "the exported config.json describes another model";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    const Config c = config_for(dir + "/f32", layout, {"data.train=\"" + data + "\""});
    const log::Quiet quiet;
    const std::unique_ptr<TrainingRun> run = imported_run(c);
    const RankState st = run->rank_state();
    EXPECT_EQ(std::vector<float>(st.params.as<float>(), st.params.as<float>() + st.params.numel), first)
        << "re-importing the export changed parameters";
  }
}

// trainer generate's key/value-cache decoder, one token at a time: every position's logits of the
// four reference sequences, as transformers gives them for the whole sequence.
TEST_P(MoeModels, CachedDecodingGivesTransformersLogits) {
  if (world_rank() != 0) return;  // generation runs on one process
  const std::string model = GetParam();
  const Config c = parse_config("", "hf_moe_mpi_test", {"model.init_from=\"" + kFixtures + "/" + model + "\""});
  KvCacheDecoder decoder = testing::folder_decoder(c.model);
  const testing::FixtureArray& tokens = ref(model, "tokens");
  const testing::FixtureArray& want = ref(model, "logits");
  const int T = 16, V = c.model.vocab_size;
  double worst = 0;
  for (int s = 0; s < 4; ++s) {
    decoder.reset();
    for (int t = 0; t < T; ++t) {
      const int32_t id = int32_t(tokens.data[size_t(s * (T + 1) + t)]);
      const std::vector<float> logits = decoder.forward(std::span(&id, 1));
      for (int v = 0; v < V; ++v) {
        const double w = want.data[(size_t(s * T + t)) * size_t(V) + size_t(v)];
        worst = std::max(worst, std::abs(logits[size_t(v)] - w) / std::max(1.0, std::abs(w)));
      }
    }
  }
  EXPECT_LT(worst, 1e-4) << model << ": the cached decoder's logits differ from transformers'";
}

INSTANTIATE_TEST_SUITE_P(Tiny, MoeModels, ::testing::Values("mixtral-tiny", "qwen2-moe-tiny"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace feast
