// Interleaved 1F1B checked for p in 2..6, v in 2..4 and m every multiple of p up to 3p: each
// (micro-batch, chunk) pair runs once each way, forward in chunk order and backward in reverse,
// transfers go to the neighbour that holds the next or previous chunk, all stages together run
// to the end (with receives matched by tag, as MPI matches them), the warm-up and the
// activations held are Megatron-LM's, and the ideal timeline's idle is (p - 1)/(vm + p - 1).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline/schedule.h"

namespace feast {
namespace {

using A = ActionType;

template <typename F>
void for_each_case(F f) {
  for (int p = 2; p <= 6; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 3 * p; m += p) {
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
        f(p, v, m);
      }
}

TEST(Interleaved, EachPairForwardsThenBackwardsOnceInChunkOrder) {
  for_each_case([](int p, int v, int m) {
    for (int s = 0; s < p; ++s) {
      std::map<std::pair<int, int>, int> state;  // (micro-batch, chunk) -> 1 forwarded, 2 done
      std::vector<int> last_forward_chunk(size_t(m), -1), last_backward_chunk(size_t(m), v);
      for (const Action& a : build_schedule(ScheduleKind::kInterleaved, p, s, m, v)) {
        ASSERT_GE(a.chunk, 0);
        ASSERT_LT(a.chunk, v);
        int& st = state[{a.micro_batch, a.chunk}];
        if (a.type == A::kForward) {
          EXPECT_EQ(st, 0);
          st = 1;
          EXPECT_EQ(a.chunk, last_forward_chunk[size_t(a.micro_batch)] + 1) << "chunks forward in order";
          last_forward_chunk[size_t(a.micro_batch)] = a.chunk;
        }
        if (a.type == A::kBackward) {
          EXPECT_EQ(st, 1);
          st = 2;
          EXPECT_EQ(a.chunk, last_backward_chunk[size_t(a.micro_batch)] - 1) << "chunks backward in reverse";
          last_backward_chunk[size_t(a.micro_batch)] = a.chunk;
        }
        EXPECT_FALSE(a.with_next) << "interleaved transfers are not paired";
      }
      EXPECT_EQ(state.size(), size_t(m * v));
      for (const auto& [key, st] : state) EXPECT_EQ(st, 2);
    }
  });
}

TEST(Interleaved, NeighboursWrapFromTheLastStageToTheFirst) {
  // p = 3, v = 2: virtual stages 0..5 on stages 0 1 2 0 1 2.
  EXPECT_EQ(upstream_stage(3, 0, 0), -1);
  EXPECT_EQ(upstream_stage(3, 0, 1), 2);
  EXPECT_EQ(upstream_stage(3, 2, 1), 1);
  EXPECT_EQ(downstream_stage(3, 2, 0, 2), 0);
  EXPECT_EQ(downstream_stage(3, 2, 1, 2), -1);
  EXPECT_EQ(downstream_stage(3, 1, 1, 2), 2);
  // Only the first virtual stage receives no activation, only the last no gradient.
  for (int s = 0; s < 3; ++s)
    for (const Action& a : build_schedule(ScheduleKind::kInterleaved, 3, s, 3, 2)) {
      const int j = a.chunk * 3 + s;
      if (a.type == A::kRecvActivation || a.type == A::kSendGrad) {
        EXPECT_GT(j, 0);
      }
      if (a.type == A::kSendActivation || a.type == A::kRecvGrad) {
        EXPECT_LT(j, 5);
      }
    }
}

// All stages' lists run together, each receive waiting until its message (matched by virtual
// stage, micro-batch and direction, as the executor's tags do) has been sent; sends never wait.
bool runs_to_completion(int p, int v, int m) {
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < p; ++s) lists.push_back(build_schedule(ScheduleKind::kInterleaved, p, s, m, v));
  std::set<std::tuple<int, int, bool>> posted;  // (receiving virtual stage, micro-batch, activation)
  std::vector<size_t> next(size_t(p), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s)
      for (; next[size_t(s)] < lists[size_t(s)].size(); ++next[size_t(s)]) {
        const Action& a = lists[size_t(s)][next[size_t(s)]];
        const int j = a.chunk * p + s;
        if (a.type == A::kRecvActivation || a.type == A::kRecvGrad) {
          const auto key = std::make_tuple(j, a.micro_batch, a.type == A::kRecvActivation);
          if (!posted.count(key)) break;
          posted.erase(key);
        }
        if (a.type == A::kSendActivation) {
          EXPECT_TRUE(posted.insert({j + 1, a.micro_batch, true}).second);
        }
        if (a.type == A::kSendGrad) {
          EXPECT_TRUE(posted.insert({j - 1, a.micro_batch, false}).second);
        }
        moved = true;
      }
  }
  EXPECT_TRUE(posted.empty()) << "unreceived messages";
  for (int s = 0; s < p; ++s)
    if (next[size_t(s)] != lists[size_t(s)].size()) return false;
  return true;
}

