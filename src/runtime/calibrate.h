#pragma once
// Fitting HOBBIT's thresholds to a model (`moeflow calibrate`, docs/lossy-modes.md): run a
// calibration text once exactly, then once per (T1, T2) of a grid with the hobbit-all rule
// (every routed expert decided by its score, the worst case of `--mode hobbit`, where only
// cache misses are), and keep the pair that moves the fewest expert bytes per miss among those
// within the accuracy target.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/perplexity.h"

namespace moeflow {

class ForwardContext;

struct CalibrateConfig {
  PerplexityConfig ppl;
  double max_ppl_increase = 0.01;  // relative: 0.01 = perplexity at most 1% above exact
  double max_kl = -1;              // < 0: no KL limit
  double grid_step = 0.1;          // T1 and T2 both run over 0, step, ..., 1
  uint64_t high_expert_bytes = 0;  // bytes of one expert in high / low precision (mean)
  uint64_t low_expert_bytes = 0;
};

struct CalibratePoint {
  double t1 = 0, t2 = 0;
  double ppl = 0, ppl_increase = 0;      // relative to the exact run
  double kl = 0, top1 = 0;               // mean KL(exact || this), top-1 agreement
  uint64_t high = 0, low = 0, skip = 0;  // uses over the run
  // Bytes a cache miss costs under the rule, relative to exact (every use high precision):
  // (high * high_bytes + low * low_bytes) / ((high + low + skip) * high_bytes).
  double miss_bytes_ratio = 1;
  bool within = false;  // meets the accuracy target
};

struct CalibrateResult {
  double ppl_exact = 0;
  std::vector<CalibratePoint> points;  // grid order
  int best = -1;                       // index into points (always >= 0: T1 = T2 = 1 is exact)
  nlohmann::json to_json() const;
};

// Runs the decision for one (T1, T2): set the mode on the context, run the text, report the
// per-run use counts. Supplied by the caller, who owns the engine and its usage counters.
struct CalibrateHooks {
  std::function<void(double t1, double t2)> set_thresholds;                      // (-1, -1): exact
  std::function<void(uint64_t& high, uint64_t& low, uint64_t& skip)> take_uses;  // and reset
  std::function<void(const CalibratePoint&)> on_point;  // progress, optional
};

CalibrateResult calibrate_hobbit(ForwardContext& ctx, std::span<const int32_t> tokens,
                                 const CalibrateConfig& cfg, const CalibrateHooks& hooks);

}  // namespace moeflow
