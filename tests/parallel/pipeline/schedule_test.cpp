// Pipeline schedules checked for every p in 1..6, s < p, m in 1..8 and every kind: each
// micro-batch runs once each way, transfers sit where the executor expects them, memory and
// bubble match the textbook numbers, and all stages together run to the end without deadlock.
// Zero-bubble is checked against 1F1B, whose transfers it keeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
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
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 8; ++m)
        for (int s = 0; s < p; ++s) {
          SCOPED_TRACE(to_string(kind) + " p=" + std::to_string(p) + " s=" + std::to_string(s) +
                       " m=" + std::to_string(m));
          f(kind, p, s, m, build_schedule(kind, p, s, m));
        }
}

// The compute actions only, as a string like "FFBFBB", and their micro-batches.
std::string compute_pattern(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (a.type == A::kForward) out += 'F';
    if (a.type == A::kBackward) out += 'B';
  }
  return out;
}

std::vector<int> micro_batches_of(const std::vector<Action>& actions, ActionType type) {
  std::vector<int> out;
  for (const Action& a : actions)
    if (a.type == type) out.push_back(a.micro_batch);
  return out;
}

std::vector<int> iota(int m) {
  std::vector<int> v(m);
  for (int i = 0; i < m; ++i) v[i] = i;
  return v;
}

TEST(Schedule, EachMicroBatchForwardsThenBackwardsOnce) {
  for_each_case([](ScheduleKind, int, int, int m, const std::vector<Action>& actions) {
    EXPECT_EQ(micro_batches_of(actions, A::kForward), iota(m));
    EXPECT_EQ(micro_batches_of(actions, A::kBackward), iota(m));
    for (int k = 0; k < m; ++k) {
      const auto fwd = std::find(actions.begin(), actions.end(), Action{A::kForward, k});
      const auto bwd = std::find(actions.begin(), actions.end(), Action{A::kBackward, k});
      EXPECT_LT(fwd, bwd) << "micro-batch " << k;
    }
  });
}

TEST(Schedule, TransfersWrapComputeWhereNeighboursExist) {
  for_each_case([](ScheduleKind kind, int p, int s, int m, const std::vector<Action>& actions) {
    const bool has_prev = s > 0, has_next = s < p - 1;
    // Every transfer is adjacent to the compute of its micro-batch, on the right side.
    const Action none{A::kForward, -1};  // stands in for a neighbour past either end
    const auto at = [&](size_t j) { return j < actions.size() ? actions[j] : none; };
    const auto is = [](const Action& x, A type, int k) { return x.type == type && x.micro_batch == k; };
    for (size_t i = 0; i < actions.size(); ++i) {
      const int k = actions[i].micro_batch;
      const Action before = i > 0 ? actions[i - 1] : none, after = at(i + 1);
      switch (actions[i].type) {
        case A::kRecvActivation: EXPECT_TRUE(is(after, A::kForward, k)); break;
        case A::kSendActivation: EXPECT_TRUE(is(before, A::kForward, k)); break;
        case A::kRecvGrad: EXPECT_TRUE(is(after, A::kBackward, k)); break;
        case A::kSendGrad: EXPECT_TRUE(is(before, A::kBackward, k)); break;
        case A::kForward:
          EXPECT_EQ(is(before, A::kRecvActivation, k), has_prev);
          EXPECT_EQ(is(after, A::kSendActivation, k), has_next);
          break;
        case A::kBackward:
          EXPECT_EQ(is(before, A::kRecvGrad, k), has_next);
          EXPECT_EQ(is(after, A::kSendGrad, k), has_prev);
          break;
        case A::kBackwardInput:
        case A::kBackwardWeight: ADD_FAILURE() << "a split backward in " << to_string(kind); break;
      }
    }
    const std::vector<int> all = iota(m), empty;
    EXPECT_EQ(micro_batches_of(actions, A::kRecvActivation), has_prev ? all : empty);
    EXPECT_EQ(micro_batches_of(actions, A::kSendGrad), has_prev ? all : empty);
    EXPECT_EQ(micro_batches_of(actions, A::kSendActivation), has_next ? all : empty);
    EXPECT_EQ(micro_batches_of(actions, A::kRecvGrad), has_next ? all : empty);
    EXPECT_EQ(actions.size(), static_cast<size_t>(2 * m + m * (2 * has_prev + 2 * has_next)));
  });
}

