#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

namespace feast {
namespace {

// 10 warm-up steps, then 101 steps of decay: steps 10 .. 110, the last at min_lr.
LrSchedule schedule(const char* kind) {
  LrSchedule t;
  t.steps = 111;
  t.warmup_steps = 10;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.kind = kind;
  return t;
}

TEST(LrSchedule, LinearWarmupThenCosineToTheFloor) {
  const LrSchedule t = schedule("cosine");
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(t, 4), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(t, 9), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(t, 10), 1.0);
  EXPECT_NEAR(learning_rate(t, 60), 0.55, 1e-12);  // half-way: the mean of peak and floor
  for (int64_t s = 11; s < t.steps; ++s) EXPECT_LT(learning_rate(t, s), learning_rate(t, s - 1));
}

TEST(LrSchedule, TheLastStepThatRunsIsAtTheFloor) {
  for (const char* kind : {"cosine", "linear"}) {
    LrSchedule t = schedule(kind);
    EXPECT_DOUBLE_EQ(learning_rate(t, t.steps - 1), t.min_lr) << kind;
    EXPECT_GT(learning_rate(t, t.steps - 2), t.min_lr) << kind;
    t.steps = 11;  // one step after warm-up: it is the last, at the floor
    EXPECT_DOUBLE_EQ(learning_rate(t, 10), t.min_lr) << kind;
    t.warmup_steps = 0;
    t.steps = 1;
    EXPECT_DOUBLE_EQ(learning_rate(t, 0), t.min_lr) << kind;
  }
}

TEST(LrSchedule, LinearAndConstant) {
  EXPECT_NEAR(learning_rate(schedule("linear"), 60), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(schedule("linear"), 35), 1.0 - 0.9 * 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(schedule("constant"), 100), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(schedule("constant"), 110), 1.0);
}

TEST(LrSchedule, NoWarmup) {
  LrSchedule t = schedule("cosine");
  t.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 1.0);
}

}  // namespace
}  // namespace feast
