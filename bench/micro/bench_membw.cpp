// This machine's streaming read bandwidth: the bar matvec and decode are measured against. Sums
// 64-bit words of a buffer larger than the last-level cache with 1 or 2 threads, in 2 MiB pages
// (pages:huge, the bar: a model that fits is read into memory with MADV_HUGEPAGE, as here) and
// in 4 KiB pages (pages:4k, the file's mapping and this benchmark before 2026-12-01). On the
// 2-vCPU VMs the 4 KiB walk reads less than the engine's decode streams from huge pages (which
// then showed decode at 103-134% of "the bandwidth": bench/REPORT-simd-levels.md).
//   bench_micro --benchmark_filter=membw
#include <benchmark/benchmark.h>

#include <memory>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "core/thread_pool.h"

namespace moeflow::bench {
namespace {

// Plain C++ so it builds anywhere; -O2 turns it into wide loads, and the work per byte is
// negligible next to a DRAM access. Every line prefetched 3 KiB ahead into L2, as the kernels do
// (simd_avx2_util.h, kPrefetchAhead): on the Sapphire Rapids VM, two threads in huge pages,
// 25.6-31.4 GB/s with it against 22.3-25.1 without (3 interleaved pairs).
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    if (i % 8 == 0) __builtin_prefetch(p + i + 384, 0, 1);  // locality 1: _MM_HINT_T2
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

void BM_membw_read(benchmark::State& st) {
  const int threads = (int)st.range(0);
  const Pages buf(kColdBytes, st.range(1) != 0);
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  const size_t words = kColdBytes / 8;
  const uint64_t* p = buf.words();
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
  st.SetLabel(st.range(1) != 0 ? "pages:huge" : "pages:4k");
}

// thr: 1, 2 and every core (bench_engine.py's -t); huge: 1 = 2 MiB pages (the bar), 0 = 4 KiB.
void membw_args(benchmark::internal::Benchmark* b) {
  std::vector<int> threads{1, 2};
  const int cores = (int)std::thread::hardware_concurrency();
  if (cores > 2) threads.push_back(cores);
  for (int huge : {1, 0})
    for (int t : threads) b->Args({t, huge});
  b->ArgNames({"thr", "huge"});
  b->MinTime(0.5);
  b->UseRealTime();
}
BENCHMARK(BM_membw_read)->Apply(membw_args);

}  // namespace
}  // namespace moeflow::bench