TEST(Schedule, ComputeOrderFollowsTheKind) {
  for_each_case([](ScheduleKind kind, int p, int s, int m, const std::vector<Action>& actions) {
    if (kind == ScheduleKind::kGPipe) {
      EXPECT_EQ(compute_pattern(actions), std::string(m, 'F') + std::string(m, 'B'));
      return;
    }
    const int w = std::min(p - s - 1, m);
    std::string steady;
    for (int i = 0; i < m - w; ++i) steady += "FB";
    EXPECT_EQ(compute_pattern(actions), std::string(w, 'F') + steady + std::string(w, 'B'));
  });
}

TEST(Schedule, OneFOneBWarmUpLength) {
  for_each_case([](ScheduleKind kind, int p, int s, int m, const std::vector<Action>& actions) {
    if (kind != ScheduleKind::kOneFOneB) return;
    // Forwards before the first backward are the min(p - s - 1, m) warm-up ones plus the first
    // steady-state forward when there is one: min(p - s, m) in all. (A warm-up of m - 1 and of m
    // give the same list, so this count is all of the warm-up that can be observed.)
    const std::string pattern = compute_pattern(actions);
    EXPECT_EQ(static_cast<int>(pattern.find('B')), std::min(p - s, m));
  });
}

TEST(Schedule, OneFOneBMiddleStageExactly) {
  // p = 3, s = 1, m = 3: one warm-up forward, two forward/backward pairs, one cool-down backward;
  // the steady state's sends go out with the receive after them, but for the last gradient.
  const std::vector<Action> expected = {
      {A::kRecvActivation, 0}, {A::kForward, 0}, {A::kSendActivation, 0},
      {A::kRecvActivation, 1}, {A::kForward, 1}, {A::kSendActivation, 1, true},
      {A::kRecvGrad, 0},       {A::kBackward, 0}, {A::kSendGrad, 0, true},
      {A::kRecvActivation, 2}, {A::kForward, 2}, {A::kSendActivation, 2, true},
      {A::kRecvGrad, 1},       {A::kBackward, 1}, {A::kSendGrad, 1},
      {A::kRecvGrad, 2},       {A::kBackward, 2}, {A::kSendGrad, 2},
  };
  EXPECT_EQ(build_schedule(ScheduleKind::kOneFOneB, 3, 1, 3), expected);
}

TEST(Schedule, MaxInFlight) {
  for_each_case([](ScheduleKind kind, int p, int s, int m, const std::vector<Action>& actions) {
    if (kind == ScheduleKind::kOneFOneB) {
      EXPECT_LE(max_in_flight(actions), p - s);
      EXPECT_EQ(max_in_flight(actions), std::min(p - s, m));
    } else {
      EXPECT_EQ(max_in_flight(actions), m);
    }
  });
}

TEST(Schedule, MaxInFlightCountsHeldActivations) {
  EXPECT_EQ(max_in_flight({}), 0);
  EXPECT_EQ(max_in_flight({{A::kForward, 0}, {A::kBackward, 0}, {A::kForward, 1}}), 1);
  EXPECT_EQ(max_in_flight({{A::kForward, 0}, {A::kForward, 1}, {A::kBackward, 0},
                           {A::kForward, 2}, {A::kForward, 3}}),
            3);
}

