// The VRAM expert cache's host side, without a GPU: DeviceChunkTransfer over a link whose copies
// land later on a thread of their own (so a transfer that reuses a staging buffer too early, or
// calls a chunk ready before its copy landed, reads wrong bytes here), for each slow tier (pinned
// RAM, RAM through staging when pinning is refused, the file through O_DIRECT staging); the
// cached provider's retiring of released device slots; and the forward pass over a cache in
// "device" memory giving the resident provider's logits bit for bit.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "delayed_link.h"
#include "experts/cached_provider.h"
#include "experts/device_transfer.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "low_copy_models.h"
#include "model/gen/model_generator.h"
#include "model/model.h"
#include "runtime/offload_session.h"
#include "runtime/vram_plan.h"
#include "support/offload_fixture.h"
#include "support/stand_in_device.h"

namespace moeflow::test {
namespace {

struct SlowTier {
  const char* what;
  DeviceSource source;
  bool refuse_pin;
  const char* name;
};
const SlowTier kSetups[] = {
    {"pinned RAM", DeviceSource::Ram, false, "pinned ram->device"},
    {"RAM, pinning refused", DeviceSource::Ram, true, "ram->staging->device"},
    {"file", DeviceSource::File, false, "file->staging->device"},
};

std::vector<std::span<const uint8_t>> maps_of(const FakeModel& m) {
  return {std::span<const uint8_t>(m.bytes)};
}

// Copies chunk (l, e, p) in two parts split at a random page and checks the slice's bytes.
void copy_and_check(const FakeModel& m, const ExpertStore& store, DeviceChunkTransfer& tr, int l,
                    int e, int p, std::mt19937& rng) {
  const ChunkLoc& c = store.chunk(l, e, p);
  Buffer slot = HostAllocator::instance().allocate(c.aligned_len, 4096);
  std::memset(slot.data(), 0xEE, c.aligned_len);
  const uint64_t pages = c.aligned_len / 4096;
  const uint64_t cut = pages > 1 ? 4096 * (1 + rng() % (pages - 1)) : c.aligned_len;
  tr.copy(store, ChunkPart{l, e, p, Precision::High, 0, cut}, slot.data());
  tr.copy(store, ChunkPart{l, e, p, Precision::High, cut, c.aligned_len}, slot.data());
  ASSERT_EQ(0, std::memcmp(slot.data() + c.inner_offset, m.slice(l, e, p), c.nbytes))
      << "layer " << l << " expert " << e << " proj " << p << " (" << tr.name() << ")";
}

// A transfer from slow tier `s` over `link` (told to refuse pinning when the tier says so).
DeviceChunkTransfer transfer_for(const SlowTier& s, DelayedLink& link, const FakeModel& m,
                                 const ExpertStore& store, uint64_t staging) {
  link.refuse_pin = s.refuse_pin;
  DeviceTransferOptions o;
  o.source = s.source;
  o.staging_bytes = staging;
  return DeviceChunkTransfer(link, maps_of(m), store, o);
}

TEST(DeviceTransfer, EveryChunkLandsWhole_ForEachSlowTier) {
  FakeModel m;
  make_fake_model(m, "vram_xfer", 3, 5, 300, 11);
  ExpertStore store({m.path}, m.index);
  for (const SlowTier& s : kSetups) {
    SCOPED_TRACE(s.what);
    DelayedLink link;
    // Many pieces per chunk: both staging buffers in turn.
    DeviceChunkTransfer tr = transfer_for(s, link, m, store, 8192);
    EXPECT_STREQ(tr.name(), s.name);
    EXPECT_EQ(tr.pinned(), s.source == DeviceSource::Ram && !s.refuse_pin);
    if (s.refuse_pin) {
      EXPECT_NE(tr.pin_refusal().find("locked-memory limit of the test"), std::string::npos);
    }
    if (tr.pinned()) {
      EXPECT_GE(tr.pinned_bytes(), m.bytes.size() / 2);
    }
    std::mt19937 rng(3);
    for (int l = 1; l < m.n_layers; ++l)
      for (int e = 0; e < m.n_experts; ++e)
        for (int p = 0; p < kNumExpertProj; ++p) copy_and_check(m, store, tr, l, e, p, rng);
    EXPECT_EQ(link.lanes_opened.load(), 1);  // one worker: the lane is reused
  }
}

TEST(DeviceTransfer, ConcurrentWorkersEachGetALane) {
  FakeModel m;
  make_fake_model(m, "vram_conc", 3, 8, 260, 12);
  ExpertStore store({m.path}, m.index);
  for (const SlowTier& s : kSetups) {
    SCOPED_TRACE(s.what);
    DelayedLink link;
    DeviceChunkTransfer tr = transfer_for(s, link, m, store, 4096);
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w)
      workers.emplace_back([&, w] {
        std::mt19937 rng(w);
        for (int l = 1; l < m.n_layers; ++l)
          for (int e = w; e < m.n_experts; e += 4)
            for (int p = 0; p < kNumExpertProj; ++p) copy_and_check(m, store, tr, l, e, p, rng);
      });
    for (auto& t : workers) t.join();
    EXPECT_LE(link.lanes_opened.load(), 4);
  }
}

TEST(DeviceTransfer, ReadErrorNamesTheFileAndTheLaneIsReused) {
  FakeModel m;
  make_fake_model(m, "vram_err", 2, 3, 300, 13);
  ExpertStore store({m.path}, m.index);
  store.set_fault_hook([](const ReadEvent& ev, int64_t& r) {
    if (ev.layer == 1 && ev.expert == 1 && ev.proj == 2) r = -EIO;
  });
  DelayedLink link;
  DeviceTransferOptions o;
  o.source = DeviceSource::File;
  o.staging_bytes = 4096;
  DeviceChunkTransfer tr(link, {}, store, o);
  const ChunkLoc& c = store.chunk(1, 1, 2);
  Buffer slot = HostAllocator::instance().allocate(c.aligned_len, 4096);
  try {
    tr.copy(store, ChunkPart{1, 1, 2, Precision::High, 0, c.aligned_len}, slot.data());
    FAIL() << "an injected read error was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(m.path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expert 1"), std::string::npos) << e.what();
  }
  std::mt19937 rng(1);
  copy_and_check(m, store, tr, 1, 0, 2, rng);
  EXPECT_EQ(link.lanes_opened.load(), 1);
}

