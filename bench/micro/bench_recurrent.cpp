// The gated DeltaNet layer's own ops on the CPU backend, at the released models' shapes, apart
// from the matmuls around them (bench_matvec.cpp has those):
//   BM_delta_rule   the delta-rule recurrence over `tok` tokens: tok = 1 is a decode step, whose
//                   cost is streaming the state (n_v_heads x head_k x head_v floats, read and
//                   written twice); tok = 512 a prefill batch, which moeflow runs token by token.
//   BM_conv1d_silu  the causal depthwise convolution + silu over the q/k/v channels.
// Shapes (args "kh", "vh"): Qwen3.6-35B-A3B (qwen35moe 35b-a3b) 16 key heads and 32 value heads of
// 128; Qwen3-Next-80B-A3B (qwen3next 80b-a3b) 16 and 32 too; d_conv 4.
//   bench_micro --benchmark_filter='delta_rule|conv1d_silu'
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "bench_common.h"
#include "core/thread_pool.h"

namespace moeflow::bench {
namespace {

std::vector<float> recurrent_bench_values(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t s = seed | 1;
  for (auto& x : v) x = (float)((int64_t)(next(s) % 2001) - 1000) * 1e-3f * scale;
  return v;
}

// args: key heads, value heads, head size, tokens, threads
void BM_delta_rule(benchmark::State& st) {
  const int nk = (int)st.range(0), nv = (int)st.range(1);
  const int64_t hd = st.range(2), n = st.range(3);
  const int threads = (int)st.range(4);
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  CpuBackend be(pool.get());
  const int64_t width = 2 * nk * hd + nv * hd;
  auto qkv = recurrent_bench_values((size_t)(n * width), 1, 1.0f);
  auto a = recurrent_bench_values((size_t)(n * nv), 2, 1.0f);
  auto b = recurrent_bench_values((size_t)(n * nv), 3, 1.0f);
  auto A = recurrent_bench_values((size_t)nv, 4, 1.0f);
  for (auto& x : A) x = -std::exp(x);
  auto dt = recurrent_bench_values((size_t)nv, 5, 1.0f);
  std::vector<float> S((size_t)(nv * hd * hd), 0.0f), out((size_t)(n * nv * hd));
  auto cols = [&](int64_t c0, int64_t nc) {
    return strided_matrix_view(qkv.data() + c0, GgmlType::F32, nc, n, width * sizeof(float));
  };
  DeltaNetParams p;
  p.n_k_heads = nk, p.n_v_heads = nv, p.head_k = hd, p.head_v = hd, p.tiled = true;
  p.A = A.data(), p.dt_bias = dt.data();
  for (auto _ : st) {
    be.gated_delta_net(cols(0, nk * hd), cols(nk * hd, nk * hd), cols(2 * nk * hd, nv * hd),
                       f32_view(a.data(), nv, n), f32_view(b.data(), nv, n),
                       f32_view(S.data(), hd, nv * hd), f32_view(out.data(), nv * hd, n), p);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["tok/s"] =
      benchmark::Counter((double)st.iterations() * n, benchmark::Counter::kIsRate);
  // The state is read and written twice per token (decay + recall, then update + output).
  st.SetBytesProcessed((int64_t)st.iterations() * n * 4 * (int64_t)S.size() * 4);
}

// args: channels, tokens, threads
void BM_conv1d_silu(benchmark::State& st) {
  const int64_t C = st.range(0), n = st.range(1), K = 4;
  const int threads = (int)st.range(2);
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  CpuBackend be(pool.get());
  auto x = recurrent_bench_values((size_t)(n * C), 6, 1.0f);
  auto w = recurrent_bench_values((size_t)(C * K), 7, 0.5f);
  std::vector<float> state((size_t)((K - 1) * C), 0.0f), out((size_t)(n * C));
  for (auto _ : st) {
    be.conv1d_silu(f32_view(x.data(), C, n), f32_view(state.data(), C, K - 1),
                   f32_view(w.data(), K, C), f32_view(out.data(), C, n));
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["tok/s"] =
      benchmark::Counter((double)st.iterations() * n, benchmark::Counter::kIsRate);
}

void delta_rule_args(benchmark::internal::Benchmark* b) {
  for (int64_t tok : {1, 512})
    for (int threads : {1, 2}) b->Args({16, 32, 128, tok, threads});
  b->ArgNames({"kh", "vh", "hd", "tok", "thr"});
  b->MinTime(0.3);
  b->UseRealTime();
}

void conv_args(benchmark::internal::Benchmark* b) {
  // q, k (16 heads of 128 each) and v (32 of 128): 8192 channels.
  for (int64_t tok : {1, 512})
    for (int threads : {1, 2}) b->Args({8192, tok, threads});
  b->ArgNames({"ch", "tok", "thr"});
  b->MinTime(0.3);
  b->UseRealTime();
}

}  // namespace

BENCHMARK(BM_delta_rule)->Apply(delta_rule_args);
BENCHMARK(BM_conv1d_silu)->Apply(conv_args);

}  // namespace moeflow::bench
