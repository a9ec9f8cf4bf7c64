#include "runtime/calibrate.h"

#include <cmath>

#include "core/error.h"

namespace moeflow {

nlohmann::json CalibrateResult::to_json() const {
  auto point = [](const CalibratePoint& p) {
    return nlohmann::json{{"t1", p.t1},
                          {"t2", p.t2},
                          {"perplexity", p.ppl},
                          {"ppl_increase", p.ppl_increase},
                          {"kl_divergence", p.kl},
                          {"top1_agreement", p.top1},
                          {"uses", {{"high", p.high}, {"low", p.low}, {"skip", p.skip}}},
                          {"miss_bytes_ratio", p.miss_bytes_ratio},
                          {"within_target", p.within}};
  };
  nlohmann::json j;
  j["ppl_exact"] = ppl_exact;
  nlohmann::json all = nlohmann::json::array();
  for (const CalibratePoint& p : points) all.push_back(point(p));
  j["points"] = std::move(all);
  if (best >= 0) {
    const CalibratePoint& b = points[best];
    j["t1"] = b.t1;
    j["t2"] = b.t2;
    j["best"] = point(b);
  }
  return j;
}

CalibrateResult calibrate_hobbit(ForwardContext& ctx, std::span<const int32_t> tokens,
                                 const CalibrateConfig& cfg, const CalibrateHooks& hooks) {
  if (!(cfg.grid_step > 0 && cfg.grid_step <= 1))
    fail("--grid-step must be in (0, 1], got {}", cfg.grid_step);
  if (!(cfg.max_ppl_increase >= 0))
    fail("--max-ppl-increase must be >= 0, got {}", cfg.max_ppl_increase);
  MOEFLOW_CHECK(cfg.high_expert_bytes > 0, "calibrate: the model's expert size is unknown");
  const ChunkPlan plan = plan_chunks(tokens.size(), cfg.ppl);
  const size_t n_rows = (size_t)plan.n_scored();

  // The exact run's scored logits, kept in memory for the KL of every grid point.
  hooks.set_thresholds(-1, -1);
  std::vector<float> exact;
  size_t n_vocab = 0;
  CalibrateResult res;
  const PerplexityResult base = run_perplexity(ctx, tokens, cfg.ppl, [&](const ScoredRow& r) {
    if (n_vocab == 0) {
      n_vocab = r.logits.size();
      const double gib = (double)n_vocab * n_rows * sizeof(float) / (1024.0 * 1024 * 1024);
      if (gib > 2.0)
        fail(
            "calibrate keeps the exact run's logits in memory: {:.1f} GiB for {} scored rows "
            "of {} tokens; lower --chunks or -c",
            gib, n_rows, n_vocab);
      exact.reserve(n_vocab * n_rows);
    }
    exact.insert(exact.end(), r.logits.begin(), r.logits.end());
  });
  res.ppl_exact = base.ppl();
  uint64_t h = 0, l = 0, s = 0;
  hooks.take_uses(h, l, s);

  const int steps = (int)std::lround(1.0 / cfg.grid_step);
  for (int i = 0; i <= steps; ++i) {
    for (int j = i; j <= steps; ++j) {
      CalibratePoint p;
      p.t1 = std::min(1.0, i * cfg.grid_step);
      p.t2 = std::min(1.0, j * cfg.grid_step);
      hooks.set_thresholds(p.t1, p.t2);
      KlDivergence kl;
      size_t row = 0;
      const PerplexityResult r = run_perplexity(ctx, tokens, cfg.ppl, [&](const ScoredRow& sr) {
        kl.add(std::span<const float>(exact.data() + row * n_vocab, n_vocab), sr.logits, sr.target);
        ++row;
      });
      hooks.take_uses(p.high, p.low, p.skip);
      p.ppl = r.ppl();
      p.ppl_increase = p.ppl / res.ppl_exact - 1.0;
      p.kl = kl.mean();
      p.top1 = kl.top1_agreement();
      const double uses = (double)(p.high + p.low + p.skip);
      p.miss_bytes_ratio =
          uses > 0
              ? ((double)p.high * cfg.high_expert_bytes + (double)p.low * cfg.low_expert_bytes) /
                    (uses * (double)cfg.high_expert_bytes)
              : 1.0;
      // A tiny tolerance: T1 = 1 is exact, and its perplexity must count as no increase.
      p.within =
          p.ppl_increase <= cfg.max_ppl_increase + 1e-12 && (cfg.max_kl < 0 || p.kl <= cfg.max_kl);
      res.points.push_back(p);
      if (hooks.on_point) hooks.on_point(p);
    }
  }
  for (size_t i = 0; i < res.points.size(); ++i) {
    const CalibratePoint& p = res.points[i];
    if (!p.within) continue;
    if (res.best < 0) {
      res.best = (int)i;
      continue;
    }
    const CalibratePoint& b = res.points[res.best];
    // Fewest bytes per miss; among equals the smaller accuracy cost.
    if (p.miss_bytes_ratio < b.miss_bytes_ratio - 1e-12 ||
        (std::fabs(p.miss_bytes_ratio - b.miss_bytes_ratio) <= 1e-12 && p.kl < b.kl))
      res.best = (int)i;
  }
  hooks.set_thresholds(-1, -1);
  return res;
}

}  // namespace moeflow