TEST(DeviceTransfer, RamSourceNeedsTheMapping) {
  FakeModel m;
  make_fake_model(m, "vram_nomap", 2, 2, 100, 14);
  ExpertStore store({m.path}, m.index);
  DelayedLink link;
  EXPECT_THROW(DeviceChunkTransfer(link, {}, store, DeviceTransferOptions{}), Error);
  DeviceTransferOptions bad;
  bad.staging_bytes = 1000;
  EXPECT_THROW(DeviceChunkTransfer(link, maps_of(m), store, bad), Error);
}

std::unique_ptr<CachedExpertProvider> device_cache(
    const FakeModel& m, DelayedLink& link, uint64_t slots, bool prefetch,
    std::shared_ptr<DeviceChunkTransfer>* out = nullptr) {
  auto store = std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index);
  DeviceTransferOptions o;
  o.source = DeviceSource::File;
  auto tr = std::make_shared<DeviceChunkTransfer>(link, maps_of(m), *store, o);
  if (out) *out = tr;
  OffloadConfig cfg;
  cfg.budget_bytes = slots * store->slot_bytes();
  cfg.top_k = 1;
  cfg.io_threads = 2;
  cfg.prefetch = prefetch;
  cfg.skip_late_prefetch = false;
  cfg.allocator = &link.device_allocator();
  cfg.transfer = tr;
  return std::make_unique<CachedExpertProvider>(std::move(store), std::make_unique<TestLru>(), cfg);
}

