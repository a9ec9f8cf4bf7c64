// Live cache and simulator parity: a real Mixtral-8x7B routing trace is replayed through the live
// expert cache (CachedExpertProvider over a synthetic expert file of the trace's shape, driven as
// the forward pass drives it) and through the simulator with the matching configuration (no
// prefetching, demand loads only, copies that take no time). For every policy the factory knows,
// at three cache rates, with per-layer and global budgets, with and without early preemption,
// both must hit the same uses and insert and evict the same experts at the same logical times.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "experts/cached_provider.h"
#include "policy/eviction_policy.h"
#include "policy/policies.h"
#include "support/offload_fixture.h"
#include "support/require_data.h"
#include "trace/importers.h"
#include "trace/simulator.h"

namespace moeflow::trace {
namespace {

const std::string kMixtral = MOEFLOW_SHARED_DATA "/traces/mixtral-8x7b-instruct_speculative-moe/";

// Copies that take no time: every load has arrived when the next layer runs, as the live test
// waits for every load before the next layer routes.
HwProfile instant_hw() {
  HwProfile h;
  h.name = "instant";
  h.link_gb_s = 1e9;
  h.latency_ms = 0;
  h.expert_bytes = 1;
  h.expert_compute_ms = 1;
  h.layer_ms = 1;
  h.cpu_expert_ms = 0;
  return h;
}

PolicyOptions policy_options(const Trace& t, const std::string& policy) {
  PolicyOptions po;
  po.n_layers = t.n_layers;
  po.n_experts = t.n_experts;
  po.top_k = t.top_k;
  if (eviction_policy_needs_calibration(policy)) po.calib_counts = routing_counts(t);
  if (policy == "hobbit") po.weights = policies::hobbit_default_weights();
  return po;
}

struct Replay {
  std::vector<CacheEvent> events;
  std::vector<uint64_t> hits, uses;  // per layer, decode steps only (what the simulator counts)
  int capacity = 0;
};

// The forward pass's calls for one trace: a new request starts a sequence; a prompt is one step
// (its union of experts per layer, in the MoE planner's rank order), a decode token one step;
// per layer on_tokens_routed, on_route, then acquire/release resident first, in flight next,
// not started last.
Replay replay_live(const Trace& t, const test::FakeModel& m, const std::string& policy,
                   int capacity, bool per_layer, bool early) {
  Replay out;
  out.hits.assign(t.n_layers, 0);
  out.uses.assign(t.n_layers, 0);
  const std::vector<int> layers = t.recorded_layers();
  auto pol = make_eviction_policy(policy, policy_options(t, policy));
  const int parts = per_layer ? static_cast<int>(layers.size()) : 1;
  const int transient = pol->admits_everything() ? 0 : t.top_k;
  auto store =
      std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index, StoreOptions{false});
  OffloadConfig cfg;
  cfg.budget_bytes = static_cast<uint64_t>(capacity * parts + transient) * store->slot_bytes();
  cfg.per_layer = per_layer;
  cfg.top_k = t.top_k;
  cfg.io_threads = 1;
  cfg.early_preemption = early;
  cfg.prefetch = false;
  cfg.event_log = &out.events;
  CachedExpertProvider prov(std::move(store), std::move(pol), cfg);
  out.capacity = prov.capacity();
  prov.drain();
  std::vector<int32_t> experts;
  std::vector<float> weights;
  std::vector<int> uni, order;
  for (size_t s = 0; s < t.steps.size();) {
    const TokenStep& st = t.steps[s];
    if (s == 0 || st.request != t.steps[s - 1].request) prov.begin_sequence();
    size_t e = s + 1;
    if (st.phase == Phase::prefill)
      while (e < t.steps.size() && t.steps[e].phase == Phase::prefill &&
             t.steps[e].request == st.request)
        ++e;
    for (int l : layers) {
      experts.clear();
      weights.clear();
      int n = 0;
      for (size_t i = s; i < e; ++i)
        for (const LayerRoute& r : t.steps[i].routes)
          if (r.layer == l) {
            experts.insert(experts.end(), r.experts.begin(), r.experts.end());
            if (r.weights.size() == r.experts.size())
              weights.insert(weights.end(), r.weights.begin(), r.weights.end());
            else
              weights.insert(weights.end(), r.experts.size(), 0.f);
            ++n;
          }
      if (n == 0) continue;
      prov.on_tokens_routed(l, n, t.top_k, experts, weights);
      prov.drain();  // a placement started here has arrived before the layer routes
      uni.clear();
      for (int rank = 0; rank < t.top_k; ++rank)
        for (int tok = 0; tok < n; ++tok) {
          const int x = experts[static_cast<size_t>(tok) * t.top_k + rank];
          if (std::find(uni.begin(), uni.end(), x) == uni.end()) uni.push_back(x);
        }
      if (st.phase == Phase::decode)
        for (int x : uni) {
          ++out.uses[l];
          out.hits[l] += prov.residency(l, x) == Residency::Resident;
        }
      prov.on_route(l, uni);
      order = uni;
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return prov.residency(l, a) < prov.residency(l, b); });
      for (int x : order) {
        prov.acquire(l, x);
        prov.release(l, x);
      }
    }
    prov.end_step();
    s = e;
  }
  prov.drain();
  return out;
}

