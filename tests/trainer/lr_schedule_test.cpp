#include "trainer/lr_schedule.h"

#include <gtest/gtest.h>

namespace feast {
namespace {

TrainingConfig schedule(const char* kind) {
  TrainingConfig t;
  t.steps = 110;
  t.warmup_steps = 10;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.lr_schedule = kind;
  return t;
}

TEST(LrSchedule, LinearWarmupThenCosineToTheFloor) {
  const TrainingConfig t = schedule("cosine");
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(t, 4), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(t, 9), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(t, 10), 1.0);
  EXPECT_NEAR(learning_rate(t, 60), 0.55, 1e-12);  // half-way: the mean of peak and floor
  EXPECT_NEAR(learning_rate(t, 110), 0.1, 1e-12);
  for (int64_t s = 11; s < 110; ++s) EXPECT_LT(learning_rate(t, s), learning_rate(t, s - 1));
}

TEST(LrSchedule, LinearAndConstant) {
  EXPECT_NEAR(learning_rate(schedule("linear"), 60), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(schedule("linear"), 35), 1.0 - 0.9 * 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(schedule("constant"), 100), 1.0);
}

TEST(LrSchedule, NoWarmup) {
  TrainingConfig t = schedule("cosine");
  t.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 1.0);
}

}  // namespace
}  // namespace feast