void expect_expert(const FakeModel& m, const ExpertView& v, int l, int e) {
  for (int p = 0; p < kNumExpertProj; ++p) {
    ASSERT_EQ(v.proj[p].space, MemSpace::PinnedHost);
    ASSERT_EQ(0, std::memcmp(v.proj[p].data, m.slice(l, e, p), m.nbytes(l, e, p)))
        << "layer " << l << " expert " << e << " proj " << p;
  }
}

TEST(VramCache, ReleasedSlotsRetireUntilTheBackendHasCaughtUp) {
  FakeModel m;
  make_fake_model(m, "vram_retire", 3, 4, 200, 15);
  DelayedLink link;
  auto prov = device_cache(m, link, 1, true);
  EXPECT_EQ(prov->memory_space(), MemSpace::PinnedHost);
  StandInDevice be;
  prov->attach_backend(be);
  const int e0 = 0, e1 = 1, e2 = 2;
  prov->on_route(1, {&e0, 1});
  expect_expert(m, prov->acquire(1, e0), 1, e0);
  prov->release(1, e0);
  // The backend may still read expert 0: a prefetch must not take its slot...
  prov->prefetch(1, {&e2, 1});  // decided at once: dropped (drain() would settle the slot)
  EXPECT_EQ(prov->stats().layers[1].prefetch_dropped, 1u);
  EXPECT_EQ(be.syncs, 0);
  // ...and a miss that finds no other slot first waits for the backend, then takes it.
  expect_expert(m, prov->acquire(1, e1), 1, e1);
  EXPECT_EQ(be.syncs, 1);
  EXPECT_EQ(prov->ready_chunks(1, e0), 0u);  // evicted only after the sync
  prov->release(1, e1);
  // The next route finds the backend's queue run up to it: retired slots are free again.
  prov->on_route(2, {&e0, 1});
  EXPECT_EQ(be.syncs, 2);
  expect_expert(m, prov->acquire(2, e0), 2, e0);
  prov->release(2, e0);
  prov->drain();
}

TEST(VramCache, AHostBackendReleasesAtOnce) {
  FakeModel m;
  make_fake_model(m, "vram_hostbe", 2, 3, 200, 16);
  DelayedLink link;
  auto prov = device_cache(m, link, 1, false);
  CpuBackend cpu;
  prov->attach_backend(cpu);
  for (int e = 0; e < 3; ++e) {
    expect_expert(m, prov->acquire(1, e), 1, e);
    prov->release(1, e);
  }
  prov->drain();
}

// A tiny Q8_0 model of `arch` in a temporary file.
std::string tiny_model(const std::string& tag, const std::string& arch, uint64_t seed) {
  const std::string path = temp_gguf(tag, arch + "_q8");
  gen::GenOptions go;
  go.shape = gen::find_preset(gen::parse_arch(arch), "tiny");
  go.type = GgmlType::Q8_0;
  go.seed = seed;
  gen::generate_model(go, path);
  return path;
}

// Logits of a 6-token prompt (every row) and 4 decode steps; `host` computes experts the
// backend cannot read.
std::vector<float> forward_logits(const Model& model, ExpertProvider& prov, Backend* be,
                                  Backend* host = nullptr,
                                  const PrecisionModeConfig* mode = nullptr,
                                  std::shared_ptr<PrecisionUsage> usage = nullptr) {
  std::unique_ptr<ForwardContext> ctx =
      be ? std::make_unique<ForwardContext>(model, prov, 32, 8, *be)
         : std::make_unique<ForwardContext>(model, prov, 32, 8, nullptr);
  if (host) ctx->moe().set_host_backend(host);
  if (mode) ctx->moe().set_mode(*mode, std::move(usage));
  const std::vector<int32_t> toks = {3, 17, 42, 5, 88, 0, 63, 17, 9, 4};
  std::vector<float> out;
  ctx->forward(std::span<const int32_t>(toks.data(), 6), LogitsMode::All);
  out.assign(ctx->logits(), ctx->logits() + 6 * model.n_vocab());
  for (size_t i = 6; i < toks.size(); ++i) {
    ctx->forward(std::span<const int32_t>(&toks[i], 1), LogitsMode::Last);
    out.insert(out.end(), ctx->logits(), ctx->logits() + model.n_vocab());
  }
  return out;
}

