// The cache core shared by the live cache and the simulator, on hand-made cases whose outcome
// is known: partitions and capacity, candidates in (layer, expert) order, the route rules
// (declined misses stream, protected residents defer a miss), placement and the event log.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "policy/resident_set.h"

namespace moeflow {
namespace {

// Records what the core asks and evicts the first candidate (or a chosen expert).
class Probe final : public EvictionPolicy {
 public:
  std::string name() const override { return "probe"; }
  void on_access(ExpertKey k, uint64_t t) override {
    log.push_back("access " + str(k) + " " + std::to_string(t));
  }
  void on_insert(ExpertKey k, uint64_t t) override {
    log.push_back("insert " + str(k) + " " + std::to_string(t));
  }
  void on_evict(ExpertKey k) override { log.push_back("evict " + str(k)); }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    last_candidates.assign(c.begin(), c.end());
    for (ExpertKey k : c)
      if (k == prefer) return k;
    return c[0];
  }
  bool admit(ExpertKey k, uint64_t) override { return !(k == declined); }
  std::vector<ExpertKey> initial_residents(int layer, int capacity) override {
    asked.push_back({layer, capacity});
    return initial;
  }
  void on_prefill_done(std::span<const double> counts) override {
    prefill_counts.assign(counts.begin(), counts.end());
  }
  std::vector<ExpertKey> take_placement_requests() override { return requests; }

  static std::string str(ExpertKey k) {
    return std::to_string(k.layer) + "/" + std::to_string(k.expert);
  }
  std::vector<std::string> log;
  std::vector<ExpertKey> last_candidates, initial, requests;
  std::vector<std::pair<int, int>> asked;
  std::vector<double> prefill_counts;
  ExpertKey prefer{-1, -1}, declined{-1, -1};
};

ResidentSet::Config config(bool per_layer, int capacity) {
  ResidentSet::Config c;
  c.n_layers = 4;  // layer 0 has no experts
  c.n_experts = 4;
  c.layers = {1, 2, 3};
  c.per_layer = per_layer;
  c.capacity = capacity;
  return c;
}

auto any = [](ExpertKey) { return true; };

TEST(ResidentSet, LogicalTimeIsTokenTimesLayersPlusLayer) {
  EXPECT_EQ(logical_time(0, 3, 32), 3u);
  EXPECT_EQ(logical_time(135, 0, 32), 135u * 32);
}

TEST(ResidentSet, PerLayerPartitionsFillAndEvictOnlyTheirOwnLayer) {
  Probe p;
  ResidentSet r(config(true, 2), p);
  EXPECT_EQ(r.n_partitions(), 3);
  ExpertKey ev;
  for (int e : {3, 1}) {
    ASSERT_TRUE(r.make_room(1, 5, any, ev));
    EXPECT_EQ(ev.layer, -1);
    r.insert({1, e}, 5);
  }
  r.insert({2, 0}, 6);
  EXPECT_TRUE(r.full(1));
  EXPECT_FALSE(r.full(2));
  EXPECT_EQ(r.size(2), 1);
  // Candidates come in (layer, expert) order, whatever the insertion order was, and only from
  // the layer's own partition.
  ASSERT_TRUE(r.make_room(1, 7, any, ev));
  EXPECT_EQ(p.last_candidates, (std::vector<ExpertKey>{{1, 1}, {1, 3}}));
  EXPECT_EQ(ev, (ExpertKey{1, 1}));
  EXPECT_FALSE(r.contains({1, 1}));
  EXPECT_TRUE(r.contains({1, 3}));
  EXPECT_THROW(r.insert({1, 3}, 8), Error);  // already resident
  EXPECT_THROW(r.insert({0, 0}, 8), Error);  // a layer without experts
}

TEST(ResidentSet, GlobalBudgetOffersEveryLayerAndTheFilterDecides) {
  Probe p;
  ResidentSet r(config(false, 3), p);
  r.insert({3, 2}, 1);
  r.insert({1, 0}, 2);
  r.insert({2, 1}, 3);
  ExpertKey ev;
  // Nothing allowed: the caller must defer.
  EXPECT_FALSE(r.make_room(
      2, 4, [](ExpertKey) { return false; }, ev));
  EXPECT_EQ(r.size(1), 3);
  ASSERT_TRUE(r.make_room(
      2, 4, [](ExpertKey k) { return k.layer != 1; }, ev));
  EXPECT_EQ(p.last_candidates, (std::vector<ExpertKey>{{2, 1}, {3, 2}}));
  EXPECT_EQ(ev, (ExpertKey{2, 1}));
}

TEST(ResidentSet, RouteMissStreamsDeclinedLoadsAdmittedDefersWhenAllProtected) {
  Probe p;
  p.declined = {1, 2};
  ResidentSet r(config(true, 1), p);
  r.insert({1, 0}, 0);
  ExpertKey ev;
  // Declined: evicts nothing even though a victim is allowed.
  EXPECT_EQ(r.route_miss({1, 2}, 10, any, ev), ResidentSet::Miss::Stream);
  EXPECT_TRUE(r.contains({1, 0}));
  // The only resident is routed by the layer (protected): deferred, nothing changes.
  auto not_routed = [](ExpertKey k) { return !(k == ExpertKey{1, 0}); };
  EXPECT_EQ(r.route_miss({1, 1}, 10, not_routed, ev), ResidentSet::Miss::Defer);
  EXPECT_TRUE(r.contains({1, 0}));
  // Served, the routed expert is a candidate: the deferred miss takes its place.
  ASSERT_TRUE(r.serve_deferred({1, 1}, 10, any, ev));
  EXPECT_EQ(ev, (ExpertKey{1, 0}));
  EXPECT_TRUE(r.contains({1, 1}));
  EXPECT_EQ(r.route_miss({1, 3}, 11, any, ev), ResidentSet::Miss::Load);
  EXPECT_EQ(ev, (ExpertKey{1, 1}));
  const std::vector<std::string> want = {"insert 1/0 0", "evict 1/0", "insert 1/1 10", "evict 1/1",
                                         "insert 1/3 11"};
  EXPECT_EQ(p.log, want);
}

TEST(ResidentSet, PreloadAsksPerPartitionAndKeepsValidKeysWithinCapacity) {
  Probe p;
  p.initial = {{1, 0}, {1, 0}, {0, 1}, {1, 9}, {1, 1}, {1, 2}, {2, 3}};
  ResidentSet per(config(true, 2), p);
  std::vector<ExpertKey> got = per.preload();
  // Duplicates, layers without experts, ids out of range and a third expert of layer 1 are
  // dropped; the other partitions are asked with their capacity and get the same list.
  EXPECT_EQ(got, (std::vector<ExpertKey>{{1, 0}, {1, 1}, {2, 3}}));
  EXPECT_EQ(p.asked, (std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {3, 2}}));
  Probe g;
  g.initial = p.initial;
  ResidentSet glob(config(false, 2), g);
  EXPECT_EQ(glob.preload(), (std::vector<ExpertKey>{{1, 0}, {1, 1}}));
  EXPECT_EQ(g.asked, (std::vector<std::pair<int, int>>{{-1, 2}}));
  EXPECT_EQ(g.log.front(), "insert 1/0 0");
}