Replay replay_sim(const Trace& t, const std::string& policy, double rate, bool per_layer) {
  Replay out;
  SimConfig c;
  c.policy = policy;
  c.predictor = "none";
  c.cache_rate = rate;
  c.global_budget = !per_layer;
  c.hw = instant_hw();
  c.hobbit_weights = policies::hobbit_default_weights();
  c.events = &out.events;
  const SimResult r = simulate(t, c);
  out.capacity = r.capacity;
  for (const LayerStats& ls : r.layers) {
    out.hits.push_back(ls.hits);
    out.uses.push_back(ls.uses);
  }
  return out;
}

std::string describe(const CacheEvent& e) {
  return std::string(e.kind == CacheEvent::Insert ? "insert" : "evict") + " (" +
         std::to_string(e.key.layer) + "," + std::to_string(e.key.expert) + ")" +
         (e.kind == CacheEvent::Insert ? " t=" + std::to_string(e.t) : "");
}

void expect_same(const Replay& live, const Replay& sim) {
  ASSERT_EQ(live.capacity, sim.capacity);
  EXPECT_EQ(live.uses, sim.uses);
  EXPECT_EQ(live.hits, sim.hits);
  const size_t n = std::min(live.events.size(), sim.events.size());
  size_t i = 0;
  while (i < n && live.events[i] == sim.events[i]) ++i;
  EXPECT_EQ(i, std::max(live.events.size(), sim.events.size()))
      << "first difference at event " << i << " of " << live.events.size() << " live / "
      << sim.events.size() << " simulated: live "
      << (i < live.events.size() ? describe(live.events[i]) : "(end)") << ", simulator "
      << (i < sim.events.size() ? describe(sim.events[i]) : "(end)");
}

void check_trace(const std::string& path) {
  MOEFLOW_REQUIRE_PATH(path);
  const Trace t = load_any({path});
  test::FakeModel m;
  test::make_fake_model(m, "parity", t.n_layers, t.n_experts, 8, 3, /*first_moe_layer=*/0);
  size_t compared = 0;
  for (const std::string& policy : eviction_policy_names())
    for (double rate : {0.25, 0.5, 0.75})
      for (bool per_layer : {true, false}) {
        const Replay sim = replay_sim(t, policy, rate, per_layer);
        ASSERT_GT(sim.events.size(), 0u);
        for (bool early : {true, false}) {
          SCOPED_TRACE(testing::Message()
                       << policy << " rate " << rate << (per_layer ? " per layer" : " global")
                       << (early ? "" : " no early preemption"));
          const Replay live = replay_live(t, m, policy, sim.capacity, per_layer, early);
          expect_same(live, sim);
          compared += live.events.size();
        }
      }
  EXPECT_GT(compared, 1000u);
}

TEST(PolicyParity, HumanEvalDecodeTwoRequests) {
  check_trace(kMixtral + "routing_data_collected/humaneval_2_routing.jsonl");
}

TEST(PolicyParity, PromptPrefillThenDecode) {
  check_trace(kMixtral + "analysis/deep_analysis/routing_raw.jsonl");
}

}  // namespace
}  // namespace moeflow::trace