// A tiny model of `arch` in a temporary file (removed with this), and the resident provider's
// logits (forward_logits): what every cache below must reproduce.
struct TinyRun {
  TinyRun(const std::string& tag, const std::string& arch, uint64_t seed)
      : path(tiny_model(tag, arch, seed)),
        file(GgufFile::open(path)),
        model(*file),
        resident(*file),
        want(forward_logits(model, resident, nullptr)) {}
  ~TinyRun() { std::filesystem::remove(path); }
  // An --expert-cache of n of the model's expert slots.
  uint64_t slots(int n) const { return n * ExpertStore::open(*file)->slot_bytes(); }
  std::string path;
  std::shared_ptr<const GgufFile> file;
  Model model;
  ResidentExpertProvider resident;
  std::vector<float> want;
};

// A device target over a link the test owns.
DeviceTarget target_of(DelayedLink& link, DeviceSource source) {
  return {std::shared_ptr<DeviceLink>(&link, [](DeviceLink*) {}), source};
}

// The VRAM cache of `o` over `link` from slow tier `s` (the link told to refuse pinning when the
// tier says so); the session keeps the link, not the target.
OffloadSession session_over(const TinyRun& run, DelayedLink& link, const SlowTier& s,
                            const OffloadOptions& o) {
  link.refuse_pin = s.refuse_pin;
  const DeviceTarget target = target_of(link, s.source);
  return make_offload(o, *run.file, &target);
}

// The forward pass over a VRAM cache in stand-in device memory, a budget of a few experts, and
// each slow tier: the resident provider's logits bit for bit.
TEST(VramCache, ForwardOverADeviceCacheIsBitIdentical) {
  const TinyRun run("vramfwd", "mixtral", 9);
  for (const SlowTier& s : kSetups) {
    SCOPED_TRACE(s.what);
    DelayedLink link;
    OffloadOptions o;
    o.expert_cache = run.slots(3);
    o.io_threads = 2;
    OffloadSession session = session_over(run, link, s, o);
    ASSERT_TRUE(session.provider);
    StandInDevice be;
    EXPECT_EQ(forward_logits(run.model, *session.provider, &be), run.want);
    const OffloadStats st = session.provider->stats();
    EXPECT_EQ(st.io_backend, s.name);
    EXPECT_GT(be.syncs, 0);  // released slots were retired and settled
    uint64_t bytes = 0;
    for (const auto& l : st.layers) bytes += l.bytes_read;
    EXPECT_GT(bytes, 0u);
  }
}

// The prefill pipeline (--prefill-slots) is lossless: over a host cache and over a device
// cache, the prompt's misses stream through its slots and the logits are the resident
// provider's bit for bit.
TEST(VramCache, ThePrefillPipelineIsBitIdentical) {
  const TinyRun run("vrampipe", "mixtral", 13);
  for (const bool device : {false, true}) {
    SCOPED_TRACE(device ? "device cache" : "host cache");
    DelayedLink link;
    OffloadOptions o;
    o.expert_cache = run.slots(5);  // 3 places + 2 pipeline slots
    o.prefill_slots = 2;
    const DeviceTarget target = target_of(link, DeviceSource::Ram);
    OffloadSession session = make_offload(o, *run.file, device ? &target : nullptr);
    ASSERT_TRUE(session.provider);
    StandInDevice be;
    EXPECT_EQ(forward_logits(run.model, *session.provider, device ? &be : nullptr), run.want);
    EXPECT_GT(session.provider->stats().total().streamed, 0u);
  }
  OffloadOptions bad;
  bad.expert_cache = 64ull << 20;
  bad.prefill_slots = -1;
  EXPECT_THROW(make_offload(bad, *run.file, nullptr), Error);
}

