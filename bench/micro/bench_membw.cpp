// This machine's streaming read bandwidth: the bar matvec is measured against. Sums 64-bit
// words of a buffer larger than the last-level cache with 1 or 2 threads.
//   bench_micro --benchmark_filter=membw
#include <benchmark/benchmark.h>

#include <memory>

#include "bench_common.h"
#include "core/thread_pool.h"

namespace moeflow::bench {
namespace {

// Plain C++ so it builds anywhere; -O2 turns it into wide loads, and the work per byte is
// negligible next to a DRAM access.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

void BM_membw_read(benchmark::State& st) {
  const int threads = (int)st.range(0);
  AlignedBuffer buf(kColdBytes, 4096);
  std::memset(buf.data(), 1, kColdBytes);
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  const size_t words = kColdBytes / 8;
  const uint64_t* p = buf.as<uint64_t>();
  for (auto _ : st) {
    uint64_t total = 0;
    if (pool) {
      std::vector<uint64_t> part(threads);
      pool->parallel_for(
          (int64_t)words,
          [&](int64_t b, int64_t e, int t) { part[t] = sum_words(p + b, (size_t)(e - b)); }, 4096);
      for (uint64_t v : part) total += v;
    } else {
      total = sum_words(p, words);
    }
    benchmark::DoNotOptimize(total);
  }
  st.SetBytesProcessed((int64_t)st.iterations() * (int64_t)kColdBytes);
}

BENCHMARK(BM_membw_read)->Arg(1)->Arg(2)->ArgName("thr")->MinTime(0.5)->UseRealTime();

}  // namespace
}  // namespace moeflow::bench