TEST(Schedule, IdleFractionIsTheTextbookBubble) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 8; ++m)
        EXPECT_NEAR(ideal_idle_fraction(kind, p, m), double(p - 1) / (m + p - 1), 1e-12)
            << to_string(kind) << " p=" << p << " m=" << m;
}

// Runs all stages together as the executor would: a send is posted and never blocks, a receive
// blocks until the neighbour has posted the matching send. Messages between a pair of stages in
// one direction arrive in the order sent and must carry the micro-batch the receiver expects.
// Returns false if the stages stop with work left (deadlock).
bool runs_to_completion(ScheduleKind kind, int p, int m) {
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < p; ++s) lists.push_back(build_schedule(kind, p, s, m));
  std::map<std::tuple<int, int>, std::deque<int>> channel;  // (from, to) -> micro-batches posted
  std::vector<size_t> next(p, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      if (next[s] == lists[s].size()) continue;
      const Action& a = lists[s][next[s]];
      std::deque<int>* inbox = nullptr;
      if (a.type == A::kRecvActivation) inbox = &channel[{s - 1, s}];
      if (a.type == A::kRecvGrad) inbox = &channel[{s + 1, s}];
      if (inbox) {
        if (inbox->empty()) continue;
        EXPECT_EQ(inbox->front(), a.micro_batch) << "stage " << s << " received out of order";
        inbox->pop_front();
      }
      if (a.type == A::kSendActivation) channel[{s, s + 1}].push_back(a.micro_batch);
      if (a.type == A::kSendGrad) channel[{s, s - 1}].push_back(a.micro_batch);
      ++next[s];
      moved = true;
    }
  }
  for (const auto& [pair, pending] : channel) EXPECT_TRUE(pending.empty()) << "unreceived messages";
  for (int s = 0; s < p; ++s)
    if (next[s] != lists[s].size()) return false;
  return true;
}

TEST(Schedule, AllStagesRunWithoutDeadlock) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe, ScheduleKind::kZeroBubble})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 8; ++m)
        EXPECT_TRUE(runs_to_completion(kind, p, m)) << to_string(kind) << " p=" << p << " m=" << m;
}

// Runs all stages as NCCL runs their transfers: each stage's transfers one after another, each
// waiting until the neighbour's current transfer is its counterpart. That is a strict
// rendezvous, stricter than NCCL (which may buffer a small send), so a schedule that finishes
// here cannot deadlock for any message size. With `paired`, a send and the receive after it go
// out as one exchange where the schedule says so (Action::with_next), as the executor issues
// them. Returns false on a deadlock.
bool runs_in_lockstep(ScheduleKind kind, int p, int m, bool paired) {
  struct Op {
    bool send;
    int peer, tag;
  };
  std::vector<std::vector<std::vector<Op>>> transfers(static_cast<size_t>(p));  // per stage, per transfer
  for (int s = 0; s < p; ++s) {
    const std::vector<Action> actions = build_schedule(kind, p, s, m);
    bool pair_next = false;  // the last transfer goes out with this one (Action::with_next)
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (is_compute(a.type)) continue;
      const bool send = a.type == A::kSendActivation || a.type == A::kSendGrad;
      const bool toward_next = a.type == A::kSendActivation || a.type == A::kRecvGrad;
      const bool activation = a.type == A::kSendActivation || a.type == A::kRecvActivation;
      const Op op{send, toward_next ? s + 1 : s - 1, 2 * a.micro_batch + (activation ? 0 : 1)};
      if (paired && pair_next)
        transfers[size_t(s)].back().push_back(op);
      else
        transfers[size_t(s)].push_back({op});
      pair_next = a.with_next;
    }
  }
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      if (next[size_t(s)] == transfers[size_t(s)].size()) continue;
      const std::vector<Op>& mine = transfers[size_t(s)][next[size_t(s)]];
      const int q = mine.front().peer;
      if (next[size_t(q)] == transfers[size_t(q)].size()) continue;
      const std::vector<Op>& theirs = transfers[size_t(q)][next[size_t(q)]];
      bool match = mine.size() == theirs.size();
      for (const Op& o : mine)
        match = match && o.peer == q && std::any_of(theirs.begin(), theirs.end(), [&](const Op& t) {
                  return t.send != o.send && t.peer == s && t.tag == o.tag;
                });
      if (!match) continue;
      ++next[size_t(s)];
      ++next[size_t(q)];
      moved = true;
    }
  }
  for (int s = 0; s < p; ++s)
    if (next[size_t(s)] != transfers[size_t(s)].size()) return false;
  return true;
}