// --precalc over a VRAM cache: the experts' host views (the mapped model) are offered for the
// CPU pre-calculation when they come from RAM, never when they come from the file (touching
// them would read it); the pre-calculated run differs from the exact one but stays close.
TEST(VramCache, PrecalcOffersHostViewsOnlyOverRam) {
  TinyRun run("vramprecalc", "mixtral", 11);
  const std::vector<float>& exact = run.want;
  for (const SlowTier& s : kSetups) {
    SCOPED_TRACE(s.what);
    DelayedLink link;
    OffloadOptions o;
    o.expert_cache = run.slots(3);
    o.precalc = true;
    OffloadSession session = session_over(run, link, s, o);
    ASSERT_TRUE(session.provider);
    ExpertView v;
    const bool offered = session.provider->host_view(1, 2, v);
    EXPECT_EQ(offered, s.source == DeviceSource::Ram);
    if (!offered) continue;
    EXPECT_EQ(v.gate().space, MemSpace::Host);
    EXPECT_EQ(v.gate().data, run.resident.acquire(1, 2).gate().data);  // the mapped model itself
    run.resident.release(1, 2);
    EXPECT_FALSE(session.hybrid.valid());  // the hybrid stays off: nothing is measured for it
    StandInDevice be;
    CpuBackend host;
    PrecisionModeConfig mode;
    mode.precalc = true;
    auto usage = std::make_shared<PrecisionUsage>();
    const std::vector<float> got =
        forward_logits(run.model, *session.provider, &be, &host, &mode, usage);
    ASSERT_EQ(got.size(), exact.size());
    EXPECT_GT(usage->total().precalc_computed, 0u);
    EXPECT_NE(got, exact);  // lossy: the next layer's outputs came from the stale input
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, (double)std::fabs(got[i] - exact[i]));
      scale = std::max(scale, (double)std::fabs(exact[i]));
    }
    EXPECT_LT(worst, 0.5 * scale);
  }
}

// runtime/vram_plan.h on synthetic byte counts.
ModelMemory memory(uint64_t experts) {
  ModelMemory m;
  m.non_expert_bytes = 2ull << 30;
  m.kv_bytes = 1ull << 30;
  m.scratch_bytes = 256ull << 20;
  m.expert_bytes = experts;
  m.min_budget = 512ull << 20;
  m.top_k = 2;
  m.n_ctx = 4096;
  return m;
}
constexpr uint64_t GiB = 1ull << 30;

TEST(VramPlan, EveryExpertInVramWhenTheyFit) {
  const VramPlan p = plan_vram(OffloadOptions{}, memory(40 * GiB), 79 * GiB, 80 * GiB, 0);
  EXPECT_FALSE(p.cache);
  EXPECT_NE(p.reason.find("every expert in VRAM"), std::string::npos) << p.reason;
}

TEST(VramPlan, AutoCacheLeavesTheReserveFree) {
  const VramPlan p = plan_vram(OffloadOptions{}, memory(26 * GiB), 20 * GiB, 24 * GiB, 64 * GiB);
  ASSERT_TRUE(p.cache);
  EXPECT_EQ(p.reserve, kVramReserve + 24 * GiB / 20);
  EXPECT_EQ(p.budget, 20 * GiB - (2 * GiB + GiB + (256ull << 20)) - p.reserve);
  EXPECT_EQ(p.source, DeviceSource::Ram);  // 64 GiB of RAM hold the 26 GiB of experts
  EXPECT_NE(p.reason.find("VRAM expert cache"), std::string::npos) << p.reason;
}

TEST(VramPlan, LimitPlansForASmallerDevice) {
  OffloadOptions o;
  o.vram_limit = 16 * GiB;
  const VramPlan p = plan_vram(o, memory(26 * GiB), 79 * GiB, 80 * GiB, 0);
  ASSERT_TRUE(p.cache);
  EXPECT_EQ(p.total_vram, 16 * GiB);
  EXPECT_EQ(p.reserve, kVramReserve + 16 * GiB / 20);
  EXPECT_EQ(p.budget, 16 * GiB - (3 * GiB + (256ull << 20)) - p.reserve);
  EXPECT_NE(p.reason.find("--vram-limit"), std::string::npos) << p.reason;
}

