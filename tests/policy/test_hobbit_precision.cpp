// HOBBIT's LHU term in the live cache counts the uses served in high precision (the
// RouteEvent's precisions, set by --mode hobbit), not the gate-weight guess used for traces.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "policy/eviction_policy.h"

namespace moeflow {
namespace {

TEST(HobbitPrecision, LhuCountsTheServedPrecisionOverTheWeights) {
  PolicyOptions o;
  o.n_layers = 1;
  o.n_experts = 4;
  o.top_k = 2;
  o.weights = {0, 0, 1, 0};  // LHU only
  auto p = make_eviction_policy("hobbit", o);
  const int ex[] = {0, 1};
  // By weight expert 0 would be the high-precision one; the served precisions say expert 1.
  const float w[] = {0.8f, 0.2f};
  const uint8_t prec[] = {1, 0};
  for (uint64_t s = 0; s < 3; ++s) {
    RouteEvent ev{0, s, false, ex, w};
    ev.precisions = prec;
    p->on_route(ev);
  }
  const std::vector<ExpertKey> c = {{0, 0}, {0, 1}};
  EXPECT_EQ(p->choose_victim(c, 9), (ExpertKey{0, 0}));

  // Without precisions the weights decide, and the other expert goes.
  auto q = make_eviction_policy("hobbit", o);
  for (uint64_t s = 0; s < 3; ++s) q->on_route({0, s, false, ex, w});
  EXPECT_EQ(q->choose_victim(c, 9), (ExpertKey{0, 1}));
}

}  // namespace
}  // namespace moeflow
