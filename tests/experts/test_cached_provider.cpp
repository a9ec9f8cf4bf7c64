#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "experts/cached_provider.h"
#include "support/offload_fixture.h"

namespace moeflow {
namespace {

std::unique_ptr<CachedExpertProvider> make_provider(const test::FakeModel& m, uint64_t budget,
                                                    int top_k, int io_threads, bool per_layer,
                                                    bool early = true, bool prefetch = true) {
  OffloadConfig cfg;
  cfg.budget_bytes = budget;
  cfg.top_k = top_k;
  cfg.io_threads = io_threads;
  cfg.per_layer = per_layer;
  cfg.early_preemption = early;
  cfg.prefetch = prefetch;
  return std::make_unique<CachedExpertProvider>(
      std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index),
      std::make_unique<test::TestLru>(), cfg);
}

void expect_view_matches(const test::FakeModel& m, const ExpertView& v, int l, int e) {
  for (int p = 0; p < kNumExpertProj; ++p) {
    const ExpertSlice& s = m.index.layers[l].slices[e][p];
    ASSERT_NE(v.proj[p].data, nullptr);
    EXPECT_EQ(v.proj[p].rows(), s.rows);
    EXPECT_EQ(v.proj[p].cols(), s.cols);
    ASSERT_EQ(0, std::memcmp(v.proj[p].data, m.slice(l, e, p), s.nbytes))
        << "layer " << l << " expert " << e << " proj " << p;
  }
}

// Random decode-like steps under many budgets and configurations: every acquired expert must
// hold exactly the bytes of the file, and the counters must add up.
TEST(CachedProvider, RandomAccessReturnsFileBytesUnderTinyBudgets) {
  test::FakeModel m;
  test::make_fake_model(m, "random", 4, 6, 40, 11);
  const int top_k = 2;
  const uint64_t slot = test::slot_bytes(m);
  struct Case {
    uint64_t slots;
    bool per_layer;
    int threads;
    bool early;
    bool pf;
  };
  const Case cases[] = {{2, false, 1, true, true},   {3, false, 3, true, true},
                        {5, false, 2, false, false}, {9, false, 1, false, true},
                        {6, true, 2, true, true},    {18, false, 4, true, true},
                        {100, false, 2, true, true}};
  for (const Case& c : cases) {
    auto prov = make_provider(m, c.slots * slot, top_k, c.threads, c.per_layer, c.early, c.pf);
    std::mt19937 rng(static_cast<uint32_t>(c.slots * 7 + c.threads));
    uint64_t requests = 0;
    for (int step = 0; step < 40; ++step) {
      for (int l = 1; l < 4; ++l) {
        int a = rng() % 6, b = rng() % 6;
        if (b == a) b = (a + 1) % 6;
        const int chosen[2] = {a, b};
        prov->on_route(l, chosen);
        requests += 2;
        if (l + 1 < 4) {
          const int guess[2] = {int(rng() % 6), int(rng() % 6)};
          prov->prefetch(l + 1, guess, 0.5f);
        }
        // Reorder like the MoE block: resident first.
        std::vector<int> order(chosen, chosen + 2);
        std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
          return prov->residency(l, x) < prov->residency(l, y);
        });
        for (int e : order) {
          ExpertView v = prov->acquire(l, e);
          expect_view_matches(m, v, l, e);
          prov->release(l, e);
        }
      }
      prov->end_step();
    }
    prov->drain();
    const OffloadStats st = prov->stats();
    const LayerOffloadStats t = st.total();
    SCOPED_TRACE(testing::Message() << "slots " << c.slots << " per_layer " << c.per_layer);
    EXPECT_EQ(t.acquires, requests);
    EXPECT_EQ(t.hits + t.misses + t.late, requests);
    EXPECT_LE(t.prefetch_used + t.prefetch_wasted, t.prefetch_issued);
    EXPECT_TRUE(st.direct_io || !st.direct_io);
    if (!c.pf) {
      EXPECT_EQ(t.prefetch_issued, 0u);
    }
    EXPECT_GT(t.bytes_read, 0u);
    EXPECT_EQ(t.stall_s >= 0, true);
    if (c.slots >= 18) {
      // Everything fits: nothing is evicted and each expert is loaded once, unless a
      // cancelled prefetch had to be issued again.
      EXPECT_EQ(t.evictions, 0u);
      EXPECT_LE(t.misses + t.prefetch_issued - t.prefetch_cancelled, 18u);
    }
  }
}