TEST(VramPlan, FileSourceWhenRamCannotHoldTheExperts) {
  const VramPlan p = plan_vram(OffloadOptions{}, memory(26 * GiB), 20 * GiB, 24 * GiB, 16 * GiB);
  ASSERT_TRUE(p.cache);
  EXPECT_EQ(p.source, DeviceSource::File);
  EXPECT_NE(p.reason.find("host memory cannot hold them"), std::string::npos) << p.reason;
  OffloadOptions ram;
  ram.expert_source = DeviceSource::Ram;
  EXPECT_EQ(plan_vram(ram, memory(26 * GiB), 20 * GiB, 24 * GiB, 16 * GiB).source,
            DeviceSource::Ram);
}

TEST(VramPlan, ExplicitBudgetAndFreeAndTheirErrors) {
  OffloadOptions b;
  b.vram_budget = 16 * GiB;
  VramPlan p = plan_vram(b, memory(40 * GiB), 79 * GiB, 80 * GiB, 0);
  EXPECT_TRUE(p.cache);
  EXPECT_EQ(p.budget, 16 * GiB);
  OffloadOptions f;
  f.vram_free = 70 * GiB;
  p = plan_vram(f, memory(40 * GiB), 79 * GiB, 80 * GiB, 0);
  EXPECT_TRUE(p.cache);
  EXPECT_EQ(p.budget, 79 * GiB - (3 * GiB + (256ull << 20)) - 70 * GiB);
  OffloadOptions both = b;
  both.vram_free = GiB;
  EXPECT_THROW(plan_vram(both, memory(GiB), 79 * GiB, 80 * GiB, 0), Error);
  OffloadOptions cpu;
  cpu.expert_cache = 3 * GiB;
  EXPECT_THROW(plan_vram(cpu, memory(GiB), 79 * GiB, 80 * GiB, 0), Error);
  EXPECT_THROW(parse_expert_source("ssd"), Error);
  // Too little VRAM for one layer's top-k: every term named.
  try {
    plan_vram(OffloadOptions{}, memory(40 * GiB), 4 * GiB, 8 * GiB, 0);
    FAIL() << "a budget below one layer's top-k";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("top-2"), std::string::npos) << w;
    EXPECT_NE(w.find("KV cache"), std::string::npos) << w;
  }
}

}  // namespace
}  // namespace moeflow::test

