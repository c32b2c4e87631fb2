// Checkpoints under mpirun -np 8, through the training loop itself:
//  - exact resume: 20 steps straight, and 10 steps + save + resume to 20, give bit-identical
//    losses, weights and optimizer state (at tp2 pp2 dp2 ZeRO 2, and tp2 pp1 dp4 ZeRO 1);
//  - resharding: a checkpoint saved at tp2 pp2 dp2 ZeRO 1 resumes at tp1 pp4 dp2, tp4 pp1 dp2,
//    tp1 pp1 dp8 ZeRO 2, with sequence or context parallelism, and on one rank; one saved on one
//    rank, and one saved with context parallelism, resume at tp2 pp2 dp2; the
//    resumed losses match the uninterrupted run within 1e-5 relative (GPT-2 and Llama);
//  - a mixture of experts under expert parallelism (each rank holding its own experts) resumes
//    exactly and reshards to other ep degrees, tp, ZeRO 3 and one rank;
//  - a checkpoint of another model is refused with the list of differences;
//  - truncated and bit-flipped checkpoints are detected, named, and auto-resume falls back to
//    the previous complete checkpoint;
//  - export's and generation's one-process reader gives the master weights and refuses a file
//    a resume refuses, even for a tensor it does not keep.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "core/log.h"
#include "model/architecture.h"
#include "model/decoder_stage.h"
#include "comm/mpi_world.h"
#include "tests/support/mpi_test_support.h"
#include "comm/self_communicator.h"
#include "config/config.h"
#include "tests/support/run_verb.h"
#include "train/train_loop.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

using testing::world_rank;

// A directory every rank agrees on, with a synthetic corpus.
const std::string& work_dir() {
  static const std::string dir = testing::make_shared_corpus("feast_ckpt");
  return dir;
}

struct Layout {
  int tp, pp, dp, zero;
  std::string name() const {
    return "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) + " zero" +
           std::to_string(zero);
  }
};

Config make_config(const std::string& arch, const Layout& l, const std::string& checkpoint_dir) {
  Config c;
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.vocab_size = 300;  // padded to 384: tp ranks hold padded rows
  c.model.max_seq_len = 32;
  if (arch == "llama") {
    c.model.arch = "llama";
    c.model.n_head = 8;
    c.model.n_kv_head = 4;
    c.model.intermediate_size = 96;
  }
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.dp = l.dp;
  c.parallel.zero_stage = l.zero;
  c.parallel.micro_batch_size = 1;
  c.parallel.bucket_mb = 0.05;
  c.training.batch_size = 8;  // the same global batch at every layout
  c.training.seq_len = 16;
  c.training.steps = 20;
  c.training.lr = 1e-3;
  c.training.warmup_steps = 2;
  c.training.eval_interval = 0;
  c.training.threads = 1;
  c.data.train = work_dir() + "/train_*.bin";
  c.logging.dir = checkpoint_dir + "/run";
  c.logging.interval = 1000;
  c.checkpoint.dir = checkpoint_dir;
  return c;
}

// This rank's parameters and optimizer state at the end of a run, as raw floats.
struct Outcome {
  TrainSummary summary;
  std::vector<float> state;
  int64_t tokens_seen = 0, skipped_steps = 0;  // the training state at the end
};

