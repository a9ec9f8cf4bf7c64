// matvec / matmul throughput per weight type at Mixtral expert shapes. Reports the weight
// bytes streamed per second; the weights cycle through kColdBytes so each call reads DRAM, in
// 2 MiB pages as the engine reads resident weights (and as BM_membw_read's bar, huge:1); until
// 2026-12-02 they lay in 4 KiB pages, whose walk read ~2/3 of the huge-page bar on the VMs.
//   bench_micro --benchmark_filter=matvec
#include <benchmark/benchmark.h>

#include <memory>

#include "backend/cpu/matmul.h"
#include "bench_common.h"
#include "core/thread_pool.h"

namespace moeflow::bench {
namespace {

struct Weights {
  std::unique_ptr<Pages> buf;
  size_t mat_bytes = 0;
  int copies = 0;
  uint8_t* copy(int k) { return buf->bytes() + (size_t)k * mat_bytes; }
};

Weights make(GgmlType t, int64_t rows, int64_t cols) {
  Weights w;
  w.mat_bytes = row_bytes(t, cols) * rows;
  w.copies = (int)std::max<size_t>(1, kColdBytes / w.mat_bytes);
  w.buf = std::make_unique<Pages>(w.mat_bytes * w.copies, /*huge=*/true);
  fill_weights(t, w.buf->bytes(), w.mat_bytes * w.copies, 42 + (uint64_t)t);
  return w;
}

// args: type id, rows, cols, threads
void BM_matvec(benchmark::State& st) {
  const GgmlType t = (GgmlType)st.range(0);
  const int64_t rows = st.range(1), cols = st.range(2);
  const int threads = (int)st.range(3);
  Weights w = make(t, rows, cols);
  std::vector<float> x(cols), y(rows);
  for (int64_t i = 0; i < cols; ++i) x[i] = (float)((i * 37) % 101 - 50) * 0.02f;
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  int k = 0;
  for (auto _ : st) {
    matvec(t, w.copy(k), rows, cols, x.data(), y.data(), pool.get());
    benchmark::DoNotOptimize(y.data());
    k = (k + 1) % w.copies;
  }
  st.SetBytesProcessed((int64_t)st.iterations() * (int64_t)w.mat_bytes);
  st.SetLabel(std::string(type_name(t)) + " " + simd_level());
}

// Cache-resident weights (a 256-row slice): the kernel's compute ceiling, to compare with the
// DRAM rate above. args: type id, cols, simd level (0 scalar, 1 avx2, 2 avx512)
void BM_matvec_hot(benchmark::State& st) {
  const GgmlType t = (GgmlType)st.range(0);
  const int64_t rows = 256, cols = st.range(1);
  static const char* kLevels[] = {"scalar", "avx2", "avx512"};
  try {
    force_simd_level(kLevels[st.range(2)]);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
    return;
  }
  AlignedBuffer w(row_bytes(t, cols) * rows);
  fill_weights(t, w.data(), w.size(), 7);
  std::vector<float> x(cols), y(rows);
  for (int64_t i = 0; i < cols; ++i) x[i] = (float)((i * 37) % 101 - 50) * 0.02f;
  for (auto _ : st) {
    matvec(t, w.data(), rows, cols, x.data(), y.data(), nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed((int64_t)st.iterations() * (int64_t)w.size());
  st.SetLabel(std::string(type_name(t)) + " " + simd_level());
  force_simd_level(nullptr);
}

// args: type id, rows, cols, threads, tokens
void BM_matmul(benchmark::State& st) {
  const GgmlType t = (GgmlType)st.range(0);
  const int64_t rows = st.range(1), cols = st.range(2), n_tok = st.range(4);
  const int threads = (int)st.range(3);
  Weights w = make(t, rows, cols);
  std::vector<float> X(cols * n_tok), Y(rows * n_tok);
  for (size_t i = 0; i < X.size(); ++i) X[i] = (float)((i * 37) % 101 - 50) * 0.02f;
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  int k = 0;
  for (auto _ : st) {
    matmul(t, w.copy(k), rows, cols, X.data(), n_tok, Y.data(), pool.get());
    benchmark::DoNotOptimize(Y.data());
    k = (k + 1) % w.copies;
  }
  st.counters["tok/s"] =
      benchmark::Counter((double)st.iterations() * n_tok, benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n_tok * st.iterations() * 1e-9,
                                              benchmark::Counter::kIsRate);
  st.SetLabel(std::string(type_name(t)) + " " + simd_level());
}

void matvec_args(benchmark::internal::Benchmark* b) {
  // Q4_K_R8, Q8_0_R8: as the CPU backend repacks them at load (random bytes are valid weights).
  for (GgmlType t :
       {GgmlType::Q4_K, GgmlType::Q4_K_R8, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q8_0_R8,
        GgmlType::Q4_0, GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS,
        GgmlType::MXFP4, GgmlType::F16, GgmlType::BF16, GgmlType::F32})
    for (int threads : {1, 2}) {
      b->Args({(int64_t)t, 14336, 4096, threads});  // gate / up: 4096 -> 14336
      b->Args({(int64_t)t, 4096, 14336, threads});  // down: 14336 -> 4096
    }
  // A gpt-oss-20b expert (MXFP4 2880 -> 2880), as the file has it and as the CPU repacks it.
  for (GgmlType t : {GgmlType::MXFP4, GgmlType::MXFP4_R8})
    for (int threads : {1, 2}) b->Args({(int64_t)t, 2880, 2880, threads});
  // A DeepSeek-V2-Lite expert's Q5_0 down-projection (1408 -> 2048), and Q5_0 at the Mixtral
  // down shape: its kernel sums in llama.cpp's order, one FMA chain per row (docs/kernels.md).
  for (int threads : {1, 2}) {
    b->Args({(int64_t)GgmlType::Q5_0, 2048, 1408, threads});
    b->Args({(int64_t)GgmlType::Q5_0, 4096, 14336, threads});
  }
  b->ArgNames({"type", "rows", "cols", "thr"});
  b->MinTime(0.3);
  b->UseRealTime();
}

void matmul_args(benchmark::internal::Benchmark* b) {
  for (GgmlType t :
       {GgmlType::Q4_K, GgmlType::Q4_K_R8, GgmlType::Q8_0, GgmlType::Q8_0_R8, GgmlType::Q6_K,
        GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS, GgmlType::Q4_0})
    for (int threads : {1, 2}) b->Args({(int64_t)t, 14336, 4096, threads, 64});
  // A gpt-oss-20b expert (MXFP4 2880 -> 2880) at pp512: ~64 tokens each (32 experts, top-4);
  // and at a short prompt's 8 (pp64), where the interleaved layout's restored rows must still pay.
  for (GgmlType t : {GgmlType::MXFP4, GgmlType::MXFP4_R8})
    for (int threads : {1, 2})
      for (int tok : {8, 64}) b->Args({(int64_t)t, 2880, 2880, threads, tok});
  // gpt-oss-20b's attention query projection (Q8_0 2880 -> 4096) at pp512: every token; and
  // at 8 tokens (a short prompt, or an offloaded expert's share of one), one thread.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_0_R8}) {
    b->Args({(int64_t)t, 4096, 2880, 2, 512});
    b->Args({(int64_t)t, 4096, 2880, 1, 8});
  }
  // A DeepSeek-V2-Lite expert at pp512 (~48 tokens each): gate/up Q4_K 2048 -> 1408, down
  // Q5_0 1408 -> 2048 (1408 columns are not a multiple of 256).
  for (int threads : {1, 2}) {
    b->Args({(int64_t)GgmlType::Q4_K, 1408, 2048, threads, 48});
    b->Args({(int64_t)GgmlType::Q4_K_R8, 1408, 2048, threads, 48});
    b->Args({(int64_t)GgmlType::Q5_0, 2048, 1408, threads, 48});
  }
  // Experts that get few tokens (Q4_K: where matmul starts packing 8-row groups).
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q4_K_R8})
    for (int tok : {4, 8, 12, 16, 24, 32}) b->Args({(int64_t)t, 1408, 2048, 1, tok});
  b->ArgNames({"type", "rows", "cols", "thr", "tok"});
  b->MinTime(0.3);
  b->UseRealTime();
}

BENCHMARK(BM_matvec)->Apply(matvec_args);
BENCHMARK(BM_matmul)->Apply(matmul_args);

void hot_args(benchmark::internal::Benchmark* b) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0,
                     GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS,
                     GgmlType::MXFP4, GgmlType::F16, GgmlType::BF16, GgmlType::F32})
    for (int level : {1, 2}) b->Args({(int64_t)t, 4096, level});
  for (GgmlType t : {GgmlType::Q4_K_R8, GgmlType::MXFP4_R8, GgmlType::Q8_0_R8})
    for (int level : {1, 2}) b->Args({(int64_t)t, 4096, level});
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q4_K_R8})
    for (int level : {1, 2}) b->Args({(int64_t)t, 14336, level});
  b->ArgNames({"type", "cols", "simd"});
  b->MinTime(0.1);
}
BENCHMARK(BM_matvec_hot)->Apply(hot_args);

}  // namespace
}  // namespace moeflow::bench