TEST(Schedule, PairedTransfersRunInLockstepAsNcclNeedsThem) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe, ScheduleKind::kZeroBubble})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 8; ++m)
        EXPECT_TRUE(runs_in_lockstep(kind, p, m, true)) << to_string(kind) << " p=" << p << " m=" << m;
  // Issued one by one, 1F1B's steady state has both neighbours sending first: stage 0 sends
  // micro-batch 1's activation while stage 1 sends micro-batch 0's gradient.
  EXPECT_FALSE(runs_in_lockstep(ScheduleKind::kOneFOneB, 2, 2, false));
}

// Zero-bubble, every p in 1..6, s < p, m in 1..10.
template <typename F>
void for_each_zero_bubble(F f) {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 10; ++m)
      for (int s = 0; s < p; ++s) {
        SCOPED_TRACE("zero-bubble p=" + std::to_string(p) + " s=" + std::to_string(s) + " m=" + std::to_string(m));
        f(p, s, m, build_schedule(ScheduleKind::kZeroBubble, p, s, m));
      }
}

TEST(ZeroBubble, IsOneFOneBWithEachBackwardSplitAndItsWeightPassDeferred) {
  for_each_zero_bubble([](int p, int s, int m, const std::vector<Action>& actions) {
    // Without the weight passes, and with each input-gradient pass read as a backward, the list
    // is 1F1B's, transfers and pairing included.
    std::vector<Action> rest;
    for (const Action& a : actions) {
      if (a.type == A::kBackwardWeight) continue;
      rest.push_back(a.type == A::kBackwardInput ? Action{A::kBackward, a.micro_batch, a.with_next} : a);
    }
    EXPECT_EQ(rest, build_schedule(ScheduleKind::kOneFOneB, p, s, m));
    // Each micro-batch's weight pass once, in micro-batch order, after its input-gradient pass.
    EXPECT_EQ(micro_batches_of(actions, A::kBackwardWeight), iota(m));
    EXPECT_EQ(micro_batches_of(actions, A::kBackward), std::vector<int>{});
    for (int k = 0; k < m; ++k) {
      const auto in = std::find(actions.begin(), actions.end(), Action{A::kBackwardInput, k});
      const auto w = std::find(actions.begin(), actions.end(), Action{A::kBackwardWeight, k});
      EXPECT_LT(in, w) << "micro-batch " << k;
    }
    // A weight pass never sits between a receive and the compute that needs it.
    for (size_t i = 1; i < actions.size(); ++i) {
      if (actions[i].type != A::kBackwardWeight) continue;
      EXPECT_TRUE(actions[i - 1].type != A::kRecvActivation && actions[i - 1].type != A::kRecvGrad) << "action " << i;
    }
  });
}

TEST(ZeroBubble, HoldsAtMostOneFOneBsPeakOnEveryStage) {
  for_each_zero_bubble([](int p, int, int m, const std::vector<Action>& actions) {
    EXPECT_LE(max_in_flight(actions), std::min(p, m));
  });
}

