// ThreadPool: every index covered exactly once, by the documented partition, whether the
// workers are spinning (back-to-back dispatches) or asleep (gaps longer than the spin window),
// and clean shutdown in both states. Run under TSan in CI: the hand-off is lock-free.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace moeflow {
namespace {

void expect_exact_cover(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<int> hits((size_t)n, 0);
  std::vector<int> owner((size_t)n, -1);
  pool.parallel_for(
      n,
      [&](int64_t b, int64_t e, int t) {
        for (int64_t i = b; i < e; ++i) {
          ++hits[(size_t)i];
          owner[(size_t)i] = t;
        }
      },
      grain);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[(size_t)i], 1) << "n " << n << " i " << i;
  // Contiguous ranges in thread order: the owner never decreases along the index.
  for (int64_t i = 1; i < n; ++i) ASSERT_LE(owner[(size_t)i - 1], owner[(size_t)i]);
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4099})
      for (int64_t grain : {1, 4, 8, 333}) expect_exact_cover(pool, n, grain);
  }
}

TEST(ThreadPool, RangesAreMultiplesOfTheGrain) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> ranges(3, {-1, -1});
  pool.parallel_for(
      100,
      [&](int64_t b, int64_t e, int t) {
        ranges[(size_t)t] = {b, e};
      },
      8);
  for (const auto& [b, e] : ranges) {
    if (b < 0) continue;
    EXPECT_EQ(b % 8, 0);
    if (e != 100) {
      EXPECT_EQ((e - b) % 8, 0);
    }
  }
}

// The claimed ranges: every index once, every range starting on a grain boundary and a whole
// number of grains long (but the last), and, when one thread is held up, the others take its
// share instead of waiting (the point of claiming).
TEST(ThreadPool, DynamicRangesCoverEveryIndexOnceInGrains) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4099})
      for (int64_t grain : {1, 4, 8, 333}) {
        std::vector<std::atomic<int>> hits((size_t)n);
        std::atomic<int> bad{0};
        pool.parallel_for_dynamic(
            n,
            [&](int64_t b, int64_t e, int t) {
              if (b % grain != 0 || (e != n && (e - b) % grain != 0) || b >= e || t < 0 ||
                  t >= threads)
                ++bad;
              for (int64_t i = b; i < e; ++i) ++hits[(size_t)i];
            },
            grain);
        ASSERT_EQ(bad.load(), 0) << "threads " << threads << " n " << n << " grain " << grain;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[(size_t)i].load(), 1) << "n " << n;
      }
  }
}

TEST(ThreadPool, DynamicRangesGoToTheThreadsThatAreFree) {
  ThreadPool pool(2);
  std::atomic<int64_t> done_by[2] = {0, 0};
  pool.parallel_for_dynamic(
      4000,
      [&](int64_t b, int64_t e, int t) {
        // Thread 1 stalls in its first range: thread 0 must take all the rest.
        if (t == 1 && done_by[1].load() == 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        done_by[t] += e - b;
      },
      4);
  EXPECT_EQ(done_by[0].load() + done_by[1].load(), 4000);
  // A fixed split would give each thread 2000; thread 1 held one range of at most a quarter.
  EXPECT_LE(done_by[1].load(), 1000);
}

TEST(ThreadPool, RunOnAllRunsEachThreadIndexOnce) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> seen(4);
    pool.run_on_all([&](int t) { seen[(size_t)t].fetch_add(1); });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  }
}

// Dispatches separated by gaps longer than the spin window make the workers sleep and be woken
// again; results written by the workers must be visible to the caller afterwards.
TEST(ThreadPool, WorkersWakeFromSleepAndPublishTheirResults) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<int64_t> out(64, 0);
    pool.parallel_for(64, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) out[(size_t)i] = i * rep;
    });
    for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(out[(size_t)i], i * rep);
    if (rep % 2 == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadPool::kSpinMicros));
  }
}

TEST(ThreadPool, ManyBackToBackDispatchesStayConsistent) {
  ThreadPool pool(3);
  int64_t total = 0;
  std::vector<int64_t> part(3);
  for (int rep = 0; rep < 5000; ++rep) {
    std::fill(part.begin(), part.end(), 0);
    pool.parallel_for(30, [&](int64_t b, int64_t e, int t) {
      for (int64_t i = b; i < e; ++i) part[(size_t)t] += i;
    });
    total += part[0] + part[1] + part[2];
  }
  EXPECT_EQ(total, 5000 * (29 * 30 / 2));
}

TEST(ThreadPool, DestroysCleanlyWhileWorkersSpinOrSleep) {
  for (int rep = 0; rep < 20; ++rep) {
    ThreadPool pool(3);
    pool.run_on_all([](int) {});
    if (rep % 2)
      std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadPool::kSpinMicros));
  }
  ThreadPool never_used(4);
  SUCCEED();
}

}  // namespace
}  // namespace moeflow