namespace moeflow::test {
namespace {

TEST(HybridRule, CpuWhenItFinishesBeforeTheCopy) {
  HybridCosts c;
  c.cpu_expert_s = 1e-3;
  c.cpu_token_s = 0.5e-3;
  c.h2d_bytes_per_s = 20e9;
  EXPECT_DOUBLE_EQ(cpu_expert_seconds(c, 1), 1e-3);
  EXPECT_DOUBLE_EQ(cpu_expert_seconds(c, 5), 3e-3);
  // 100 MB left to copy: 5 ms on the bus.
  EXPECT_TRUE(prefer_cpu(c, 1, 100'000'000));
  EXPECT_TRUE(prefer_cpu(c, 8, 100'000'000));               // 4.5 ms
  EXPECT_FALSE(prefer_cpu(c, 9, 100'000'000));              // 5 ms: not sooner
  EXPECT_FALSE(prefer_cpu(c, 1, 10'000'000));               // 0.5 ms of copy left
  EXPECT_FALSE(prefer_cpu(HybridCosts{}, 1, 100'000'000));  // not measured: never
}

// A VRAM cache of three experts over `link` (copies from the mapping), with the hybrid's host
// views and the given costs.
std::unique_ptr<CachedExpertProvider> hybrid_cache(const GgufFile& file, DelayedLink& link,
                                                   HybridCosts costs) {
  auto store = ExpertStore::open(file);
  OffloadConfig cfg;
  cfg.budget_bytes = 3 * store->slot_bytes();
  cfg.top_k = model_top_k(file);
  cfg.io_threads = 2;
  cfg.allocator = &link.device_allocator();
  cfg.transfer = std::make_shared<DeviceChunkTransfer>(
      link, std::vector<std::span<const uint8_t>>{file.mapping(0)}, *store,
      DeviceTransferOptions{});
  auto res = std::make_shared<ResidentExpertProvider>(file);
  cfg.host_views = std::shared_ptr<const ExpertViewTable>(res, &res->table());
  cfg.hybrid = costs;
  return std::make_unique<CachedExpertProvider>(std::move(store), std::make_unique<TestLru>(), cfg);
}

uint64_t cpu_computed(const OffloadStats& st) {
  uint64_t n = 0;
  for (const auto& l : st.layers) n += l.cpu_computed;
  return n;
}

// A "device" that cannot read host memory, a VRAM cache of three experts and the hybrid: misses
// the rule sends to the CPU run on the host backend from the mapped file, the others wait for
// their copies; either way the logits are the resident provider's, bit for bit (the stand-in
// device computes with the same CPU kernels).
TEST(VramCache, HybridComputesMissesOnTheHostBitIdentical) {
  const TinyRun run("vramhyb", "qwen3moe", 10);
  CpuBackend host;
  struct Case {
    const char* what;
    double cpu_expert_s;
    bool some_cpu, some_gpu;
  };
  for (const Case& c : {Case{"CPU always sooner", 1e-12, true, false},
                        Case{"copy always sooner", 1e9, false, true}}) {
    SCOPED_TRACE(c.what);
    DelayedLink link;
    std::unique_ptr<CachedExpertProvider> prov =
        hybrid_cache(*run.file, link, HybridCosts{c.cpu_expert_s, 0.0, 1e9});
    StandInDevice be;
    be.reads_host = false;
    EXPECT_EQ(forward_logits(run.model, *prov, &be, &host), run.want);
    const OffloadStats st = prov->stats();
    EXPECT_EQ(cpu_computed(st) > 0, c.some_cpu) << cpu_computed(st);
    uint64_t acquires = 0;
    for (const auto& l : st.layers) acquires += l.acquires;
    // Experts whose copy landed before their acquire run on the device either way.
    if (c.some_gpu) {
      EXPECT_GT(acquires, cpu_computed(st));
    }
    prov->drain();
  }
  // Without a host backend, an expert in host memory is refused by name, not read by the device.
  {
    DelayedLink link;
    std::unique_ptr<CachedExpertProvider> prov =
        hybrid_cache(*run.file, link, HybridCosts{1e-12, 0.0, 1e9});
    StandInDevice be;
    be.reads_host = false;
    try {
      forward_logits(run.model, *prov, &be, nullptr);
      FAIL() << "a host expert without a host backend";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot read"), std::string::npos) << e.what();
    }
    prov->drain();
  }
}

// make_offload's hybrid: the cost model is measured (valid numbers) and the forward pass is
// still the resident provider's.
TEST(VramCache, MakeOffloadMeasuresTheHybridCostModel) {
  const TinyRun run("vramhyb2", "mixtral", 12);
  DelayedLink link;
  OffloadOptions o;
  o.expert_cache = run.slots(3);
  DeviceTarget target = target_of(link, DeviceSource::Ram);
  target.hybrid = true;
  target.cpu_threads = 1;
  OffloadSession s = make_offload(o, *run.file, &target);
  EXPECT_TRUE(s.hybrid.valid());
  EXPECT_GT(s.hybrid.h2d_bytes_per_s, 0);
  CpuBackend host;
  StandInDevice be;
  be.reads_host = false;
  EXPECT_EQ(forward_logits(run.model, *s.provider, &be, &host), run.want);
  s.provider->drain();
  DeviceTarget file_source = target;
  file_source.source = DeviceSource::File;
  EXPECT_THROW(make_offload(o, *run.file, &file_source), Error);
}

}  // namespace
}  // namespace moeflow::test
