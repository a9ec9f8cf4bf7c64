// DuoServe's prefill pipeline (OffloadConfig::prefill_slots): in a multi-token step, routed
// misses that would evict a cached expert stream through slots of their own, read in execution
// order as those slots free, so the prompt leaves the decode steps' experts in place. On the
// host cache and on a device cache (released slots retire; the pipeline settles them ahead).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "delayed_link.h"
#include "experts/cached_provider.h"
#include "experts/device_transfer.h"
#include "support/offload_fixture.h"
#include "support/stand_in_device.h"

namespace moeflow::test {
namespace {

constexpr int kLayer = 1;  // layer 0 of the fake model is dense
constexpr int kExperts = 8;

struct Rig {
  FakeModel m;
  DelayedLink link;
  StandInDevice be;
  std::unique_ptr<CachedExpertProvider> prov;
};

// `places` cached experts plus `stream` pipeline slots, top-1, one global budget.
void make(Rig& s, const char* tag, int places, int stream, bool device) {
  make_fake_model(s.m, tag, 3, kExperts, 160, 21);
  auto store = std::make_unique<ExpertStore>(std::vector<std::string>{s.m.path}, s.m.index);
  OffloadConfig cfg;
  cfg.budget_bytes = static_cast<uint64_t>(places + stream) * store->slot_bytes();
  cfg.top_k = 1;
  cfg.io_threads = 2;
  cfg.prefetch = false;
  cfg.prefill_slots = stream;
  if (device) {
    DeviceTransferOptions o;
    o.source = DeviceSource::File;
    cfg.allocator = &s.link.device_allocator();
    cfg.transfer = std::make_shared<DeviceChunkTransfer>(
        s.link, std::vector<std::span<const uint8_t>>{std::span<const uint8_t>(s.m.bytes)}, *store,
        o);
  }
  s.prov =
      std::make_unique<CachedExpertProvider>(std::move(store), std::make_unique<TestLru>(), cfg);
  if (device) s.prov->attach_backend(s.be);
}

void expect_bytes(const FakeModel& m, const ExpertView& v, int l, int e) {
  for (int p = 0; p < kNumExpertProj; ++p)
    ASSERT_EQ(0, std::memcmp(v.proj[p].data, m.slice(l, e, p), m.nbytes(l, e, p)))
        << "layer " << l << " expert " << e << " proj " << p;
}

// One step of n tokens routed to `experts` (one each, top-1), every expert acquired and
// released in order. `before_acquire(i)` runs before the i-th acquire.
template <typename Fn>
void step(Rig& s, const std::vector<int>& experts, Fn&& before_acquire) {
  const std::vector<float> w(experts.size(), 1.0f);
  s.prov->on_tokens_routed(kLayer, (int)experts.size(), 1, experts, w);
  s.prov->on_route(kLayer, experts);
  for (size_t i = 0; i < experts.size(); ++i) {
    before_acquire(i);
    expect_bytes(s.m, s.prov->acquire(kLayer, experts[i]), kLayer, experts[i]);
    s.prov->release(kLayer, experts[i]);
  }
  s.prov->end_step();
}
void step(Rig& s, const std::vector<int>& experts) {
  step(s, experts, [](size_t) {});
}

// Decode steps put experts 0..2 in the cache, then a prompt routes all eight.
std::vector<int> all_experts() {
  std::vector<int> v(kExperts);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

bool cached(const CachedExpertProvider& p, int e) { return p.ready_chunks(kLayer, e) == 7u; }

TEST(PrefillPipeline, APromptLeavesTheDecodeExpertsCached) {
  for (const bool device : {false, true}) {
    SCOPED_TRACE(device ? "device cache" : "host cache");
    Rig s;
    make(s, device ? "pipe_dev" : "pipe_host", 3, 2, device);
    for (int e : {0, 1, 2}) step(s, {e});
    step(s, all_experts(), [&](size_t i) {
      // The pipeline reads ahead: when expert i is acquired, the next one is already on its
      // way (its slot freed by the release before, or by the settle at this acquire).
      if (i >= 3 && i + 1 < kExperts && !device) {
        EXPECT_NE(s.prov->residency(kLayer, (int)i + 1), Residency::NotStarted)
            << "expert " << i + 1;
      }
    });
    s.prov->drain();
    for (int e : {0, 1, 2})
      EXPECT_TRUE(cached(*s.prov, e)) << "decode expert " << e << " was evicted";
    for (int e = 3; e < kExperts; ++e)
      EXPECT_FALSE(cached(*s.prov, e)) << "streamed expert " << e << " kept";
    EXPECT_EQ(s.prov->stats().layers[kLayer].streamed, 5u);
    // A decode step after the prompt hits.
    const uint64_t misses = s.prov->stats().layers[kLayer].misses;
    step(s, {1});
    EXPECT_EQ(s.prov->stats().layers[kLayer].misses, misses);
    if (device) {
      EXPECT_GT(s.be.syncs, 0);
    }
    s.prov->drain();
  }
}

// The same budget without the pipeline: the prompt's misses take the decode experts' places.
TEST(PrefillPipeline, WithoutItThePromptEvictsTheDecodeExperts) {
  Rig s;
  make(s, "pipe_off", 5, 0, false);
  for (int e : {0, 1, 2}) step(s, {e});
  step(s, all_experts());
  s.prov->drain();
  int kept = 0;
  for (int e : {0, 1, 2}) kept += cached(*s.prov, e);
  EXPECT_LT(kept, 3);
  EXPECT_EQ(s.prov->stats().layers[kLayer].streamed, 0u);
}

// Decode steps never stream: a single-token miss evicts as before.
TEST(PrefillPipeline, DecodeMissesStillTakePlaces) {
  Rig s;
  make(s, "pipe_decode", 3, 2, false);
  for (int e : {0, 1, 2, 3, 4}) step(s, {e});
  s.prov->drain();
  EXPECT_TRUE(cached(*s.prov, 4));
  EXPECT_EQ(s.prov->stats().layers[kLayer].streamed, 0u);
}

// On a device cache released slots retire until the backend has caught up; the pipeline
// settles them ahead (once half its slots are retired, at the next acquire, while the backend
// still has the earlier units queued), so each pipelined expert's copy has started before its
// own acquire, and there is at most one sync per pipelined unit.
TEST(PrefillPipeline, ADeviceSettlesStreamSlotsAhead) {
  Rig s;
  make(s, "pipe_ahead", 3, 2, true);
  for (int e : {0, 1, 2}) step(s, {e});
  const int syncs0 = s.be.syncs;
  step(s, all_experts(), [&](size_t i) {
    if (i >= 5) {
      EXPECT_NE(s.prov->residency(kLayer, (int)i), Residency::NotStarted) << "expert " << i;
    }
  });
  EXPECT_GE(s.be.syncs - syncs0, 2);
  EXPECT_LE(s.be.syncs - syncs0, 5);
  s.prov->drain();
}

}  // namespace
}  // namespace moeflow::test
