#include "model/moe/precision_mode.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace moeflow {

namespace {

// Every mode's name, in the order the help and errors list them: parsing, naming and the
// option check all read this one table.
constexpr std::pair<const char*, ExpertMode> kModes[] = {{"exact", ExpertMode::Exact},
                                                         {"hobbit", ExpertMode::Hobbit},
                                                         {"hobbit-all", ExpertMode::HobbitAll},
                                                         {"skip", ExpertMode::Skip},
                                                         {"daop", ExpertMode::Daop}};

}  // namespace

ExpertMode parse_expert_mode(const std::string& name) {
  for (const auto& [n, m] : kModes)
    if (name == n) return m;
  fail("--mode: unknown mode '{}' (known: {})", name, fmt::join(expert_mode_names(), ", "));
}

std::vector<std::string> expert_mode_names() {
  std::vector<std::string> v;
  for (const auto& [n, m] : kModes) v.push_back(n);
  return v;
}

const char* expert_mode_name(ExpertMode m) {
  for (const auto& [n, mode] : kModes)
    if (mode == m) return n;
  return "exact";
}

void validate(const PrecisionModeConfig& c) {
  auto unit = [](double v) { return std::isfinite(v) && v >= 0.0 && v <= 1.0; };
  if (!unit(c.t1)) fail("--hobbit-t1 must be in [0, 1], got {}", c.t1);
  if (!unit(c.t2)) fail("--hobbit-t2 must be in [0, 1], got {}", c.t2);
  if (c.t1 > c.t2)
    fail(
        "--hobbit-t1 ({}) must not exceed --hobbit-t2 ({}): experts up to T1 load in high "
        "precision, those up to T2 in low precision",
        c.t1, c.t2);
  if (!unit(c.skip_threshold)) fail("--skip-threshold must be in [0, 1], got {}", c.skip_threshold);
}

void decide_uses(const PrecisionModeConfig& c, const float* w, int k, ExpertUse* out) {
  if (c.mode == ExpertMode::Exact || c.mode == ExpertMode::Daop || k <= 0) {
    for (int r = 0; r < k; ++r) out[r] = ExpertUse::High;
    return;
  }
  // Sums in double so that T = 1 keeps everything: a float partial sum of weights that add up
  // to one could round just above it.
  double sum = 0;
  for (int r = 0; r < k; ++r) sum += w[r];
  const double inv = sum > 0 ? 1.0 / sum : 0.0;
  double above = 0;  // normalised weight of the experts ranked above r
  for (int r = 0; r < k; ++r) {
    const double wn = w[r] * inv;
    if (c.needs_low()) {
      out[r] = above <= c.t1 ? ExpertUse::High : above <= c.t2 ? ExpertUse::Low : ExpertUse::Skip;
    } else {
      out[r] = r > 0 && wn < c.skip_threshold ? ExpertUse::Skip : ExpertUse::High;
    }
    above += wn;
  }
}

void PrecisionUsage::add(int layer, const Counts& c) {
  if (layer < 0) return;
  std::lock_guard lk(mu_);
  if (static_cast<size_t>(layer) >= layers_.size()) layers_.resize(layer + 1);
  layers_[layer] += c;
}

std::vector<PrecisionUsage::Counts> PrecisionUsage::snapshot() const {
  std::lock_guard lk(mu_);
  return layers_;
}

PrecisionUsage::Counts PrecisionUsage::total() const {
  std::lock_guard lk(mu_);
  Counts t;
  for (const Counts& c : layers_) t += c;
  return t;
}

void PrecisionUsage::reset() {
  std::lock_guard lk(mu_);
  layers_.clear();
}

nlohmann::json usage_json(const PrecisionUsage::Counts& c) {
  return {{"high", c.high},       {"low", c.low},
          {"skip", c.skip},       {"substituted", c.substituted},
          {"precalc", c.precalc}, {"precalc_computed", c.precalc_computed}};
}

}  // namespace moeflow
