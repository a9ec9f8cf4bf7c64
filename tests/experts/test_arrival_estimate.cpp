#include <gtest/gtest.h>

#include "experts/arrival_estimate.h"

namespace moeflow {
namespace {

// Routes layers 0..n-1 of one step, `layer_s` apart, with `busy_s` of demand reads in each.
void run_step(ArrivalEstimate& a, int n, double& t, double& busy, double layer_s, double busy_s) {
  for (int l = 0; l < n; ++l) {
    a.on_route(l, t, busy);
    t += layer_s;
    busy += busy_s;
  }
  a.on_step_end();
}

TEST(ArrivalEstimate, AllowsEverythingUntilMeasured) {
  ArrivalEstimate a(4, 2);
  EXPECT_TRUE(a.in_time(1, uint64_t(1) << 40));
  a.on_read(100'000'000, 0.1);  // reads measured, layers not yet
  EXPECT_TRUE(a.in_time(1, uint64_t(1) << 40));
}

TEST(ArrivalEstimate, LeadTimeAgainstCopyTimeOnAFreeDisk) {
  ArrivalEstimate a(8, 2);
  double t = 1, busy = 0;
  run_step(a, 8, t, busy, 0.010, 0);
  a.on_read(100'000'000, 0.1);  // 1 ns/byte per thread; an expert spreads over 2 threads
  EXPECT_NEAR(a.layer_seconds(), 0.010, 1e-9);
  EXPECT_DOUBLE_EQ(a.free_share(), 1.0);
  EXPECT_NEAR(a.copy_seconds(100'000'000), 0.050, 1e-12);
  a.on_route(0, t, busy);
  a.on_route(1, t + 0.010, busy);
  // 100 MB takes 50 ms; half of it needs a 25 ms lead: 3 layers ahead, not 1 or 2.
  EXPECT_EQ(a.distance(2), 1);
  EXPECT_FALSE(a.in_time(2, 100'000'000));
  EXPECT_FALSE(a.in_time(3, 100'000'000));
  EXPECT_TRUE(a.in_time(4, 100'000'000));
  EXPECT_TRUE(a.in_time(2, 40'000'000));  // a smaller copy fits one layer ahead
  // Not ahead of the routed layer: the next token's, through the rest of this step.
  EXPECT_EQ(a.distance(1), 8);
  EXPECT_EQ(a.distance(0), 7);
  EXPECT_TRUE(a.in_time(0, 100'000'000));
}

// With a slow disk the layers are long because they wait for demand reads; speculative reads
// only get the rest of the time.
TEST(ArrivalEstimate, OnlyTheTimeDemandReadsLeaveFreeCounts) {
  ArrivalEstimate a(4, 2);
  double t = 1, busy = 0;
  run_step(a, 4, t, busy, 0.100, 0.080);
  run_step(a, 4, t, busy, 0.100, 0.080);
  a.on_read(100'000'000, 0.1);
  EXPECT_NEAR(a.layer_seconds(), 0.100, 1e-9);
  EXPECT_NEAR(a.free_share(), 0.2, 1e-9);
  a.on_route(0, t, busy);
  // 20 ms free per layer against 25 ms: two layers ahead, not one.
  EXPECT_FALSE(a.in_time(1, 100'000'000));
  EXPECT_TRUE(a.in_time(2, 100'000'000));
}

TEST(ArrivalEstimate, StepBoundariesAreNotLayerTimes) {
  ArrivalEstimate a(4, 1);
  double t = 1, busy = 0;
  run_step(a, 4, t, busy, 0.010, 0);
  t += 5;  // sampling, a pause between requests
  run_step(a, 4, t, busy, 0.010, 0);
  EXPECT_NEAR(a.layer_seconds(), 0.010, 1e-9);
  // Before the step's first route the target is target + 1 layers away.
  EXPECT_EQ(a.distance(0), 1);
  EXPECT_EQ(a.distance(3), 4);
}

}  // namespace
}  // namespace moeflow
