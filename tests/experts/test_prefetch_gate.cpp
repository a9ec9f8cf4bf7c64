// PrefetchGate: prefetching is held back while demand reads saturate the disk AND few
// prefetches are used, or while prefetches gain nothing net (the misses their victims cause
// cancel the misses they avoid); while held back, one in probe_every still goes (so the
// outcomes keep being measured) and the gate reopens when the cause goes away.
#include <gtest/gtest.h>

#include "experts/prefetch_gate.h"

namespace moeflow {
namespace {

int admitted(PrefetchGate& g, int n) {
  int a = 0;
  for (int i = 0; i < n; ++i) a += g.admit();
  return a;
}

TEST(PrefetchGate, OpenUntilBothReadBoundAndInaccurate) {
  PrefetchGate g;
  EXPECT_FALSE(g.closed());
  EXPECT_EQ(admitted(g, 16), 16);
  // Inaccurate (2 in 5 used) but harmless and compute-bound (the disk idles most of the time):
  // prefetches fill the idle time.
  for (int i = 0; i < 30; ++i) {
    g.on_outcome(i % 5 < 2);
    g.on_step(0.3, 1.0);
  }
  EXPECT_LT(g.accuracy(), 0.8);
  EXPECT_GT(g.net_gain(), 0.3);
  EXPECT_FALSE(g.closed());
  EXPECT_EQ(admitted(g, 16), 16);
  // Read-bound as well: held back, one in eight probes.
  for (int i = 0; i < 30; ++i) g.on_step(0.95, 1.0);
  EXPECT_TRUE(g.closed());
  EXPECT_EQ(admitted(g, 64), 8);
}

TEST(PrefetchGate, ReopensWhenPrefetchesAreUsedAgain) {
  PrefetchGate g;
  for (int i = 0; i < 30; ++i) {
    g.on_outcome(false);
    g.on_step(1.0, 1.0);
  }
  ASSERT_TRUE(g.closed());
  for (int i = 0; i < 30; ++i) g.on_outcome(true);
  EXPECT_GT(g.accuracy(), 0.8);
  EXPECT_FALSE(g.closed());
  EXPECT_EQ(admitted(g, 10), 10);
}

TEST(PrefetchGate, AccurateReadBoundPrefetchingStaysOn) {
  PrefetchGate g;
  for (int i = 0; i < 50; ++i) {
    g.on_outcome(i % 10 != 0);  // 90% used
    g.on_step(2.0, 1.0);        // clamped to fully busy
  }
  EXPECT_NEAR(g.busy(), 1.0, 1e-3);
  EXPECT_FALSE(g.closed());
  g.on_step(1.0, 0.0);  // a step of no measurable length changes nothing
  EXPECT_NEAR(g.busy(), 1.0, 1e-3);
}

TEST(PrefetchGate, NoNetGainClosesItEvenWhenTheDiskIdles) {
  PrefetchGate g;
  // Half the prefetches are used, but each use is matched by a demand miss of a victim.
  for (int i = 0; i < 100; ++i) {
    g.on_outcome(i % 2 == 0);
    if (i % 2 == 0) g.on_harm();
    g.on_step(0.2, 1.0);
  }
  EXPECT_GT(g.accuracy(), 0.3);  // the read-bound rule alone would keep it open
  EXPECT_LT(g.net_gain(), 0.1);
  EXPECT_TRUE(g.closed());
  EXPECT_EQ(admitted(g, 64), 8);
  // The probes' outcomes reopen it once prefetches stop costing misses.
  for (int i = 0; i < 60; ++i) g.on_outcome(i % 2 == 0);
  EXPECT_GT(g.net_gain(), 0.3);
  EXPECT_FALSE(g.closed());
}

}  // namespace
}  // namespace moeflow
