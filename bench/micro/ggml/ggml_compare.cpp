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
#include "core/aligned_buffer.h"
#include "kernels/cpu/matmul.h"

using namespace moeflow;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  ggml_cpu_init();
  const bool cold = argc > 1 && std::strcmp(argv[1], "cold") == 0;
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0,
                            GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS,
                            GgmlType::MXFP4, GgmlType::F16, GgmlType::BF16};
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
    // Correctness: both kernels on ggml's activation (the layouts are the same).
    double maxrel = 0;
    for (int64_t r = 0; r < std::min<int64_t>(rows, 64); ++r) {
      float sg = 0;
      tr->vec_dot((int)cols, &sg, 0, W.data() + r * rb, 0, act_g.data(), 0, 1);
      const float sm = vec_dot(t, cols, W.data() + r * rb, act_g.data());
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
