// The step time split, MFU, the memory table and summary.json, without MPI: the parts of a
// split add up to the step by construction, the formulas give their textbook values, and the
// summary carries every key the sweep scripts read.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "train/metrics/metrics.h"
#include "train/metrics/run_summary.h"

namespace feast {
namespace {

StepTiming timing() {
  StepTiming t;
  t.total = 1.0;
  t.stage.compute = 0.4;
  t.stage.tp_comm = 0.1;
  t.stage.pp_wait = 0.15;
  t.stage.send_wait = 0.05;
  t.stage.data = 0.02;
  t.dp_comm = 0.08;
  t.dp_reduce = {0.05, 0.01};  // 50 ms of reductions, 10 ms of them waited for (in dp_comm)
  t.optimizer = 0.1;
  return t;
}

TEST(TimeSplit, PartsAddUpToTheStep) {
  const TimeSplit s = split_of(timing());
  EXPECT_DOUBLE_EQ(s.pp_idle, 0.2);  // receive waits and send waits
  EXPECT_NEAR(s.other, 0.1, 1e-12);  // what no timer saw
  EXPECT_DOUBLE_EQ(s.compute + s.tp_comm + s.pp_idle + s.dp_comm + s.optimizer + s.data + s.other, s.total);
  EXPECT_NEAR(s.efficiency(), 0.4 / (0.4 + 0.1 + 0.2 + 0.08), 1e-12);
}

TEST(TimeSplit, TimersThatOverrunTheStepLeaveNoNegativeRest) {
  StepTiming t = timing();
  t.total = 0.85;  // rounding: the parts measure 0.9
  const TimeSplit s = split_of(t);
  EXPECT_EQ(s.other, 0.0);
  EXPECT_NEAR(s.total, 0.9, 1e-12);  // the step is what its parts add up to
}

TEST(RunStatistics, LeavesTheFirstStepOutOfTheMean) {
  RunStatistics stats;
  TimeSplit slow, fast;
  slow.compute = slow.total = 10.0;
  fast.compute = fast.total = 1.0;
  stats.add(slow);
  EXPECT_DOUBLE_EQ(stats.mean().total, 10.0);  // one step: that step
  stats.add(fast);
  stats.add(fast);
  EXPECT_DOUBLE_EQ(stats.mean().total, 1.0);
  EXPECT_EQ(stats.steps(), 3);
}

TEST(Formulas, PipelineIdleAndMfu) {
  EXPECT_DOUBLE_EQ(idle_fraction_formula(ScheduleKind::kOneFOneB, 1, 8), 0.0);
  EXPECT_DOUBLE_EQ(idle_fraction_formula(ScheduleKind::kOneFOneB, 2, 1), 0.5);
  EXPECT_DOUBLE_EQ(idle_fraction_formula(ScheduleKind::kOneFOneB, 4, 8), 3.0 / 11.0);
  const DevicePeak peak{2.0, "test", "test"};  // 2 TFLOP/s per rank
  // 1e6 FLOPs per token, 4e6 tokens in 1 s on 4 ranks: 4e12 of 8e12.
  EXPECT_DOUBLE_EQ(mfu(1e6, 4'000'000, 1.0, peak, 4), 0.5);
  EXPECT_EQ(mfu(1e6, 1, 0.0, peak, 1), 0.0);
}

TEST(MemoryTable, OneRowPerRankForSmallJobsAndPerDistinctFiguresForLargeOnes) {
  std::vector<MemoryBytes> memory(8, MemoryBytes{1 << 20, 2 << 20, 1 << 20, 8 << 20});
  EXPECT_EQ(format_memory_table(memory, false).size(), 1u + 8u);
  std::vector<MemoryBytes> big;
  for (int r = 0; r < 64; ++r) big.push_back(MemoryBytes{double(1 + r / 32) * (1 << 20), 0, 0, 0});
  const std::vector<std::string> lines = format_memory_table(big, false);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[1].find("0-31 |"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("32-63 |"), std::string::npos) << lines[2];
  EXPECT_EQ(format_memory_table(big, true).size(), 65u);
}

// A run of 4 ranks (pp 2, dp 2, 3 micro-batches) whose steps each took timing().
RunFacts facts_of(const Config& config) {
  RunFacts facts;
  facts.config = &config;
  facts.world_size = 4;
  facts.pp = 2;
  facts.dp = 2;
  facts.micro_batches = 3;
  facts.tokens_per_step = 1000;
  facts.flops_per_token = 1e6;
  facts.peak = {1.0, "test", "test"};
  facts.memory = {MemoryBytes{1, 2, 3, 4}, MemoryBytes{5, 6, 7, 8}, MemoryBytes{}, MemoryBytes{}};
  return facts;
}
RunOutcome outcome_of_timed_steps() {
  RunOutcome outcome;
  outcome.ended = "finished";
  outcome.steps = 10;
  outcome.measured_steps = 9;
  outcome.mean_split = split_of(timing());
  return outcome;
}

TEST(Summary, JsonCarriesTheKeysTheSweepScriptsRead) {
  const Config config;
  const RunFacts facts = facts_of(config);
  const RunOutcome outcome = outcome_of_timed_steps();
  const nlohmann::json j = nlohmann::json::parse(summary_json(facts, outcome));
  for (const char* key : {"world_size", "tp", "pp", "dp", "zero_stage", "dp_sync", "micro_batches", "tokens_per_step",
                          "parameters", "flops_per_token", "final_loss", "final_val_loss", "tokens_per_s",
                          "ms_per_step", "time_split", "pp_idle_fraction", "pp_idle_formula", "efficiency", "mfu",
                          "peak_tflops_per_rank", "memory_bytes_per_rank"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_DOUBLE_EQ(j["pp_idle_formula"].get<double>(), 0.25);
  // Idle over the schedule's span: compute 0.4 + tp 0.1 + idle 0.2 + data 0.02.
  EXPECT_NEAR(j["pp_idle_fraction"].get<double>(), 0.2 / 0.72, 1e-12);
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 1000.0, 1e-9);
  EXPECT_TRUE(j["final_loss"].is_null());  // no step ran to give one
  EXPECT_EQ(j["memory_bytes_per_rank"][1][2].get<double>(), 7.0);
  double parts = 0;
  for (const auto& [key, seconds] : j["time_split"].items()) parts += seconds.get<double>();
  EXPECT_NEAR(parts * 1e3, j["ms_per_step"].get<double>(), 1e-9);
}

TEST(Summary, GradientReductionsAreReportedBesideTheSplitNotInIt) {
  const Config config;
  const RunFacts facts = facts_of(config);
  RunOutcome outcome = outcome_of_timed_steps();
  const nlohmann::json j = nlohmann::json::parse(summary_json(facts, outcome));
  EXPECT_DOUBLE_EQ(j["dp_reductions"]["dp_reduce_s"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(j["dp_reductions"]["dp_reduce_exposed_s"].get<double>(), 0.01);
  EXPECT_FALSE(j["time_split"].contains("dp_reduce_s"));  // overlaps the parts: not one of them
  bool found = false;
  for (const std::string& line : format_summary(facts, outcome))
    if (line.find("gradient reductions") != std::string::npos) {
      found = true;
      EXPECT_NE(line.find("50.0 ms in flight"), std::string::npos) << line;
      EXPECT_NE(line.find("10.0 ms of it exposed"), std::string::npos) << line;
      EXPECT_NE(line.find("80% hidden"), std::string::npos) << line;
    }
  EXPECT_TRUE(found);
  // Without data-parallel reductions there is no such line.
  outcome.mean_split.dp_reduce = outcome.mean_split.dp_reduce_exposed = 0;
  for (const std::string& line : format_summary(facts, outcome))
    EXPECT_EQ(line.find("gradient reductions"), std::string::npos) << line;
  // Means over steps carry them.
  RunStatistics stats;
  stats.add(split_of(timing()));
  stats.add(split_of(timing()));
  EXPECT_DOUBLE_EQ(stats.mean().dp_reduce, 0.05);
}

TEST(Progress, LineShowsThroughputMfuElapsedAndEta) {
  StepMetrics m;
  m.step = 12;
  m.tokens_per_s = 1234;
  m.mfu = 0.123;
  m.ms_per_step = 56.7;
  m.elapsed_s = 75;
  m.eta_s = 3725;
  const std::string line = format_progress(m, 300);
  for (const char* part : {"step     12/300", "1234 tok/s", "MFU 12.3%", "56.7 ms", "1:15 elapsed", "ETA 1:02:05"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
  m.peak_kind = "FMA peak";  // which peak, in the line
  EXPECT_NE(format_progress(m, 300).find("| MFU 12.3% of FMA peak |"), std::string::npos) << format_progress(m, 300);
  m.step = 300;
  EXPECT_EQ(format_progress(m, 300).find("ETA"), std::string::npos);  // done: no estimate
}

}  // namespace
}  // namespace feast
