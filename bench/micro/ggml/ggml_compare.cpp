// Cross-check and speed comparison of moeflow's dot kernels against llama.cpp's (ggml-cpu from
// the llama-cpp-python wheel), on identical weight bytes. Not part of the CMake build: run
// ./run_compare.sh after building build-kernels. Single thread, interleaved runs, median.
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../bench_common.h"
#include "backend/cpu/matmul.h"
#include "core/aligned_buffer.h"

using namespace moeflow;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Batched product of 64 tokens with a 1024 x 4096 slice: moeflow matmul against ggml's
// non-repacked path (one vec_dot per row and token, as its mul_mat does on x86).
static int prefill() {
  const int64_t cols = 4096, rows = 1024, n_tok = 64;
  std::printf("%-7s %14s %14s %8s\n", "type", "moeflow GFLOP/s", "ggml GFLOP/s", "ratio");
  for (GgmlType t :
       {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q8_0, GgmlType::Q4_0}) {
    const auto* tr = ggml_get_type_traits_cpu((ggml_type)t);
    const auto* atr = ggml_get_type_traits_cpu(tr->vec_dot_type);
    const size_t rb = row_bytes(t, cols);
    AlignedBuffer W(rb * rows, 4096);
    bench::fill_weights(t, W.data(), W.size(), 3);
    std::vector<float> X(cols * n_tok), Y(rows * n_tok);
    std::mt19937 rng(5);
    std::normal_distribution<float> g;
    for (auto& v : X) v = g(rng);
    const size_t arb = ggml_row_size(tr->vec_dot_type, cols);
    std::vector<uint8_t> A(arb * n_tok);
    std::vector<double> tm, tg;
    for (int rep = 0; rep < 7; ++rep) {
      double t0 = now();
      matmul(t, W.data(), rows, cols, X.data(), n_tok, Y.data(), nullptr);
      tm.push_back(now() - t0);
      t0 = now();
      for (int64_t k = 0; k < n_tok; ++k)
        atr->from_float(X.data() + k * cols, A.data() + k * arb, cols);
      // ggml's blocking: 16 rows x 16 tokens tiles.
      for (int64_t r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < n_tok; c0 += 16)
          for (int64_t c = c0; c < c0 + 16; ++c)
            for (int64_t r = r0; r < r0 + 16; ++r)
              tr->vec_dot((int)cols, &Y[c * rows + r], 0, W.data() + r * rb, 0, A.data() + c * arb,
                          0, 1);
      tg.push_back(now() - t0);
    }
    std::sort(tm.begin(), tm.end());
    std::sort(tg.begin(), tg.end());
    const double flop = 2.0 * rows * cols * n_tok * 1e-9;
    std::printf("%-7s %14.1f %14.1f %8.2f\n", type_name(t), flop / tm[3], flop / tg[3],
                tg[3] / tm[3]);
  }
  return 0;
}

int main(int argc, char** argv) {
  ggml_cpu_init();
  const bool cold = argc > 1 && std::strcmp(argv[1], "cold") == 0;
  if (argc > 1 && std::strcmp(argv[1], "prefill") == 0) return prefill();
  const GgmlType types[] = {GgmlType::Q4_K,  GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0,
                            GgmlType::Q5_K,  GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS,
                            GgmlType::MXFP4, GgmlType::F16,  GgmlType::BF16};
  const int64_t cols = 4096, rows = cold ? 14336 : 256;
  std::printf("%-7s %-6s %12s %12s %8s %10s\n", "type", "mode", "moeflow GB/s", "ggml GB/s",
              "ratio", "max rel diff");
  for (GgmlType t : types) {
    const auto* tr = ggml_get_type_traits_cpu((ggml_type)t);
    const auto* atr = ggml_get_type_traits_cpu(tr->vec_dot_type);
    const size_t mat = row_bytes(t, cols) * rows;
    const int copies = cold ? (int)std::max<size_t>(1, bench::kColdBytes / mat) : 1;
    AlignedBuffer W(mat * copies, 4096);
    bench::fill_weights(t, W.data(), W.size(), 11);
    std::vector<float> x(cols);
    std::mt19937 rng(5);
    std::normal_distribution<float> g;
    for (auto& v : x) v = g(rng);
    std::vector<uint8_t> act_m, act_g(ggml_row_size(tr->vec_dot_type, cols) + 64);
    quantize_activation(t, x.data(), cols, act_m);
    atr->from_float(x.data(), act_g.data(), cols);
    const size_t rb = row_bytes(t, cols);
    // Correctness: each kernel on its own engine's quantization of the same x (moeflow's Q8_0
    // activation rows carry more than ggml's block_q8_0: docs/kernels.md), so a difference in
    // either the quantizer or the dot product shows.
    double maxrel = 0;
    for (int64_t r = 0; r < std::min<int64_t>(rows, 64); ++r) {
      float sg = 0;
      tr->vec_dot((int)cols, &sg, 0, W.data() + r * rb, 0, act_g.data(), 0, 1);
      const float sm = vec_dot(t, cols, W.data() + r * rb, act_m.data());
      maxrel = std::max(maxrel, std::fabs((double)sm - sg) / (std::fabs((double)sg) + 1e-3));
    }
    std::vector<float> y(rows);
    std::vector<double> tm, tg;
    int k = 0;
    for (int rep = 0; rep < (cold ? 15 : 200); ++rep) {
      const uint8_t* Wk = W.data() + (size_t)k * mat;
      double t0 = now();
      matvec(t, Wk, rows, cols, x.data(), y.data(), nullptr);
      tm.push_back(now() - t0);
      k = (k + 1) % copies;
      Wk = W.data() + (size_t)k * mat;
      t0 = now();
      atr->from_float(x.data(), act_g.data(), cols);
      for (int64_t r = 0; r < rows; ++r)
        tr->vec_dot((int)cols, &y[r], 0, Wk + r * rb, 0, act_g.data(), 0, 1);
      tg.push_back(now() - t0);
      k = (k + 1) % copies;
    }
    std::sort(tm.begin(), tm.end());
    std::sort(tg.begin(), tg.end());
    const double gm = mat / tm[tm.size() / 2] * 1e-9, gg = mat / tg[tg.size() / 2] * 1e-9;
    std::printf("%-7s %-6s %12.2f %12.2f %8.2f %10.2e  (%s)\n", type_name(t), cold ? "cold" : "hot",
                gm, gg, gm / gg, maxrel, simd_level());
  }
}
