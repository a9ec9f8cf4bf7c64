// Every EvictionPolicy hook honoured by the live cache (CachedExpertProvider), observed through
// what the cache holds: static's initial residents are resident before the first token, DAOP's
// placement changes after a prefill by its 1.05 rule, a policy that declines misses never
// evicts for them (they go through transient slots, bytes intact), and through the real forward
// pass a new sequence reaches the policy once per sequence with per-token prefill counts and
// token-counting logical time.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "delayed_link.h"
#include "experts/cached_provider.h"
#include "experts/device_transfer.h"
#include "gguf/gguf_file.h"
#include "policy/eviction_policy.h"
#include "runtime/engine.h"
#include "runtime/offload_session.h"
#include "support/offload_fixture.h"

namespace moeflow {
namespace {

constexpr int kLayers = 4, kExperts = 6, kTopK = 2;  // layer 0 has no experts

// The cache in "device" memory (a VRAM cache without a GPU: stand-in device slots, copies landing
// late on a lane thread, released slots retiring until the stand-in backend syncs), when given.
struct DeviceSide {
  test::DelayedLink link;
  test::StandInDevice backend;
};

std::unique_ptr<CachedExpertProvider> make(const test::FakeModel& m, const std::string& policy,
                                           std::vector<double> calib, int slots, bool per_layer,
                                           bool early = true, DeviceSide* device = nullptr) {
  PolicyOptions po;
  po.n_layers = kLayers;
  po.n_experts = kExperts;
  po.top_k = kTopK;
  po.calib_counts = std::move(calib);
  OffloadConfig cfg;
  cfg.budget_bytes = static_cast<uint64_t>(slots) * test::slot_bytes(m);
  cfg.per_layer = per_layer;
  cfg.top_k = kTopK;
  cfg.io_threads = 2;
  cfg.early_preemption = early;
  cfg.prefetch = false;
  auto store = std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index);
  if (device) {
    DeviceTransferOptions o;
    o.source = DeviceSource::File;
    cfg.allocator = &device->link.device_allocator();
    cfg.transfer = std::make_shared<DeviceChunkTransfer>(
        device->link, std::vector<std::span<const uint8_t>>{}, *store, o);
  }
  auto p = std::make_unique<CachedExpertProvider>(std::move(store),
                                                  make_eviction_policy(policy, po), cfg);
  if (device) p->attach_backend(device->backend);
  return p;
}

std::set<std::pair<int, int>> resident(const CachedExpertProvider& p) {
  std::set<std::pair<int, int>> r;
  for (int l = 1; l < kLayers; ++l)
    for (int e = 0; e < kExperts; ++e)
      if (p.residency(l, e) == Residency::Resident) r.insert({l, e});
  return r;
}

// One layer of one step as the MoE block drives the provider: every token's choice, the union
// in rank order, then acquire/release resident first, each view checked against the file.
void run_layer(CachedExpertProvider& p, const test::FakeModel& m, int layer,
               const std::vector<std::vector<int>>& tokens) {
  std::vector<int32_t> ex;
  std::vector<float> w;
  for (const auto& t : tokens)
    for (int e : t) ex.push_back(e), w.push_back(1.0f / kTopK);
  p.on_tokens_routed(layer, static_cast<int>(tokens.size()), kTopK, ex, w);
  std::vector<int> uni;
  for (int r = 0; r < kTopK; ++r)
    for (const auto& t : tokens)
      if (std::find(uni.begin(), uni.end(), t[r]) == uni.end()) uni.push_back(t[r]);
  p.on_route(layer, uni);
  std::stable_sort(uni.begin(), uni.end(),
                   [&](int a, int b) { return p.residency(layer, a) < p.residency(layer, b); });
  for (int e : uni) {
    const ExpertView v = p.acquire(layer, e);
    for (int proj = 0; proj < kNumExpertProj; ++proj)
      ASSERT_EQ(0,
                std::memcmp(v.proj[proj].data, m.slice(layer, e, proj), m.nbytes(layer, e, proj)))
          << "layer " << layer << " expert " << e;
    p.release(layer, e);
  }
}

// Calibration counts, layer-major; layer 0 has no experts.
std::vector<double> counts(std::vector<std::vector<double>> rows) {
  std::vector<double> c(kExperts, 0.0);
  for (auto& r : rows) c.insert(c.end(), r.begin(), r.end());
  return c;
}

TEST(PolicyHooks, StaticInitialResidentsAreResidentBeforeTheFirstToken) {
  test::FakeModel m;
  test::make_fake_model(m, "hooks_static", kLayers, kExperts, 40, 51);
  const auto calib = counts({{5, 9, 1, 7, 0, 2}, {0, 0, 8, 1, 9, 3}, {4, 4, 4, 6, 1, 0}});
  {
    // Two places per layer: each layer's two most used experts (ties: lower id first).
    auto p = make(m, "static", calib, 6, true);
    p->drain();
    const std::set<std::pair<int, int>> want = {{1, 1}, {1, 3}, {2, 4}, {2, 2}, {3, 3}, {3, 0}};
    EXPECT_EQ(resident(*p), want);
    const LayerOffloadStats t = p->stats().total();
    EXPECT_EQ(t.placements, 6u);
    EXPECT_EQ(t.acquires, 0u);
    EXPECT_GT(t.bytes_read, 0u);
    // The first token finds them: hits, and their bytes are the file's.
    p->begin_sequence();
    run_layer(*p, m, 1, {{1, 3}});
    run_layer(*p, m, 2, {{4, 2}});
    p->end_step();
    EXPECT_EQ(p->stats().total().hits, 4u);
    EXPECT_EQ(p->stats().total().misses, 0u);
  }
  {
    // One global budget of five places: the five most used experts of the whole model.
    auto p = make(m, "static", calib, 5, false);
    p->drain();
    const std::set<std::pair<int, int>> want = {{1, 1}, {2, 4}, {2, 2}, {1, 3}, {3, 3}};
    EXPECT_EQ(resident(*p), want);
  }
}

// DAOP's per-sequence placement, in RAM and in a VRAM cache (the same provider over device
// slots and a device transfer).
class DaopPlacement : public ::testing::TestWithParam<bool> {};

TEST_P(DaopPlacement, ChangesAfterAPrefill) {
  test::FakeModel m;
  test::make_fake_model(m, "hooks_daop", kLayers, kExperts, 40, 52);
  const std::vector<double> row = {9, 8, 1, 1, 1, 1};
  std::unique_ptr<DeviceSide> device = GetParam() ? std::make_unique<DeviceSide>() : nullptr;
  // Two places per layer and two transient slots for the misses DAOP declines.
  auto p = make(m, "daop", counts({row, row, row}), 8, true, true, device.get());
  EXPECT_EQ(p->capacity(), 2);
  EXPECT_EQ(p->stats().n_transient_slots, 2);
  p->drain();
  const std::set<std::pair<int, int>> placed = {{1, 0}, {1, 1}, {2, 0}, {2, 1}, {3, 0}, {3, 1}};
  ASSERT_EQ(resident(*p), placed);
  // A 4-token prompt: layer 1 routes (2, 0) for every token, layers 2 and 3 (0, 1). Counts of
  // layer 1: expert 2 -> 4, resident 0 -> 4, resident 1 -> 0. DAOP swaps the least used resident
  // for the most used outsider while the outsider's count exceeds 1.05x the resident's:
  // 4 > 1.05 * 0, so 2 replaces 1; next 0 (outsider) against 4 (resident 0): stop. Layers 2
  // and 3 route only residents: no swap.
  p->begin_sequence();
  run_layer(*p, m, 1, {{2, 0}, {2, 0}, {2, 0}, {2, 0}});
  run_layer(*p, m, 2, {{0, 1}, {0, 1}, {0, 1}, {0, 1}});
  run_layer(*p, m, 3, {{1, 0}, {1, 0}, {1, 0}, {1, 0}});
  p->end_step();
  p->drain();
  // During the prefill the placement holds: expert 2 was streamed, nothing was evicted.
  EXPECT_EQ(resident(*p), placed);
  EXPECT_EQ(p->stats().layers[1].streamed, 1u);
  EXPECT_EQ(p->stats().total().evictions, 0u);
  // The first decode step ends the prefill: the swap is read before layer 1 routes.
  run_layer(*p, m, 1, {{0, 1}});
  p->drain();
  std::set<std::pair<int, int>> swapped = placed;
  swapped.erase({1, 1});
  swapped.insert({1, 2});
  EXPECT_EQ(resident(*p), swapped);
  const OffloadStats st = p->stats();
  EXPECT_EQ(st.layers[1].placements, 3u);
  EXPECT_EQ(st.layers[1].evictions, 1u);
  EXPECT_EQ(st.layers[1].streamed, 2u);  // expert 1 is no longer placed: streamed now
  EXPECT_EQ(st.layers[2].placements + st.layers[3].placements, 4u);
  EXPECT_EQ(st.layers[2].evictions + st.layers[3].evictions, 0u);
  if (device) {
    EXPECT_GT(device->backend.syncs, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(RamAndVram, DaopPlacement, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Vram" : "Ram";
                         });

TEST(PolicyHooks, DecliningPolicyNeverEvictsAResidentForAMiss) {
  test::FakeModel m;
  test::make_fake_model(m, "hooks_decline", kLayers, kExperts, 40, 53);
  const auto calib = counts({{1, 2, 3, 4, 5, 6}, {6, 5, 4, 3, 2, 1}, {1, 6, 2, 5, 3, 4}});
  for (bool per_layer : {true, false})
    for (bool early : {true, false}) {
      SCOPED_TRACE(testing::Message() << (per_layer ? "per layer" : "global")
                                      << (early ? "" : ", no early preemption"));
      auto p = make(m, "daop", calib, per_layer ? 8 : 7, per_layer, early);
      p->drain();
      const auto placed = resident(*p);
      ASSERT_EQ(placed.size(), per_layer ? 6u : 5u);
      std::mt19937 rng(per_layer * 2 + early);
      p->begin_sequence();
      for (int step = 0; step < 40; ++step) {
        for (int l = 1; l < kLayers; ++l) {
          const int a = static_cast<int>(rng() % kExperts);
          const int b = (a + 1 + static_cast<int>(rng() % (kExperts - 1))) % kExperts;
          run_layer(*p, m, l, {{a, b}});
        }
        p->end_step();
        ASSERT_EQ(resident(*p), placed) << "step " << step;
      }
      const LayerOffloadStats t = p->stats().total();
      EXPECT_EQ(t.evictions, 0u);
      EXPECT_GT(t.streamed, 20u);
      EXPECT_EQ(t.misses, t.streamed);
      EXPECT_EQ(t.hits + t.misses + t.late, t.acquires);
    }
  // The transient slots come out of the budget: 7 slots, per layer, leave one place a layer.
  try {
    make(m, "daop", calib, 7, true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transient"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("top-k"), std::string::npos) << e.what();
  }
}

// Forwards to a real policy and records the hooks the forward pass makes the cache call.
class Spy final : public EvictionPolicy {
 public:
  explicit Spy(std::unique_ptr<EvictionPolicy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "spy(" + inner_->name() + ")"; }
  void on_access(ExpertKey k, uint64_t t) override { inner_->on_access(k, t); }
  void on_insert(ExpertKey k, uint64_t t) override { inner_->on_insert(k, t); }
  void on_evict(ExpertKey k) override { inner_->on_evict(k); }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t t) override {
    return inner_->choose_victim(c, t);
  }
  void on_route(const RouteEvent& ev) override {
    if (ev.layer == 0) steps.push_back(ev.step);
    inner_->on_route(ev);
  }
  void on_sequence_start() override {
    ++sequences;
    inner_->on_sequence_start();
  }
  void on_prefill_done(std::span<const double> c) override {
    double sum = 0;
    for (double x : c) sum += x;
    prefill_sums.push_back(sum);
    inner_->on_prefill_done(c);
  }
  int sequences = 0;
  std::vector<uint64_t> steps;  // RouteEvent::step of layer 0, one per forward pass
  std::vector<double> prefill_sums;

 private:
  std::unique_ptr<EvictionPolicy> inner_;
};

TEST(PolicyHooks, ForwardPassStartsEachSequenceAndCountsItsPrefillTokens) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("moeflow_hooks_model_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  const std::string cmd = std::string(MOEFLOW_BINARY) +
                          " gen-model --arch mixtral --preset tiny --type Q4_K --seed 9 -q -o " +
                          path + " > /dev/null 2>&1";
  ASSERT_EQ(0, std::system(cmd.c_str())) << cmd;
  std::shared_ptr<const GgufFile> file(GgufFile::open(path));
  auto store = ExpertStore::open(*file);
  const int n_layers = store->n_layers(), top_k = model_top_k(*file);
  PolicyOptions po;
  po.n_layers = n_layers;
  po.n_experts = store->max_experts();
  po.top_k = top_k;
  auto spy_owned = std::make_unique<Spy>(make_eviction_policy("moe-infinity", po));
  Spy* spy = spy_owned.get();
  OffloadConfig cfg;
  cfg.budget_bytes = store->total_expert_bytes() / 2;
  cfg.top_k = top_k;
  cfg.prefetch = false;
  auto provider =
      std::make_shared<CachedExpertProvider>(std::move(store), std::move(spy_owned), cfg);
  EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = 64;
  opt.batch = 64;  // each prompt in one forward pass
  Engine eng(file, opt, provider);
  const std::vector<int32_t> a = {1, 17, 42, 99, 3, 250, 7}, b = {1, 300, 11, 12, 5};
  eng.prefill(a, false, nullptr);
  for (int32_t tok : {5, 6, 7}) eng.decode(tok);
  eng.reset();
  eng.prefill(b, false, nullptr);
  for (int32_t tok : {8, 9}) eng.decode(tok);
  std::filesystem::remove(path);
  EXPECT_EQ(spy->sequences, 2);
  // Logical time counts tokens: a prompt is one step at its first token.
  EXPECT_EQ(spy->steps, (std::vector<uint64_t>{0, 7, 8, 9, 10, 15, 16}));
  // One count per prompt token, routed expert and MoE layer.
  ASSERT_EQ(spy->prefill_sums.size(), 2u);
  EXPECT_DOUBLE_EQ(spy->prefill_sums[0], 7.0 * top_k * n_layers);
  EXPECT_DOUBLE_EQ(spy->prefill_sums[1], 5.0 * top_k * n_layers);
}

}  // namespace
}  // namespace moeflow