TEST(CachedProvider, BudgetBelowOneLayersTopKIsAClearError) {
  test::FakeModel m;
  test::make_fake_model(m, "budget", 3, 4, 40, 12);
  const uint64_t slot = test::slot_bytes(m);
  try {
    make_provider(m, 2 * slot - 1, 2, 1, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-k"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--expert-cache"), std::string::npos) << e.what();
  }
  // Per-layer budgets need top-k slots for every MoE layer (2 layers here).
  EXPECT_THROW(make_provider(m, 3 * slot, 2, 1, true), Error);
  EXPECT_NO_THROW(make_provider(m, 4 * slot, 2, 1, true));
  EXPECT_NO_THROW(make_provider(m, 2 * slot, 2, 1, false));
}

TEST(CachedProvider, AcquiringMoreThanTheBudgetHoldsFailsInsteadOfHanging) {
  test::FakeModel m;
  test::make_fake_model(m, "overpin", 2, 4, 32, 13);
  auto prov = make_provider(m, 2 * test::slot_bytes(m), 2, 1, false);
  prov->acquire(1, 0);
  prov->acquire(1, 1);
  EXPECT_THROW(prov->acquire(1, 2), Error);
  prov->release(1, 0);
  expect_view_matches(m, prov->acquire(1, 2), 1, 2);
  EXPECT_THROW(prov->release(1, 3), Error);
}

TEST(CachedProvider, InjectedReadErrorSurfacesFromAcquireAndRecovers) {
  test::FakeModel m;
  test::make_fake_model(m, "ioerr", 3, 4, 32, 14);
  auto prov = make_provider(m, 1 << 24, 2, 2, false);
  std::atomic<bool> broken{true};
  prov->store().set_fault_hook([&](const ReadEvent& ev, int64_t& r) {
    if (broken && ev.layer == 2 && ev.expert == 1 && ev.proj == 1) r = -EIO;
  });
  const int chosen[2] = {1, 3};
  prov->on_route(2, chosen);
  try {
    prov->acquire(2, 1);
    FAIL() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read error"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 2"), std::string::npos) << e.what();
  }
  expect_view_matches(m, prov->acquire(2, 3), 2, 3);
  prov->release(2, 3);
  // A failed prefetch is forgotten; the acquire retries and reports the error itself.
  const int guess[1] = {1};
  prov->prefetch(2, guess, 0.9f);
  prov->drain();
  EXPECT_EQ(prov->residency(2, 1), Residency::NotStarted);
  EXPECT_THROW(prov->acquire(2, 1), Error);
  broken = false;
  expect_view_matches(m, prov->acquire(2, 1), 2, 1);
  prov->release(2, 1);
}

TEST(CachedProvider, FileTruncatedWhileRunningIsAClearError) {
  test::FakeModel m;
  test::make_fake_model(m, "trunc", 3, 4, 32, 15);
  auto prov = make_provider(m, 1 << 24, 2, 2, false, true, false);
  expect_view_matches(m, prov->acquire(1, 0), 1, 0);
  prov->release(1, 0);
  // Cut the file inside layer 2's expert 3.
  const ExpertSlice& s = m.index.layers[2].slices[3][0];
  ASSERT_EQ(0, ::truncate(m.path.c_str(), static_cast<off_t>(s.file_offset + 10)));
  try {
    prov->acquire(2, 3);
    FAIL() << "expected a short read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short read"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(m.path), std::string::npos) << e.what();
  }
  // Still cached: served without touching the file.
  expect_view_matches(m, prov->acquire(1, 0), 1, 0);
  prov->release(1, 0);
}

// Reads of one blocked I/O worker are released in a controlled order: HIGH before LOW, LOW by
// confidence, a promoted LOW task runs as HIGH, and on_route cancels the layer's other LOW work.
TEST(CachedProvider, PriorityPromotionAndCancellation) {
  test::FakeModel m;
  test::make_fake_model(m, "prio", 3, 6, 32, 16);
  auto prov = make_provider(m, 1 << 24, 2, 1, false);
  std::mutex mu;
  std::condition_variable cv;
  bool gate_open = false;
  std::vector<std::pair<int, int>> log;  // (layer, expert) per read, in order
  prov->store().set_fault_hook([&](const ReadEvent& ev, int64_t&) {
    std::unique_lock lk(mu);
    log.push_back({ev.layer, ev.expert});
    cv.notify_all();
    cv.wait(lk, [&] { return gate_open; });
  });
  const int first[1] = {0};
  prov->prefetch(1, first, 1.0f);  // the worker takes its first chunk and blocks in the hook
  {
    std::unique_lock lk(mu);
    cv.wait_for(lk, std::chrono::seconds(5), [&] { return !log.empty(); });
  }
  const int low_a[2] = {1, 2};
  const int low_b[1] = {4};
  prov->prefetch(2, low_a, 0.2f);
  prov->prefetch(2, low_b, 0.8f);
  prov->prefetch(1, std::span<const int>(low_a, 1), 0.5f);
  EXPECT_EQ(prov->residency(2, 1), Residency::InFlight);
  // Layer 2 routes to expert 2 (queued LOW: promoted) and 5 (new: HIGH); its LOW tasks for 1
  // and 4 are cancelled.
  const int chosen[2] = {2, 5};
  prov->on_route(2, chosen);
  EXPECT_EQ(prov->residency(2, 1), Residency::NotStarted);
  EXPECT_EQ(prov->residency(2, 4), Residency::NotStarted);
  {
    std::lock_guard lk(mu);
    gate_open = true;
  }
  cv.notify_all();
  prov->drain();
  std::vector<std::pair<int, int>> got;
  {
    std::lock_guard lk(mu);
    got = log;
  }
  // 3 chunks each: the gate chunk of (1,0) first (already started), then HIGH (2,2) and (2,5)
  // in route order preempt the rest of (1,0), then LOW by confidence: (1,0) before (1,1).
  std::vector<std::pair<int, int>> want = {{1, 0}};
  for (auto k : {std::pair{2, 2}, std::pair{2, 5}})
    for (int p = 0; p < 3; ++p) want.push_back(k);
  want.push_back({1, 0});
  want.push_back({1, 0});
  for (int p = 0; p < 3; ++p) want.push_back({1, 1});
  EXPECT_EQ(got, want);
  const OffloadStats st = prov->stats();
  EXPECT_EQ(st.layers[2].prefetch_cancelled, 2u);
  EXPECT_EQ(st.layers[2].prefetch_issued, 3u);
  EXPECT_EQ(st.layers[2].misses, 1u);  // expert 5
  EXPECT_EQ(st.layers[2].late, 1u);    // expert 2, in flight when routed
  expect_view_matches(m, prov->acquire(2, 2), 2, 2);
  prov->release(2, 2);
  EXPECT_EQ(prov->stats().layers[2].prefetch_used, 1u);
  EXPECT_EQ(prov->ready_chunks(2, 5), 7u);
}

// ProMoE's chunked prefetch: a speculative read goes in parts and gives the I/O thread to a
// demand read queued meanwhile, keeping the part it read; it resumes where it stopped, either
// as a speculative read again or, once the router picks it, as one demand read of the rest.
class PausedPrefetch : public ::testing::TestWithParam<bool> {};

TEST_P(PausedPrefetch, GivesWayToDemandReadsAndResumesWhereItStopped) {
  const bool promote = GetParam();
  test::FakeModel m;
  test::make_fake_model(m, promote ? "pause_promote" : "pause_resume", 3, 6, 400, 17);
  OffloadConfig cfg;
  cfg.budget_bytes = 1 << 24;
  cfg.top_k = 2;
  cfg.io_threads = 1;
  cfg.low_part_bytes = kDirectAlign;
  CachedExpertProvider prov(
      std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index),
      std::make_unique<test::TestLru>(), cfg);
  struct Read {
    int layer, expert, proj;
    uint64_t begin, end;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Read> log;
  size_t allowed = 0;  // reads past this count block in the hook until the test allows them
  prov.store().set_fault_hook([&](const ReadEvent& ev, int64_t&) {
    std::unique_lock lk(mu);
    log.push_back({ev.layer, ev.expert, ev.proj, ev.begin, ev.end});
    cv.notify_all();
    const size_t me = log.size();
    cv.wait(lk, [&] { return allowed >= me; });
  });
  auto wait_log = [&](size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(10), [&] { return log.size() >= n; });
  };
  auto allow = [&](size_t n) {
    std::lock_guard lk(mu);
    allowed = n;
    cv.notify_all();
  };
  const uint64_t len0 = prov.store().chunk(1, 0, 0).aligned_len;
  ASSERT_GT(len0, 2 * kDirectAlign);  // the speculative chunk takes several parts

  const int guess[1] = {0};
  prov.prefetch(1, guess, 0.9f);
  ASSERT_TRUE(wait_log(1));  // its first part is being read
  const int routed[1] = {3};
  prov.on_route(2, routed);  // demand reads queue up behind it
  allow(2);                  // the part ends, the speculative read pauses, a demand read runs
  ASSERT_TRUE(wait_log(3));  // ... and the second demand read is blocked
  EXPECT_EQ(prov.residency(1, 0), Residency::InFlight);
  if (promote) prov.on_route(1, guess);  // now the router wants the paused expert
  allow(size_t(1) << 40);
  prov.drain();

  std::vector<Read> got;
  {
    std::lock_guard lk(mu);
    got = log;
  }
  ASSERT_GE(got.size(), 7u);
  EXPECT_EQ(got[0].layer, 1);
  EXPECT_EQ(got[0].begin, 0u);
  EXPECT_EQ(got[0].end, kDirectAlign);
  for (int i = 1; i <= 3; ++i) {  // the demand chunks, each whole
    EXPECT_EQ(got[i].layer, 2);
    EXPECT_EQ(got[i].expert, 3);
    EXPECT_EQ(got[i].proj, i - 1);
    EXPECT_EQ(got[i].begin, 0u);
    EXPECT_EQ(got[i].end, prov.store().chunk(2, 3, i - 1).aligned_len);
  }
  // Then the rest of expert (1, 0): no byte read twice, every byte read once.
  uint64_t next[kNumExpertProj] = {kDirectAlign, 0, 0};
  for (size_t i = 4; i < got.size(); ++i) {
    const Read& r = got[i];
    ASSERT_EQ(r.layer, 1);
    ASSERT_EQ(r.expert, 0);
    EXPECT_EQ(r.begin, next[r.proj]) << "read " << i;
    next[r.proj] = r.end;
    if (!promote) {
      EXPECT_LE(r.end - r.begin, kDirectAlign) << "read " << i;
    }
  }
  for (int p = 0; p < kNumExpertProj; ++p)
    EXPECT_EQ(next[p], prov.store().chunk(1, 0, p).aligned_len);
  if (promote) {
    EXPECT_EQ(got.size(), 7u);  // the rest as three whole demand reads
  }

  const OffloadStats st = prov.stats();
  EXPECT_EQ(st.layers[1].prefetch_paused, 1u);
  uint64_t chunk_bytes = 0;
  for (int p = 0; p < kNumExpertProj; ++p) chunk_bytes += prov.store().chunk(1, 0, p).aligned_len;
  EXPECT_EQ(st.layers[1].bytes_read, chunk_bytes);
  EXPECT_EQ(st.layers[1].chunks_read, 3u);
  expect_view_matches(m, prov.acquire(1, 0), 1, 0);
  prov.release(1, 0);
  EXPECT_EQ(prov.stats().layers[1].prefetch_used, 1u);
  EXPECT_EQ(prov.stats().layers[1].late, promote ? 1u : 0u);
  EXPECT_EQ(prov.stats().layers[1].hits, promote ? 0u : 1u);
}

INSTANTIATE_TEST_SUITE_P(CachedProvider, PausedPrefetch, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "Promoted" : "ResumedAsPrefetch"; });

}  // namespace
}  // namespace moeflow

namespace moeflow {
namespace {

// A demand miss of an expert that a prefetch evicted is counted as that prefetch's harm (and
// fed to the gate); a miss of an expert that demand evicted, or that a prefetch brought back,
// is not.
TEST(CachedProvider, DemandMissOfAPrefetchVictimCountsAsHarm) {
  test::FakeModel m;
  test::make_fake_model(m, "harm", 2, 8, 40, 5);
  const uint64_t slot = test::slot_bytes(m);
  OffloadConfig cfg;
  cfg.budget_bytes = 3 * slot;
  cfg.top_k = 1;
  cfg.io_threads = 1;
  cfg.skip_late_prefetch = false;
  CachedExpertProvider prov(
      std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index),
      std::make_unique<test::TestLru>(), cfg);
  auto step = [&](int e) {
    const int chosen[1] = {e};
    prov.on_route(1, chosen);
    expect_view_matches(m, prov.acquire(1, e), 1, e);
    prov.release(1, e);
    prov.end_step();
  };
  auto harm = [&] { return prov.stats().layers[1].prefetch_harm; };
  step(0);
  step(1);
  step(2);  // resident: 0, 1, 2 (LRU order)
  const int guess[1] = {3};
  prov.prefetch(1, guess);  // evicts 0, the least recently used
  prov.drain();
  EXPECT_EQ(prov.residency(1, 0), Residency::NotStarted);
  EXPECT_EQ(harm(), 0u);
  step(0);  // the prefetch's victim, demanded: the miss it caused (it evicts one, by demand)
  EXPECT_EQ(harm(), 1u);
  int demand_victim = -1;
  for (int e : {1, 2, 3})
    if (prov.residency(1, e) == Residency::NotStarted) demand_victim = e;
  ASSERT_GE(demand_victim, 0);
  step(demand_victim);  // demand's own victim: a miss, not harm
  EXPECT_EQ(harm(), 1u);
  // A victim that a later prefetch brings back is no harm when it is demanded: no miss.
  std::vector<int> before;
  for (int e = 0; e < 5; ++e)
    if (prov.residency(1, e) == Residency::Resident) before.push_back(e);
  ASSERT_EQ(before.size(), 3u);
  const int other[1] = {5};
  prov.prefetch(1, other);
  prov.drain();
  int victim = -1;
  for (int e : before)
    if (prov.residency(1, e) == Residency::NotStarted) victim = e;
  ASSERT_GE(victim, 0);
  const int back[1] = {victim};
  prov.prefetch(1, back);
  prov.drain();
  ASSERT_EQ(prov.residency(1, victim), Residency::Resident);
  step(victim);
  EXPECT_EQ(harm(), 1u);
  EXPECT_EQ(prov.stats().layers[1].prefetch_issued, 3u);
}

// A streamed acquire returns while the expert is still being read, and each matrix is handed
// out once its own read is done: the gate and up products can run under the down read.
TEST(CachedProvider, StreamedAcquireAwaitsEachMatrixAsItArrives) {
  test::FakeModel m;
  test::make_fake_model(m, "stream", 2, 4, 32, 21);
  auto prov = make_provider(m, 1 << 24, 2, 1, false, true, false);
  std::mutex mu;
  std::condition_variable cv;
  bool down_started = false, down_may_finish = false;
  prov->store().set_fault_hook([&](const ReadEvent& ev, int64_t&) {
    if (ev.layer != 1 || ev.expert != 2 || ev.proj != 2) return;
    std::unique_lock lk(mu);
    down_started = true;
    cv.notify_all();
    // Bounded: an acquire that waited for the whole expert fails the checks below, not hangs.
    cv.wait_for(lk, std::chrono::seconds(10), [&] { return down_may_finish; });
  });
  const int chosen[1] = {2};
  prov->on_route(1, chosen);
  const ExpertView v = prov->acquire_streamed(1, 2);
  prov->await_matrix(1, 2, 0);
  prov->await_matrix(1, 2, 1);
  {
    std::unique_lock lk(mu);
    // One I/O thread reads gate, up, down in order: the down read is under way (held in the
    // hook), so gate and up are complete and down is not.
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return down_started; }));
  }
  EXPECT_EQ(prov->ready_chunks(1, 2), 3u);
  EXPECT_EQ(prov->residency(1, 2), Residency::InFlight);
  for (int p = 0; p < 2; ++p)
    ASSERT_EQ(0,
              std::memcmp(v.proj[p].data, m.slice(1, 2, p), m.index.layers[1].slices[2][p].nbytes));
  std::atomic<bool> down_ready{false};
  std::thread waiter([&] {
    prov->await_matrix(1, 2, 2);
    down_ready = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(down_ready.load());  // held by the hook: await_matrix must still be waiting
  {
    std::lock_guard lk(mu);
    down_may_finish = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_TRUE(down_ready.load());
  expect_view_matches(m, v, 1, 2);
  prov->release(1, 2);
  EXPECT_EQ(prov->residency(1, 2), Residency::Resident);
  EXPECT_EQ(prov->stats().layers[1].misses, 1u);
}

// A failed read of a streamed expert's later matrix surfaces no later than the await of that
// matrix, release frees the slot, and the next acquire reads it again. Where it surfaces is a
// race with the I/O thread: once the whole read has failed, acquire_streamed itself throws (and
// keeps no pin), and any await_matrix throws, even one of a matrix that arrived.
TEST(CachedProvider, StreamedAcquireReportsAFailedMatrixReadAndRecovers) {
  test::FakeModel m;
  test::make_fake_model(m, "streamerr", 2, 4, 32, 22);
  auto prov = make_provider(m, 1 << 24, 2, 1, false, true, false);
  std::atomic<bool> broken{true};
  prov->store().set_fault_hook([&](const ReadEvent& ev, int64_t& r) {
    if (broken && ev.layer == 1 && ev.expert == 3 && ev.proj == 2) r = -EIO;
  });
  const int chosen[1] = {3};
  prov->on_route(1, chosen);
  bool acquired = false;
  try {
    prov->acquire_streamed(1, 3);
    acquired = true;
    for (int p = 0; p <= 2; ++p) prov->await_matrix(1, 3, p);
    FAIL() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read error"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expert 3"), std::string::npos) << e.what();
  }
  if (acquired) prov->release(1, 3);
  prov->drain();
  EXPECT_EQ(prov->residency(1, 3), Residency::NotStarted);
  broken = false;
  const ExpertView v = prov->acquire_streamed(1, 3);
  for (int p = 0; p < kNumExpertProj; ++p) prov->await_matrix(1, 3, p);
  expect_view_matches(m, v, 1, 3);
  prov->release(1, 3);
}

}  // namespace
}  // namespace moeflow