// Trains on all eight ranks, or on rank 0 alone (the others wait at a barrier).
Outcome train_run(const Config& c, bool alone = false) {
  Outcome out;
  TrainHooks hooks;
  hooks.at_end = [&](TrainingRun& run) {
    out.tokens_seen = run.state().tokens_seen;
    out.skipped_steps = run.state().skipped_steps;
    const RankState st = run.rank_state();
    const float* p = st.params.as<float>();
    out.state.assign(p, p + st.params.numel);
    for (const AdamW::TensorState& ts : st.optimizer)
      for (const TensorView* v : {&ts.master, &ts.exp_avg, &ts.exp_avg_sq})
        out.state.insert(out.state.end(), v->as<float>(), v->as<float>() + v->numel);
  };
  const log::Quiet quiet;
  if (!alone) {
    out.summary = train(c, make_mpi_world(std::chrono::milliseconds(120'000)), hooks);
  } else if (world_rank() == 0) {
    out.summary = train(c, make_self_communicator(), hooks);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return out;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = work_dir() + "/" + name;
  if (world_rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return d;
}

// Copies one checkpoint file into a fresh directory (rank 0), for a resume of its own.
std::string copy_checkpoint(const std::string& file, const std::string& name) {
  const std::string d = fresh_dir(name);
  if (world_rank() == 0) fs::copy_file(file, d + "/" + fs::path(file).filename().string());
  MPI_Barrier(MPI_COMM_WORLD);
  return d;
}

std::string step_file(const std::string& dir, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "/step_%08d.h5", step);
  return dir + name;
}

void expect_losses_close(const TrainSummary& resumed, const TrainSummary& straight, int from_step,
                         const std::string& what) {
  ASSERT_EQ(resumed.first_step, from_step) << what;
  ASSERT_EQ(resumed.losses.size(), straight.losses.size() - size_t(from_step)) << what;
  double worst = 0;
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    const double a = resumed.losses[i], b = straight.losses[size_t(from_step) + i];
    worst = std::max(worst, std::abs(a - b) / std::abs(b));
  }
  EXPECT_LE(worst, 1e-5) << what << ": resumed losses differ from the uninterrupted run by " << worst;
}

// A run resumed at step 10 of 20 gave the uninterrupted run's last 10 losses and its final
// parameters and optimizer state (`what`), bit for bit.
void expect_resumed_exactly(const Outcome& resumed, const Outcome& straight, const std::string& what) {
  ASSERT_EQ(resumed.summary.first_step, 10);
  for (size_t i = 0; i < 10; ++i)
    EXPECT_EQ(resumed.summary.losses[i], straight.summary.losses[10 + i]) << "step " << 11 + i;
  ASSERT_EQ(resumed.state.size(), straight.state.size());
  EXPECT_EQ(std::memcmp(resumed.state.data(), straight.state.data(), resumed.state.size() * sizeof(float)), 0)
      << what << " or their optimizer state differ from the uninterrupted run";
}

class ExactResume : public ::testing::TestWithParam<Layout> {};

TEST_P(ExactResume, StopAtTenAndResumeIsBitIdenticalToTwentySteps) {
  const Layout l = GetParam();
  const Outcome straight = train_run(make_config("gpt2", l, fresh_dir("exact_straight")));
  const std::string dir = fresh_dir("exact_split");
  Config first = make_config("gpt2", l, dir);
  first.training.exit_at_step = 10;
  const Outcome a = train_run(first);
  EXPECT_EQ(a.summary.ended, "exit_at_step");
  EXPECT_EQ(a.summary.steps, 10);
  const Outcome b = train_run(make_config("gpt2", l, dir));
  ASSERT_EQ(b.summary.first_step, 10);
  ASSERT_EQ(b.summary.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(a.summary.losses[i], straight.summary.losses[i]) << l.name() << " step " << i + 1;
    EXPECT_EQ(b.summary.losses[i], straight.summary.losses[10 + i]) << l.name() << " step " << 11 + i;
    EXPECT_EQ(b.summary.grad_norms[i], straight.summary.grad_norms[10 + i]) << l.name() << " step " << 11 + i;
  }
  EXPECT_EQ(b.tokens_seen, straight.tokens_seen) << l.name() << ": tokens seen not restored";
  EXPECT_EQ(b.tokens_seen, 20 * 8 * 16);
  ASSERT_EQ(b.state.size(), straight.state.size());
  EXPECT_EQ(std::memcmp(b.state.data(), straight.state.data(), b.state.size() * sizeof(float)), 0)
      << l.name() << ": weights or optimizer state differ from the uninterrupted run";
  // The resumed run continued the interrupted run's metrics: steps 1..20, once each.
  if (world_rank() == 0) {
    std::ifstream in(dir + "/run/metrics.jsonl");
    std::string line;
    int n = 0;
    while (std::getline(in, line)) EXPECT_NE(line.find("\"step\":" + std::to_string(++n) + ","), std::string::npos) << line;
    EXPECT_EQ(n, 20);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExactResume,
                         ::testing::Values(Layout{2, 2, 2, 2}, Layout{2, 1, 4, 1}, Layout{1, 2, 4, 3}),
                         [](const ::testing::TestParamInfo<Layout>& param) {
                           const Layout& l = param.param;
                           return "tp" + std::to_string(l.tp) + "pp" + std::to_string(l.pp) + "dp" +
                                  std::to_string(l.dp) + "zero" + std::to_string(l.zero);
                         });

// The offloaded optimizer's state is the same state in other memory: a run stopped with it
// resumes without it (and the other way round), bit for bit the uninterrupted run without it,
// weights and optimizer state alike.
TEST(Checkpoint, TheOffloadedOptimizerSavesAndResumesAsTheOther) {
  const Layout l{2, 1, 4, 1};
  const Outcome straight = train_run(make_config("llama", l, fresh_dir("offload_straight")));
  for (const bool offload_first : {true, false}) {
    const std::string dir = fresh_dir(offload_first ? "offload_then_not" : "not_then_offload");
    Config first = make_config("llama", l, dir);
    first.training.exit_at_step = 10;
    first.parallel.offload_optimizer = offload_first;
    train_run(first);
    Config second = make_config("llama", l, dir);
    second.parallel.offload_optimizer = !offload_first;
    const Outcome b = train_run(second);
    const std::string what = offload_first ? "saved offloaded, resumed on the device" : "saved on the device, resumed offloaded";
    ASSERT_EQ(b.summary.first_step, 10) << what;
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(b.summary.losses[i], straight.summary.losses[10 + i]) << what << " step " << 11 + i;
    ASSERT_EQ(b.state.size(), straight.state.size()) << what;
    EXPECT_EQ(std::memcmp(b.state.data(), straight.state.data(), b.state.size() * sizeof(float)), 0)
        << what << ": weights or optimizer state differ from the uninterrupted run";
  }
}

// LoRA: a checkpoint holds the adapters and their optimizer state alone (the frozen model is not
// in it: a reader of the model's tensors refuses it), a run stopped at step 10 resumes bit for bit
// the uninterrupted run, and the checkpoint reshards to other tp, pp, dp and ZeRO. With dropout:
// its masks are drawn from the step and each row's place, so the resumed and resharded runs drop
// what the uninterrupted run dropped.
TEST(Checkpoint, LoraSavesTheAdaptersAloneResumesExactlyAndReshards) {
  auto lora = [](Config c) {
    c.lora.rank = 4;
    c.lora.alpha = 8;
    c.lora.targets = {"q", "k", "v", "o", "gate", "up", "down"};
    c.lora.dropout = 0.1;
    c.training.lr = 1e-2;
    return c;
  };
  const Layout source{2, 2, 2, 1};
  const Outcome straight = train_run(lora(make_config("llama", source, fresh_dir("lora_straight"))));
  const std::string dir = fresh_dir("lora_split");
  Config first = lora(make_config("llama", source, dir));
  first.training.exit_at_step = 10;
  train_run(first);
  expect_resumed_exactly(train_run(lora(make_config("llama", source, dir))), straight, "adapters");
  const std::string file = step_file(dir, 10);
  if (world_rank() == 0) {
    const Config c = lora(make_config("llama", source, dir));
    EXPECT_NO_THROW(CheckpointWeights(file, c.model, lora_param_table(c.model, lora_spec(c))));
    EXPECT_THROW(CheckpointWeights(file, c.model), CheckpointError) << "the checkpoint holds the model's tensors";
  }
  for (const Layout& target : {Layout{1, 4, 2, 2}, Layout{4, 1, 2, 1}, Layout{1, 1, 8, 2}}) {
    const std::string d = copy_checkpoint(file, "lora_to_" + std::to_string(target.tp) + std::to_string(target.pp));
    const Outcome r = train_run(lora(make_config("llama", target, d)));
    expect_losses_close(r.summary, straight.summary, 10, "LoRA " + source.name() + " -> " + target.name());
  }
}

class Reshard : public ::testing::TestWithParam<std::string> {};

TEST_P(Reshard, SavedAtOneLayoutResumesAtEveryOther) {
  const std::string arch = GetParam();
  const Layout source{2, 2, 2, 1};
  const Outcome straight = train_run(make_config(arch, source, fresh_dir(arch + "_straight")));
  const std::string saved = fresh_dir(arch + "_saved");
  Config first = make_config(arch, source, saved);
  first.training.exit_at_step = 10;
  train_run(first);
  const std::string file = step_file(saved, 10);

  for (const Layout& target : {Layout{1, 4, 2, 1}, Layout{4, 1, 2, 1}, Layout{1, 1, 8, 2}, Layout{2, 1, 4, 3}}) {
    const std::string dir = copy_checkpoint(file, arch + "_to_" + std::to_string(target.tp) + std::to_string(target.pp));
    const Outcome r = train_run(make_config(arch, target, dir));
    expect_losses_close(r.summary, straight.summary, 10, arch + " " + source.name() + " -> " + target.name());
  }
  {
    // Resumed with sequence parallelism: the same tensors, the norms' rows split over tp.
    const std::string dir = copy_checkpoint(file, arch + "_to_sp");
    Config c = make_config(arch, Layout{4, 1, 2, 1}, dir);
    c.parallel.sequence_parallel = true;
    const Outcome r = train_run(c);
    expect_losses_close(r.summary, straight.summary, 10, arch + " " + source.name() + " -> tp4 with sequence parallelism");
  }
  {
    // Resumed with context parallelism: each rank a quarter of every sequence, the parameters
    // replicated over dp x cp and ZeRO-sharded there.
    const std::string dir = copy_checkpoint(file, arch + "_to_cp");
    Config c = make_config(arch, Layout{2, 1, 1, 1}, dir);
    c.parallel.cp = 4;
    const Outcome r = train_run(c);
    expect_losses_close(r.summary, straight.summary, 10, arch + " " + source.name() + " -> tp2 cp4");
  }
  {
    // Saved with context parallelism (ZeRO 2 over dp x cp), resumed without.
    const std::string cp_saved = fresh_dir(arch + "_cp_saved");
    Config c = make_config(arch, Layout{1, 2, 2, 2}, cp_saved);
    c.parallel.cp = 2;
    c.training.exit_at_step = 10;
    train_run(c);
    const Outcome r = train_run(make_config(arch, source, cp_saved));
    expect_losses_close(r.summary, straight.summary, 10, arch + " tp1 pp2 dp2 cp2 zero2 -> " + source.name());
  }
  {
    // Resumed under interleaved 1F1B: each stage's two chunks (layers 0 and 2, 1 and 3) read
    // from a checkpoint whose stages held layers 0-1 and 2-3; then saved so and resumed back.
    const std::string dir = copy_checkpoint(file, arch + "_to_interleaved");
    Config c = make_config(arch, Layout{2, 2, 2, 1}, dir);
    c.parallel.schedule = "interleaved-1f1b";
    c.parallel.virtual_stages = 2;
    const Outcome r = train_run(c);
    expect_losses_close(r.summary, straight.summary, 10, arch + " " + source.name() + " -> interleaved v2");
    const std::string again = fresh_dir(arch + "_interleaved_saved");
    Config saving = make_config(arch, Layout{1, 2, 4, 2}, again);
    saving.parallel.schedule = "interleaved-1f1b";
    saving.parallel.virtual_stages = 2;
    saving.training.exit_at_step = 10;
    train_run(saving);
    const Outcome back = train_run(make_config(arch, source, again));
    expect_losses_close(back.summary, straight.summary, 10, arch + " tp1 pp2 dp4 zero2 v2 -> " + source.name());
  }
  {
    const std::string dir = copy_checkpoint(file, arch + "_to_one");
    const Outcome r = train_run(make_config(arch, Layout{1, 1, 1, 0}, dir), /*alone=*/true);
    if (world_rank() == 0) expect_losses_close(r.summary, straight.summary, 10, arch + " -> one rank");
  }
  {
    // Saved under ZeRO 3 (each rank holding its shard of every block), resumed under ZeRO 1.
    const std::string z3 = fresh_dir(arch + "_zero3_saved");
    Config c = make_config(arch, Layout{2, 1, 4, 3}, z3);
    c.training.exit_at_step = 10;
    train_run(c);
    const Outcome r = train_run(make_config(arch, Layout{1, 4, 2, 1}, z3));
    expect_losses_close(r.summary, straight.summary, 10, arch + " tp2 pp1 dp4 zero3 -> tp1 pp4 dp2 zero1");
  }
  {
    // Saved on one rank, resumed on eight.
    const std::string one = fresh_dir(arch + "_one_saved");
    Config c = make_config(arch, Layout{1, 1, 1, 0}, one);
    c.training.exit_at_step = 10;
    train_run(c, /*alone=*/true);
    const Outcome r = train_run(make_config(arch, source, one));
    expect_losses_close(r.summary, straight.summary, 10, arch + " one rank -> " + source.name());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Reshard, ::testing::Values("gpt2", "llama"));

// A mixture of experts (8 experts, top 2, in blocks 1 and 3, with the load-balancing loss) under
// expert parallelism, where each rank holds only its ep rank's experts: saved at dp 4 with ep 2
// (ZeRO 2 over the 2 ranks holding the same experts), it resumes there bit for bit, and at ep 4,
// ep 1, with tensor parallelism and ZeRO 3, and on one rank; saved at ep 4 it resumes at ep 2.
// Every micro-batch holds one sequence at every layout, so the load-balancing loss is the same.
Config moe_config(const Layout& l, int ep, const std::string& dir) {
  Config c = make_config("llama", l, dir);
  c.model.moe.n_experts = 8;
  c.model.moe.top_k = 2;
  c.model.moe.intermediate_size = 48;
  c.model.moe.every = 2;
  c.model.moe.aux_loss_coef = 0.01;
  c.parallel.ep = ep;
  return c;
}

TEST(Checkpoint, ExpertsResumeExactlyAndReshardAcrossExpertParallelDegrees) {
  const Layout source{1, 2, 4, 2};
  const Outcome straight = train_run(moe_config(source, 2, fresh_dir("moe_straight")));
  const std::string saved = fresh_dir("moe_saved");
  Config first = moe_config(source, 2, saved);
  first.training.exit_at_step = 10;
  train_run(first);
  expect_resumed_exactly(train_run(moe_config(source, 2, saved)), straight, "experts, dense weights");

  const std::string file = step_file(saved, 10);
  struct Target {
    Layout layout;
    int ep;
  };
  for (const Target& t : {Target{{1, 2, 4, 1}, 4}, Target{{1, 2, 4, 1}, 1}, Target{{2, 1, 4, 3}, 2}}) {
    const std::string name = t.layout.name() + " ep" + std::to_string(t.ep);
    const std::string dir = copy_checkpoint(file, "moe_to_" + std::to_string(t.layout.tp) + std::to_string(t.ep));
    const Outcome r = train_run(moe_config(t.layout, t.ep, dir));
    expect_losses_close(r.summary, straight.summary, 10, "MoE " + source.name() + " ep2 -> " + name);
  }
  {
    const std::string dir = copy_checkpoint(file, "moe_to_one");
    const Outcome r = train_run(moe_config(Layout{1, 1, 1, 0}, 1, dir), /*alone=*/true);
    if (world_rank() == 0) expect_losses_close(r.summary, straight.summary, 10, "MoE -> one rank");
  }
  {
    const std::string ep4 = fresh_dir("moe_ep4_saved");
    Config c = moe_config(Layout{2, 1, 4, 1}, 4, ep4);
    c.training.exit_at_step = 10;
    train_run(c);
    const Outcome r = train_run(moe_config(source, 2, ep4));
    expect_losses_close(r.summary, straight.summary, 10, "MoE tp2 pp1 dp4 zero1 ep4 -> " + source.name() + " ep2");
  }
}

TEST(Checkpoint, AsyncSavesWriteWhatSynchronousSavesWrite) {
  const Layout l{2, 2, 2, 2};
  std::vector<std::string> dirs;
  std::vector<TrainSummary> runs;
  for (bool async : {false, true}) {
    dirs.push_back(fresh_dir(async ? "async" : "sync"));
    Config c = make_config("gpt2", l, dirs.back());
    c.training.steps = 12;
    c.checkpoint.interval = 4;
    c.checkpoint.keep = 5;
    c.checkpoint.async = async;
    runs.push_back(train_run(c).summary);
  }
  EXPECT_EQ(runs[0].losses, runs[1].losses) << "saving in the background changed training";
  ASSERT_TRUE(runs[1].last_checkpoint.has_value());
  EXPECT_EQ(*runs[1].last_checkpoint, step_file(dirs[1], 12));
  if (world_rank() != 0) return;
  for (int step : {4, 8, 12}) {
    const std::vector<DatasetReport> a = verify_checkpoint(step_file(dirs[0], step));
    const std::vector<DatasetReport> b = verify_checkpoint(step_file(dirs[1], step));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(b[i].ok()) << "step " << step << " " << b[i].name << ": " << b[i].error;
      EXPECT_EQ(a[i].actual_crc, b[i].actual_crc) << "step " << step << " " << a[i].name << " differs";
    }
  }
}

// The message every rank gets when training throws (ConfigError and CheckpointError are
// thrown alike on every rank).
template <typename E>
std::string error_of(const Config& c) {
  std::string message = "no error";
  try {
    train_run(c);
  } catch (const E& e) {
    message = e.what();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return message;
}

TEST(Checkpoint, AWriteFailingOnOneRankFailsTheSaveEverywhereAndCommitsNothing) {
  for (bool async : {false, true}) {
    const std::string dir = fresh_dir(async ? "write_fails_async" : "write_fails");
    Config c = make_config("gpt2", Layout{2, 2, 2, 1}, dir);
    c.training.steps = 3;
    c.checkpoint.interval = 2;
    c.checkpoint.async = async;
    fail_checkpoint_writes_for_testing(world_rank() == 3);
    const std::string msg = error_of<AgreedError>(c);
    fail_checkpoint_writes_for_testing(false);
    if (world_rank() == 0) {
      EXPECT_NE(msg.find("injected by a test"), std::string::npos) << (async ? "async: " : "") << msg;
      EXPECT_NE(msg.find("nothing was committed"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg, "no error") << "rank " << world_rank() << " did not fail";
    }
    size_t committed = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      committed += e.path().filename().string().starts_with("step_");
    EXPECT_EQ(committed, 0u) << (async ? "async: " : "") << "a checkpoint was committed after a failed write";
  }
}

TEST(Checkpoint, AFileWithOnlyTheRequiredAttributesResumes) {
  // What another tool following docs/checkpoint-format.md must write: the tensors with their
  // checksums, format_version, step, tokens_seen and seed; the rest is optional.
  const std::string dir = fresh_dir("minimal");
  Config c = make_config("gpt2", Layout{2, 2, 2, 1}, dir);
  c.training.exit_at_step = 4;
  train_run(c);
  const std::string elsewhere = fresh_dir("minimal_vlen");
  if (world_rank() == 0) {
    // h5py writes a str attribute as a variable-length UTF-8 string: read like feast's own.
    const CheckpointMeta ours = read_checkpoint_meta(step_file(dir, 4));
    const std::string copy = elsewhere + "/vlen.h5";
    fs::copy_file(step_file(dir, 4), copy);
    const hid_t g = H5Fopen(copy.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    for (const auto& [name, value] : {std::pair{"config", ours.config}, std::pair{"layout", ours.layout}}) {
      EXPECT_GE(H5Adelete(g, name), 0) << name;
      const hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR);
      H5Tset_size(type, H5T_VARIABLE);
      H5Tset_cset(type, H5T_CSET_UTF8);
      const hid_t a = H5Acreate2(g, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
      const char* text = value.c_str();
      EXPECT_GE(H5Awrite(a, type, &text), 0) << name;
      H5Aclose(a);
      H5Sclose(space);
      H5Tclose(type);
    }
    H5Fclose(g);
    const CheckpointMeta theirs = read_checkpoint_meta(copy);
    EXPECT_EQ(theirs.config, ours.config);
    EXPECT_EQ(theirs.layout, ours.layout);

    const hid_t f = H5Fopen(step_file(dir, 4).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    for (const char* optional : {"config", "layout", "data_step", "lr_step", "rng_seed", "skipped_steps", "tp", "pp",
                                 "dp", "zero_stage", "micro_batch_size", "num_micro_batches", "global_batch"})
      EXPECT_GE(H5Adelete(f, optional), 0) << optional;
    H5Fclose(f);

    // Exporting needs the model: a file that stores no config asks for --config, and exports with it.
    const std::string toml = elsewhere + "/model.toml";
    std::ofstream(toml) << to_toml(c);
    try {
      testing::run_verb("export", {step_file(dir, 4), "--out", elsewhere + "/hf"});
      ADD_FAILURE() << "a checkpoint without its config was exported";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("stores no config"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--config FILE"), std::string::npos) << e.what();
    }
    EXPECT_EQ(testing::run_verb("export", {step_file(dir, 4), "--out", elsewhere + "/hf", "--config", toml}), 0);
    EXPECT_TRUE(fs::exists(elsewhere + "/hf/model.safetensors"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Config resume = make_config("gpt2", Layout{1, 2, 4, 2}, dir);
  resume.training.steps = 6;
  const Outcome r = train_run(resume);
  EXPECT_EQ(r.summary.first_step, 4);
  EXPECT_EQ(r.tokens_seen, 6 * 8 * 16);
}

TEST(Checkpoint, AnotherModelIsRefusedWithTheDifferences) {
  const std::string dir = fresh_dir("mismatch");
  Config c = make_config("gpt2", Layout{2, 2, 2, 1}, dir);
  c.training.exit_at_step = 2;
  train_run(c);
  Config other = make_config("gpt2", Layout{2, 2, 2, 1}, dir);
  other.model.n_layer = 6;
  other.model.n_embd = 128;
  // Its own run directory (the run directory refuses another model first, tests/train/
  // run_directory.sh); what is tested here is the checkpoint's own check, met when a run's
  // checkpoint.dir holds another model's checkpoints.
  other.logging.dir = dir + "/other_run";
  const std::string msg = error_of<ConfigError>(other);
  EXPECT_NE(msg.find("was saved for another run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.n_layer: 4 in the checkpoint, 6 configured"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.n_embd: 64 in the checkpoint, 128 configured"), std::string::npos) << msg;
}

// Where a dataset's bytes start in the file (HDF5 knows; contiguous layout).
haddr_t data_offset(const std::string& file, const std::string& dataset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t at = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return at;
}

void flip_bit(const std::string& file, uint64_t at, int bit) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char b = 0;
  f.read(&b, 1);
  b = char(b ^ (1 << bit));
  f.seekp(std::streamoff(at));
  f.write(&b, 1);
}

TEST(Checkpoint, CorruptFilesAreDetectedAndAutoResumeFallsBack) {
  const std::string dir = fresh_dir("corrupt");
  Config c = make_config("gpt2", Layout{2, 2, 2, 1}, dir);
  c.training.steps = 10;
  c.checkpoint.interval = 5;
  train_run(c);
  const std::string newest = step_file(dir, 10), good = work_dir() + "/good.h5";
  if (world_rank() == 0) fs::copy_file(newest, good, fs::copy_options::overwrite_existing);
  MPI_Barrier(MPI_COMM_WORLD);

  // Truncated: auto-resume falls back to step 5.
  if (world_rank() == 0) fs::resize_file(newest, fs::file_size(newest) / 2);
  MPI_Barrier(MPI_COMM_WORLD);
  Config resume = c;
  resume.training.steps = 12;
  const Outcome r = train_run(resume);
  EXPECT_EQ(r.summary.first_step, 5) << "auto-resume did not fall back past the truncated checkpoint";
  EXPECT_TRUE(fs::exists(newest + ".corrupt")) << "the truncated checkpoint was not set aside";

  // That run saved steps 10 and 12; one bit of a tensor of step 12 flips: the next run resumes at 10.
  const std::string twelve = step_file(dir, 12);
  if (world_rank() == 0) flip_bit(twelve, data_offset(twelve, "/optim/exp_avg_sq/ln_f.weight") + 8, 5);
  MPI_Barrier(MPI_COMM_WORLD);
  resume.training.steps = 13;
  EXPECT_EQ(train_run(resume).summary.first_step, 10) << "auto-resume did not fall back past the bit flip";
  EXPECT_TRUE(fs::exists(twelve + ".corrupt"));

  // When no checkpoint loads, the run fails naming each, and nothing is set aside (a retry must
  // not find an empty directory and start afresh).
  {
    const std::string lone = fresh_dir("corrupt_lone");
    const std::string file = step_file(lone, 10);
    if (world_rank() == 0) {
      fs::copy_file(good, file);
      fs::resize_file(file, fs::file_size(file) / 3);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    Config c2 = c;
    c2.checkpoint.dir = lone;
    const std::string msg = error_of<AgreedError>(c2);
    if (world_rank() == 0) {
      EXPECT_NE(msg.find("could be loaded"), std::string::npos) << msg;
    }
    EXPECT_TRUE(fs::exists(file)) << "a checkpoint was set aside although none loaded";
  }

  // Named explicitly, a corrupt file is an error naming it (and, for data, the dataset).
  const std::string bad = work_dir() + "/bad.h5";
  auto corrupt = [&](auto damage) {
    if (world_rank() == 0) {
      fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
      damage();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    Config explicit_file = c;
    explicit_file.checkpoint.resume = bad;
    explicit_file.checkpoint.dir = work_dir() + "/unused";
    return error_of<Error>(explicit_file);
  };
  std::string msg = corrupt([&] { fs::resize_file(bad, fs::file_size(bad) - 1000); });
  EXPECT_NE(msg.find(bad + " is not a readable feast checkpoint (truncated or corrupt HDF5 file: truncated file"),
            std::string::npos)
      << "truncated: " << msg;
  EXPECT_NE(msg.find("point it at another checkpoint (step_*.h5), or at its directory"), std::string::npos) << msg;

  msg = corrupt([&] { flip_bit(bad, data_offset(bad, "/model/layers.1.mlp.fc.weight") + 1234, 3); });
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  EXPECT_NE(msg.find("model/layers.1.mlp.fc.weight"), std::string::npos) << msg;

  std::mt19937_64 rng(7);
  const uint64_t size = fs::file_size(good);
  for (int i = 0; i < 4; ++i) {
    // Anywhere in the file, and twice in its first 64 KiB, where HDF5 keeps most metadata.
    const uint64_t at = i < 2 ? rng() % size : rng() % std::min<uint64_t>(size, 65536);
    const int bit = int(rng() % 8);
    msg = corrupt([&] { flip_bit(bad, at, bit); });
    EXPECT_NE(msg.find(bad), std::string::npos) << "bit " << bit << " of byte " << at << ": " << msg;
  }
}

// The whole dataset `name` of `file`, as HDF5 reads it.
std::vector<float> read_dataset(const std::string& file, const std::string& name) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t space = H5Dget_space(d);
  std::vector<float> v(size_t(H5Sget_simple_extent_npoints(space)));
  H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

TEST(Checkpoint, OneProcessReadsTheMasterWeightsAndRefusesWhatAResumeRefuses) {
  const std::string dir = fresh_dir("one_process");
  Config c = make_config("llama", Layout{2, 2, 2, 1}, dir);
  c.training.exit_at_step = 2;
  train_run(c);
  if (world_rank() == 0) {
    const std::string file = step_file(dir, 2);
    {
      const CheckpointWeights weights(file, c.model);
      const ParamTable table = decoder_param_table(c.model);
      for (const ParamSpec& spec : table.specs()) {
        if (spec.tied_to >= 0) continue;  // saved once, under its target's name
        EXPECT_EQ(weights.tensor(spec.name), read_dataset(file, "/optim/master/" + spec.name)) << spec.name;
      }
    }
    // A moment, which export and generation do not keep, fails its checksum: the file is refused
    // all the same, as a resume refuses it.
    flip_bit(file, data_offset(file, "/optim/exp_avg_sq/ln_f.weight") + 8, 5);
    std::string msg = "no error";
    try {
      const CheckpointWeights weights(file, c.model);
    } catch (const CheckpointError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find(file + ": checksum mismatch in dataset optim/exp_avg_sq/ln_f.weight"), std::string::npos) << msg;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace feast