TEST(ResidentSet, PlaceHandsCountsToThePolicyAndLoadsItsRequests) {
  Probe p;
  p.requests = {{1, 3}, {1, 0}, {2, 2}};
  p.prefer = {1, 1};
  ResidentSet r(config(true, 2), p);
  r.insert({1, 0}, 0);
  r.insert({1, 1}, 0);
  std::vector<CacheEvent> log;
  r.set_log(&log);
  const std::vector<double> counts(16, 1.0);
  const auto placed = r.place(counts, 99, any);
  EXPECT_EQ(p.prefill_counts, counts);
  // (1,0) is already resident; (1,3) displaces the policy's victim; (2,2) finds a free place.
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_EQ(placed[0], (std::pair<ExpertKey, ExpertKey>{{1, 3}, {1, 1}}));
  EXPECT_EQ(placed[1], (std::pair<ExpertKey, ExpertKey>{{2, 2}, {-1, -1}}));
  const std::vector<CacheEvent> want = {{CacheEvent::Evict, {1, 1}, 0},
                                        {CacheEvent::Insert, {1, 3}, 99},
                                        {CacheEvent::Insert, {2, 2}, 99}};
  EXPECT_EQ(log, want);
}

TEST(ResidentSet, AChoiceOutsideTheCandidatesIsAnError) {
  struct Rogue final : EvictionPolicy {
    std::string name() const override { return "rogue"; }
    void on_access(ExpertKey, uint64_t) override {}
    void on_insert(ExpertKey, uint64_t) override {}
    void on_evict(ExpertKey) override {}
    ExpertKey choose_victim(std::span<const ExpertKey>, uint64_t) override { return {3, 3}; }
  } rogue;
  ResidentSet r(config(true, 1), rogue);
  r.insert({1, 0}, 0);
  try {
    r.pick_victim(1, 1, any);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rogue"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeflow
