// Concurrency stress of the prefetcher and the provider: random priorities, cancellations,
// promotions and tiny budgets from many threads. Bounded work so it stays fast under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "experts/cached_provider.h"
#include "experts/prefetcher.h"
#include "support/offload_fixture.h"

namespace moeflow {
namespace {

// Sink whose tasks are valid unless their id was marked cancelled; counts every outcome.
class CountingSink : public ChunkSink {
 public:
  explicit CountingSink(size_t n) : state_(n) {}
  bool begin(const ChunkTask& t) override {
    int expected = 0;
    // 0 queued -> 1 running; a cancelled task (2) is stale.
    if (!state_[t.ticket].compare_exchange_strong(expected, 1)) {
      done(stale_);
      return false;
    }
    return true;
  }
  bool run(const ChunkTask& t) override {
    if (t.ticket % 17 == 0) fail("injected failure for task {}", t.ticket);
    return true;
  }
  void finish(const ChunkTask& t, const std::string& error) override {
    state_[t.ticket] = 3;
    done(error.empty() ? ok_ : failed_);
  }
  bool cancel(uint64_t id) {
    int expected = 0;
    return state_[id].compare_exchange_strong(expected, 2);
  }
  void wait_for(uint64_t n) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(20), [&] { return total_ >= n; });
  }
  std::vector<std::atomic<int>> state_;
  uint64_t ok_ = 0, failed_ = 0, stale_ = 0, total_ = 0;
  std::mutex mu_;

 private:
  void done(uint64_t& c) {
    std::lock_guard lk(mu_);
    ++c;
    ++total_;
    cv_.notify_all();
  }
  std::condition_variable cv_;
};

TEST(OffloadStress, PrefetcherRunsEveryTaskOnceOrDropsIt) {
  const int n_producers = 4, per_producer = 400;
  const size_t n = size_t(n_producers) * per_producer;
  CountingSink sink(n);
  std::atomic<uint64_t> physically_dropped{0};
  {
    Prefetcher pf(sink, 3);
    std::vector<std::thread> producers;
    for (int p = 0; p < n_producers; ++p) {
      producers.emplace_back([&, p] {
        std::mt19937 rng(p);
        for (int i = 0; i < per_producer; ++i) {
          const uint64_t id = uint64_t(p) * per_producer + i;
          const Priority pr = rng() % 3 == 0 ? Priority::High : Priority::Low;
          pf.push(
              {uint32_t(id % 7), uint8_t(id % 3), id, int(id % 5), 0, float(rng() % 100) / 100, 0},
              pr);
          if (rng() % 5 == 0) {
            // Cancel a random earlier task of ours: lazily (state) and, if LOW, physically.
            const uint64_t victim = uint64_t(p) * per_producer + rng() % (i + 1);
            if (sink.cancel(victim)) {
              physically_dropped +=
                  pf.drop_low_if([&](const ChunkTask& t) { return t.ticket == victim; });
            }
          }
        }
      });
    }
    for (auto& t : producers) t.join();
    // Cancelled tasks that were removed from the queue never reach begin().
    sink.wait_for(n - physically_dropped.load());
    EXPECT_EQ(pf.queued(Priority::High) + pf.queued(Priority::Low), 0u);
  }
  uint64_t ran = 0, cancelled = 0;
  for (auto& s : sink.state_) {
    ran += s == 3;
    cancelled += s == 2;
  }
  std::lock_guard lk(sink.mu_);
  EXPECT_EQ(sink.ok_ + sink.failed_, ran);
  EXPECT_EQ(ran + cancelled, n);
  EXPECT_EQ(sink.stale_ + physically_dropped.load(), cancelled);
  EXPECT_GT(sink.failed_, 0u);
}

TEST(OffloadStress, ManyThreadsTinyBudgetsExactBytes) {
  test::FakeModel m;
  test::make_fake_model(m, "stress", 4, 8, 200, 21);
  const int n_threads = 4;
  for (int io_threads : {1, 3}) {
    OffloadConfig cfg;
    cfg.budget_bytes = (n_threads + 2) * test::slot_bytes(m);
    cfg.top_k = 2;
    cfg.io_threads = io_threads;
    cfg.low_part_bytes = kDirectAlign;  // speculative reads pause and resume all the time
    CachedExpertProvider prov(
        std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index),
        std::make_unique<test::TestLru>(), cfg);
    std::atomic<int> bad{0}, errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(100 * io_threads + t);
        for (int it = 0; it < 150; ++it) {
          const int l = 1 + rng() % 3;
          const int chosen[2] = {int(rng() % 8), int(rng() % 8)};
          const int guess[3] = {int(rng() % 8), int(rng() % 8), int(rng() % 8)};
          switch (rng() % 4) {
            case 0: prov.on_route(l, chosen); break;
            case 1: prov.prefetch(1 + rng() % 3, guess, float(rng() % 10) / 10); break;
            case 2:
              if (rng() % 8 == 0) prov.end_step();
              break;
            default: break;
          }
          (void)prov.residency(l, chosen[1]);
          try {
            ExpertView v = prov.acquire(l, chosen[0]);
            for (int p = 0; p < kNumExpertProj; ++p) {
              if (std::memcmp(v.proj[p].data, m.slice(l, chosen[0], p),
                              m.nbytes(l, chosen[0], p)) != 0)
                ++bad;
            }
            prov.release(l, chosen[0]);
          } catch (const Error&) {
            ++errors;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    prov.drain();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(errors.load(), 0);
    const LayerOffloadStats tot = prov.stats().total();
    EXPECT_EQ(tot.acquires, uint64_t(n_threads) * 150);
  }
}

}  // namespace
}  // namespace moeflow
