#include "runtime/hybrid_costs.h"

#include <algorithm>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/median.h"
#include "core/timer.h"
#include "model/layers/ffn.h"

namespace moeflow {
namespace {

// Median seconds of one expert on n tokens, each rep on the next of `experts`.
double time_experts(CpuBackend& cpu, const std::vector<ExpertView>& experts, int n,
                    FfnScratch& scratch) {
  const int64_t d = experts[0].gate().cols();
  std::vector<float> x((size_t)(d * n)), y((size_t)(d * n));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(rng);
  const TensorView xv = matrix_view(x.data(), GgmlType::F32, d, n);
  const TensorView yv = matrix_view(y.data(), GgmlType::F32, d, n);
  std::vector<double> t;
  const int reps = std::max<int>(5, (int)experts.size());
  for (int r = 0; r <= reps; ++r) {
    const ExpertView& v = experts[(size_t)r % experts.size()];
    FfnMatrices w;
    w.gate = v.gate();
    w.up = v.up();
    w.down = v.down();
    const double t0 = now_seconds();
    glu_ffn(cpu, w, xv, yv, GluParams{}, scratch);
    if (r > 0) t.push_back(now_seconds() - t0);  // the first run warms the code, not the data
  }
  return median(t);
}

}  // namespace

HybridCosts measure_hybrid_costs(const ExpertViewTable& host, ThreadPool* pool, DeviceLink& link) {
  std::vector<ExpertView> experts;
  for (const auto& layer : host.views[0]) {
    if (layer.empty()) continue;
    for (size_t e = 0; e < layer.size() && experts.size() < 8; ++e) experts.push_back(layer[e]);
    break;
  }
  MOEFLOW_CHECK(!experts.empty(), "hybrid: the model has no experts to measure");
  CpuBackend cpu(pool);
  FfnScratch scratch(cpu);
  HybridCosts c;
  c.cpu_expert_s = time_experts(cpu, experts, 1, scratch);
  c.cpu_token_s = std::max(0.0, (time_experts(cpu, experts, 8, scratch) - c.cpu_expert_s) / 7);
  c.h2d_bytes_per_s = measure_pinned_h2d(link, 64ull << 20, 3);
  return c;
}

std::string describe(const HybridCosts& c) {
  return fmt::format(
      "CPU expert {:.2f} ms (+{:.2f} ms per further token), host -> device {:.1f} GB/s",
      c.cpu_expert_s * 1e3, c.cpu_token_s * 1e3, c.h2d_bytes_per_s / 1e9);
}

}  // namespace moeflow
