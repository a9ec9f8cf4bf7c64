// Each eviction policy on small hand-made access sequences whose right victim is known.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "policy/eviction_policy.h"
#include "policy/policies.h"

namespace moeflow {
namespace {

PolicyOptions opts(int layers, int experts, int top_k = 2) {
  PolicyOptions o;
  o.n_layers = layers;
  o.n_experts = experts;
  o.top_k = top_k;
  return o;
}

std::vector<ExpertKey> layer_keys(int layer, std::initializer_list<int> es) {
  std::vector<ExpertKey> v;
  for (int e : es) v.push_back({layer, e});
  return v;
}

TEST(Factory, KnowsEveryPolicyAndRejectsUnknownNames) {
  auto names = eviction_policy_names();
  for (const char* n : {"lru", "lfu", "static", "moe-infinity", "hobbit", "daop"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  try {
    make_eviction_policy("fifo", opts(1, 4));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lru"), std::string::npos)
        << e.what();  // lists known names
  }
  // Placement policies need a calibration, and say so.
  EXPECT_THROW(make_eviction_policy("static", opts(1, 4)), Error);
  EXPECT_THROW(make_eviction_policy("daop", opts(1, 4)), Error);
  for (const std::string& n : names)
    EXPECT_EQ(eviction_policy_needs_calibration(n), n == "static" || n == "daop") << n;
  EXPECT_FALSE(eviction_policy_needs_calibration("fifo"));
  // Only DAOP declines misses (the live cache then reserves transient slots).
  auto o = opts(1, 4);
  o.calib_counts = {4, 3, 2, 1};
  for (const std::string& n : names)
    EXPECT_EQ(make_eviction_policy(n, o)->admits_everything(), n != "daop") << n;
}

TEST(Lru, EvictsLeastRecentlyUsed) {
  auto p = make_eviction_policy("lru", opts(1, 4));
  p->on_insert({0, 0}, 1);
  p->on_insert({0, 1}, 2);
  p->on_insert({0, 2}, 3);
  p->on_access({0, 0}, 4);
  auto c = layer_keys(0, {0, 1, 2});
  EXPECT_EQ(p->choose_victim(c, 5), (ExpertKey{0, 1}));
  p->on_access({0, 1}, 6);
  EXPECT_EQ(p->choose_victim(c, 7), (ExpertKey{0, 2}));
  // Never-seen candidates count as the oldest.
  auto c2 = layer_keys(0, {0, 1, 2, 3});
  EXPECT_EQ(p->choose_victim(c2, 8), (ExpertKey{0, 3}));
}

TEST(Lfu, EvictsLeastFrequentTiesToLeastRecentCountsSurviveEviction) {
  auto p = make_eviction_policy("lfu", opts(1, 4));
  for (int i = 0; i < 3; ++i) p->on_access({0, 0}, 10 + i);
  p->on_access({0, 1}, 20);
  p->on_access({0, 2}, 21);
  auto c = layer_keys(0, {0, 1, 2});
  EXPECT_EQ(p->choose_victim(c, 30), (ExpertKey{0, 1}));  // 1 and 2 used once; 1 less recent
  p->on_evict({0, 0});
  p->on_insert({0, 0}, 31);
  EXPECT_EQ(p->choose_victim(c, 32), (ExpertKey{0, 1}));  // 0 keeps its count of 3
  p->on_access({0, 1}, 33);
  p->on_access({0, 1}, 34);
  EXPECT_EQ(p->choose_victim(c, 35), (ExpertKey{0, 2}));
}

TEST(Static, PreloadsAndKeepsCalibratedTopExperts) {
  auto o = opts(2, 4);
  o.calib_counts = {1, 9, 5, 3,   // layer 0: 1 > 2 > 3 > 0
                    7, 0, 2, 8};  // layer 1: 3 > 0 > 2 > 1
  auto p = make_eviction_policy("static", o);
  EXPECT_EQ(p->initial_residents(0, 2), layer_keys(0, {1, 2}));
  EXPECT_EQ(p->initial_residents(1, 3), layer_keys(1, {3, 0, 2}));
  // Global budget: the most frequent over all layers.
  auto g = p->initial_residents(-1, 3);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0], (ExpertKey{0, 1}));
  EXPECT_EQ(g[1], (ExpertKey{1, 3}));
  EXPECT_EQ(g[2], (ExpertKey{1, 0}));
  // A miss displaces the least calibrated resident, however recently it was used.
  p->on_access({0, 0}, 100);
  EXPECT_EQ(p->choose_victim(layer_keys(0, {1, 2, 0}), 101), (ExpertKey{0, 0}));
  EXPECT_EQ(p->choose_victim(layer_keys(0, {1, 2, 3}), 102), (ExpertKey{0, 3}));
}

TEST(MoeInfinity, EvictsLowestEamActivationWithLayerDecayAndResetsPerRequest) {
  auto p = make_eviction_policy("moe-infinity", opts(4, 4));
  const int a[] = {0}, b[] = {1};
  // Layer 0: expert 0 activated 3 times, expert 1 once.
  for (uint64_t s = 0; s < 3; ++s) p->on_route({0, s, false, a, {}});
  p->on_route({0, 3, false, b, {}});
  EXPECT_EQ(p->choose_victim(layer_keys(0, {0, 1}), 10), (ExpertKey{0, 1}));
  // Same activation count, different layers: the deeper layer decays more and goes first.
  p->on_route({1, 4, false, b, {}});
  p->on_route({3, 4, false, b, {}});
  std::vector<ExpertKey> c = {{1, 1}, {3, 1}};
  EXPECT_EQ(p->choose_victim(c, 11), (ExpertKey{3, 1}));
  // The EAM is per request: after a reset, counts are gone and ties go to LRU.
  p->on_sequence_start();
  p->on_access({0, 0}, 20);
  p->on_access({0, 1}, 21);
  EXPECT_EQ(p->choose_victim(layer_keys(0, {0, 1}), 22), (ExpertKey{0, 0}));
}

TEST(Hobbit, SingleWeightReducesToLruOrSequenceLfu) {
  auto o = opts(2, 4);
  o.weights = {1, 0, 0, 0};  // recency only
  auto lru = make_eviction_policy("hobbit", o);
  lru->on_access({0, 0}, 1);
  lru->on_access({0, 1}, 2);
  lru->on_access({0, 2}, 3);
  lru->on_access({0, 0}, 4);
  EXPECT_EQ(lru->choose_victim(layer_keys(0, {0, 1, 2}), 5), (ExpertKey{0, 1}));

  o.weights = {0, 1, 0, 0};  // frequency in the current sequence only
  auto lfu = make_eviction_policy("hobbit", o);
  const int e0[] = {0, 1}, e1[] = {0, 2};
  const float w[] = {0.6f, 0.4f};
  lfu->on_route({0, 0, false, e0, w});
  lfu->on_route({0, 1, false, e1, w});
  lfu->on_route({0, 2, false, e1, w});
  // counts: 0 -> 3, 1 -> 1, 2 -> 2
  EXPECT_EQ(lfu->choose_victim(layer_keys(0, {0, 1, 2}), 3), (ExpertKey{0, 1}));
  // Sequence-level reset: new sequence, expert 1 used twice, others not at all.
  lfu->on_sequence_start();
  const int e2[] = {1, 3};
  lfu->on_route({0, 3, false, e2, w});
  lfu->on_route({0, 4, false, e2, w});
  ExpertKey v = lfu->choose_victim(layer_keys(0, {0, 1, 2}), 5);
  EXPECT_NE(v, (ExpertKey{0, 1}));
}

TEST(Hobbit, HighWeightUsesAndLayerDistanceScores) {
  auto o = opts(4, 4);
  o.weights = {0, 0, 1, 0};  // LHU: uses with a gate weight >= 1/top_k
  auto lhu = make_eviction_policy("hobbit", o);
  const int ex[] = {0, 1};
  const float w[] = {0.8f, 0.2f};  // expert 0 high, expert 1 low
  for (uint64_t s = 0; s < 3; ++s) lhu->on_route({0, s, false, ex, w});
  EXPECT_EQ(lhu->choose_victim(layer_keys(0, {0, 1}), 9), (ExpertKey{0, 1}));

  o.weights = {0, 0, 0, 1};  // FLD: the layer that runs next is kept, the one just run goes
  auto fld = make_eviction_policy("hobbit", o);
  const int one[] = {0};
  fld->on_route({1, 0, false, one, {}});  // layer 1 just routed: layer 2 is next, layer 1 farthest
  std::vector<ExpertKey> c = {{1, 0}, {2, 0}, {3, 0}};
  EXPECT_EQ(fld->choose_victim(c, 1), (ExpertKey{1, 0}));
  std::vector<ExpertKey> c2 = {{2, 0}, {3, 0}, {0, 0}};
  EXPECT_EQ(fld->choose_victim(c2, 1), (ExpertKey{0, 0}));
  EXPECT_THROW(({
                 auto o2 = opts(1, 4);
                 o2.weights = {1, 2};
                 make_eviction_policy("hobbit", o2);
               }),
               Error);
}

TEST(Daop, PlacementPerLayerTopKThenGlobalRemainder) {
  auto o = opts(3, 4, /*top_k=*/1);
  o.calib_counts = {10, 1, 1,  1,   // layer 0 dominated by expert 0
                    2,  3, 50, 40,  // layer 1: the most popular experts overall
                    1,  0, 0,  4};  // layer 2
  auto p = make_eviction_policy("daop", o);
  // Global budget of 5: each layer's top-1 first (0/0, 1/2, 2/3), then the global remainder
  // (1/3 with 40, then 0/0 is taken -> 1/1 with 3).
  auto g = p->initial_residents(-1, 5);
  std::vector<ExpertKey> want = {{0, 0}, {1, 2}, {2, 3}, {1, 3}, {1, 1}};
  EXPECT_EQ(g, want);
  EXPECT_EQ(p->initial_residents(1, 2), layer_keys(1, {2, 3}));
  // A layer the calibration never routed (dense, or not traced) gets no places.
  auto o2 = opts(3, 4, /*top_k=*/1);
  o2.calib_counts = {0, 0, 0, 0, 2, 3, 50, 40, 1, 0, 0, 4};
  std::vector<ExpertKey> want2 = {{1, 2}, {2, 3}, {1, 3}};
  EXPECT_EQ(make_eviction_policy("daop", o2)->initial_residents(-1, 3), want2);
  // Decode: misses are served without caching.
  EXPECT_FALSE(p->admit({0, 1}, 0));
}

TEST(Daop, PrefillSwapsNeedTheThreshold) {
  auto o = opts(1, 4, 1);
  o.calib_counts = {4, 3, 2, 1};
  auto p = make_eviction_policy("daop", o);
  for (ExpertKey k : p->initial_residents(0, 2)) p->on_insert(k, 0);  // residents 0, 1
  // Prefill counts: expert 2 beats resident 1 by 1.04x (no swap), expert 3 loses.
  std::vector<double> c = {110, 100, 104, 0};
  p->on_prefill_done(c);
  EXPECT_TRUE(p->take_placement_requests().empty());
  // 1.06x: swap expert 1 out for expert 2.
  c = {110, 100, 106, 0};
  p->on_prefill_done(c);
  auto req = p->take_placement_requests();
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0], (ExpertKey{0, 2}));
  EXPECT_TRUE(p->admit({0, 2}, 1));  // the wanted one is admitted
  EXPECT_EQ(p->choose_victim(layer_keys(0, {0, 1}), 1), (ExpertKey{0, 1}));  // the doomed one goes
  p->on_evict({0, 1});
  p->on_insert({0, 2}, 1);
  EXPECT_FALSE(p->admit({0, 1}, 2));
  EXPECT_TRUE(p->take_placement_requests().empty());
}

}  // namespace
}  // namespace moeflow