TEST(Interleaved, AllStagesRunWithoutDeadlock) {
  for_each_case([](int p, int v, int m) { EXPECT_TRUE(runs_to_completion(p, v, m)); });
}

TEST(Interleaved, WarmUpAndActivationsHeldAreMegatrons) {
  for_each_case([](int p, int v, int m) {
    for (int s = 0; s < p; ++s) {
      const std::vector<Action> actions = build_schedule(ScheduleKind::kInterleaved, p, s, m, v);
      int warmup = 0;
      for (const Action& a : actions) {
        if (a.type == A::kBackward) break;
        warmup += a.type == A::kForward;
      }
      const int expected = std::min((p - s - 1) * 2 + (v - 1) * p, m * v);
      // The steady state's first forward also runs before the first backward.
      EXPECT_EQ(warmup, std::min(expected + 1, m * v)) << "stage " << s;
      EXPECT_EQ(max_in_flight_total(actions), std::min(expected + 1, m * v)) << "stage " << s;
      EXPECT_LE(max_in_flight(actions), max_in_flight_total(actions));
      EXPECT_LE(max_in_flight(actions), m);
    }
    // The first stage holds the most: less than 1F1B's p per chunk on the stages after it.
    EXPECT_GE(max_in_flight_total(build_schedule(ScheduleKind::kInterleaved, p, 0, m, v)),
              max_in_flight_total(build_schedule(ScheduleKind::kInterleaved, p, p - 1, m, v)));
  });
}

TEST(Interleaved, IdleFractionIsTheInterleavedFormula) {
  for_each_case([](int p, int v, int m) {
    const double formula = double(p - 1) / double(v * m + p - 1);
    EXPECT_NEAR(idle_fraction_formula(ScheduleKind::kInterleaved, p, m, v), formula, 1e-12);
    EXPECT_NEAR(ideal_idle_fraction(ScheduleKind::kInterleaved, p, m, v), formula, 1e-12);
    // v times smaller a bubble than 1F1B's at the same m, over a v times longer step.
    EXPECT_LT(ideal_idle_fraction(ScheduleKind::kInterleaved, p, m, v),
              ideal_idle_fraction(ScheduleKind::kOneFOneB, p, m));
  });
  EXPECT_STREQ(idle_fraction_formula_text(ScheduleKind::kInterleaved), "(p-1)/(vm+p-1)");
}

TEST(Interleaved, FourStagesTwoChunksFourMicroBatchesOnTheFirstStage) {
  // Megatron-LM's order: warm-up (4-0-1)*2 + (2-1)*4 = 10 forwards: micro-batches 0..3 on chunk
  // 0, 0..3 on chunk 1, then 4 and 5 on chunk 0; then forwards and backwards alternate.
  std::string order;
  for (const Action& a : build_schedule(ScheduleKind::kInterleaved, 4, 0, 8, 2))
    if (is_compute(a.type))
      order += (a.type == A::kForward ? "F" : "B") + std::to_string(a.micro_batch) + "." + std::to_string(a.chunk) + " ";
  const std::string expected = "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 ";
  EXPECT_EQ(order.substr(0, expected.size()), expected);
}

TEST(Interleaved, BadShapesNameTheirKeys) {
  auto message = [](int p, int m, int v) {
    try {
      build_schedule(ScheduleKind::kInterleaved, p, 0, m, v);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(2, 3, 2).find("multiple of 2"), std::string::npos) << message(2, 3, 2);
  EXPECT_NE(message(2, 4, 1).find("parallel.virtual_stages"), std::string::npos) << message(2, 4, 1);
  EXPECT_NE(message(1, 4, 2).find("parallel.pp >= 2"), std::string::npos) << message(1, 4, 2);
  EXPECT_THROW(build_schedule(ScheduleKind::kOneFOneB, 2, 0, 4, 2), Error);
  EXPECT_EQ(parse_schedule_kind("interleaved-1f1b"), ScheduleKind::kInterleaved);
  EXPECT_EQ(to_string(ScheduleKind::kInterleaved), "interleaved-1f1b");
}

}  // namespace
}  // namespace feast