TEST(ZeroBubble, IdleFractionIsTheZeroBubbleFormula) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      const double zb = ideal_idle_fraction(ScheduleKind::kZeroBubble, p, m);
      if (m >= p)
        EXPECT_NEAR(zb, idle_fraction_formula(ScheduleKind::kZeroBubble, p, m), 1e-12) << "p=" << p << " m=" << m;
      else  // fewer micro-batches than stages: less to defer into the bubble, still never worse
        EXPECT_LE(zb, ideal_idle_fraction(ScheduleKind::kOneFOneB, p, m) + 1e-12) << "p=" << p << " m=" << m;
    }
  EXPECT_DOUBLE_EQ(idle_fraction_formula(ScheduleKind::kZeroBubble, 4, 8), 3.0 / 27.0);
  EXPECT_DOUBLE_EQ(idle_fraction_formula(ScheduleKind::kOneFOneB, 4, 8), 3.0 / 11.0);
}

TEST(ZeroBubble, FourStagesEightMicroBatchesExactly) {
  // The compute order of each stage of p = 4, m = 8 (F forward, B input gradient, W weight
  // gradient): the first stage defers nothing (it holds 4 already), later stages defer one more
  // each, and every stage ends with the weight passes its cool-down left.
  const std::vector<std::string> expected = {
      "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7",
      "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7",
      "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7",
      "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7",
  };
  for (int s = 0; s < 4; ++s) {
    std::string got;
    for (const Action& a : build_schedule(ScheduleKind::kZeroBubble, 4, s, 8)) {
      if (!is_compute(a.type)) continue;
      got += std::string(got.empty() ? "" : " ") + (a.type == A::kForward ? "F" : a.type == A::kBackwardInput ? "B" : "W") +
             std::to_string(a.micro_batch);
    }
    EXPECT_EQ(got, expected[size_t(s)]) << "stage " << s;
  }
}

TEST(Schedule, OnlySendsPairAndOnlyWithAReceiveFromTheSameNeighbour) {
  for_each_case([](ScheduleKind kind, int p, int s, int m, const std::vector<Action>& actions) {
    for (size_t i = 0; i < actions.size(); ++i) {
      if (!actions[i].with_next) continue;
      ASSERT_LT(i + 1, actions.size());
      const ActionType a = actions[i].type, b = actions[i + 1].type;
      EXPECT_TRUE((a == A::kSendActivation && b == A::kRecvGrad) || (a == A::kSendGrad && b == A::kRecvActivation))
          << to_string(kind) << " p=" << p << " s=" << s << " m=" << m << " action " << i;
    }
  });
}

TEST(Schedule, ParseAndPrintKinds) {
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::kOneFOneB);
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(parse_schedule_kind("zero-bubble"), ScheduleKind::kZeroBubble);
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe, ScheduleKind::kZeroBubble})
    EXPECT_EQ(parse_schedule_kind(to_string(kind)), kind);
}

TEST(Schedule, ParseErrorNamesKeyAndValue) {
  for (const std::string name : {"x", "", "1F1B", "interleaved"}) {
    try {
      parse_schedule_kind(name);
      ADD_FAILURE() << "no error for \"" << name << "\"";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                "parallel.schedule = \"" + name +
                    "\": expected \"1f1b\", \"gpipe\", \"zero-bubble\" or \"interleaved-1f1b\"");
    }
  }
}

TEST(Schedule, BadShapesThrow) {
  EXPECT_THROW(build_schedule(ScheduleKind::kOneFOneB, 0, 0, 4), ConfigError);
  EXPECT_THROW(build_schedule(ScheduleKind::kGPipe, 2, 0, 0), ConfigError);
  EXPECT_THROW(build_schedule(ScheduleKind::kOneFOneB, 2, 2, 4), Error);
  EXPECT_THROW(build_schedule(ScheduleKind::kOneFOneB, 2, -1, 4), Error);
  EXPECT_THROW(ideal_idle_fraction(ScheduleKind::kGPipe, 2, 0), ConfigError);
  try {
    build_schedule(ScheduleKind::kOneFOneB, 2, 0, 0);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.num_micro_batches"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace feast
