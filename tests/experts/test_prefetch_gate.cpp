// PrefetchGate: prefetching is held back only while demand reads saturate the disk AND few
// prefetches are used; while held back, one in probe_every still goes (so accuracy keeps being
// measured) and the gate reopens when either condition goes away.
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
  // Inaccurate but compute-bound (the disk idles half the time): prefetches fill the idle time.
  for (int i = 0; i < 30; ++i) {
    g.on_outcome(false);
    g.on_step(0.3, 1.0);
  }
  EXPECT_LT(g.accuracy(), 0.1);
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

}  // namespace
}  // namespace moeflow
