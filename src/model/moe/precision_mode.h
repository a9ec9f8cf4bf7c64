#pragma once
// Which copy of each routed expert a token uses: the lossy modes of docs/lossy-modes.md.
//   exact       every routed expert at full precision (the default; bit-identical to the model)
//   hobbit      HOBBIT (the paper's rule): an expert whose high-precision copy is cached (or
//               already on its way) runs in high precision; for a cache miss, rank the token's
//               experts by normalised gate weight, s_r = sum of the normalised weights ranked
//               above r (the top-1 has s = 0): load high precision if s_r <= T1, the
//               low-precision copy if s_r <= T2, else skip it
//   hobbit-all  the same score rule for every routed expert, cached or not: the output depends
//               on the routing only (the worst case of hobbit; what calibrate measures)
//   skip        AdapMoE-style: drop experts whose normalised weight is below a threshold (the
//               top-ranked expert is always kept, so every token keeps at least one expert)
//   daop        DAOP's graceful degradation (decode steps): when two or more of a token's
//               experts are not resident, the highest-ranked one is kept and every other one
//               is replaced by the most probable resident expert the token does not use yet;
//               the weights are the router's probabilities of the new set (renormalised when
//               the model renormalises its top-k)
// Orthogonal to the mode, `precalc` is DAOP's stale-input pre-calculation (decode steps, with
// offloading): when layer l is about to wait for an expert read, the idle cores compute the
// experts that layer l+1's router picks for layer l's input (its residual stream, normalised
// with layer l+1's ffn_norm) among the resident ones; if layer l+1's router then routes a
// token to one of them, that output is used instead of running it on the real input.
// "Normalised" is w_r / sum of the token's top-k weights, whatever the model's own top-k
// renormalisation; the weights applied in the combine are the router's, and those of the kept
// experts are NOT renormalised after a skip (see docs/lossy-modes.md for why).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moeflow {

enum class ExpertMode : uint8_t { Exact = 0, Hobbit = 1, Skip = 2, HobbitAll = 3, Daop = 4 };

// Per (token, rank): what the MoE block does with that routed expert.
enum class ExpertUse : uint8_t { High = 0, Low = 1, Skip = 2 };

struct PrecisionModeConfig {
  ExpertMode mode = ExpertMode::Exact;
  double t1 = 0.6;              // HOBBIT: high precision while s <= t1 (Mixtral default)
  double t2 = 0.9;              // HOBBIT: low precision while s <= t2, skipped beyond
  double skip_threshold = 0.0;  // skip: drop a non-top-1 expert whose normalised weight < this
  bool precalc = false;         // DAOP stale-input pre-calculation (lossy, any mode)

  bool lossless() const { return mode == ExpertMode::Exact && !precalc; }
  bool needs_low() const { return mode == ExpertMode::Hobbit || mode == ExpertMode::HobbitAll; }
  // Decisions that look at what the expert cache holds (so they are made per step, at route
  // time, and the output depends on the cache).
  bool cache_aware() const { return mode == ExpertMode::Hobbit || mode == ExpertMode::Daop; }
};

// "exact" | "hobbit" | "hobbit-all" | "skip" | "daop"; throws moeflow::Error listing them.
ExpertMode parse_expert_mode(const std::string& name);
// Every name parse_expert_mode takes, for option checks.
std::vector<std::string> expert_mode_names();
const char* expert_mode_name(ExpertMode m);
// Throws naming the option at fault (T1 > T2, thresholds outside [0, 1], NaN).
void validate(const PrecisionModeConfig& c);

// Decides the use of each of one token's k experts (rank order, weights as the router gave
// them) by the score rule alone: the hobbit modes' T1/T2 rule, skip's threshold, High for
// exact and daop. Deterministic: depends only on the weights and the configuration. The cache-
// aware modes then revise it with the cache's contents (MoeBlock).
void decide_uses(const PrecisionModeConfig& c, const float* weights, int k, ExpertUse* out);

// Per-layer counts of the decisions (token x routed expert), shared by the MoE block (writer,
// the compute thread) and the statistics (readers, any thread).
class PrecisionUsage {
 public:
  struct Counts {
    uint64_t high = 0, low = 0, skip = 0;
    uint64_t substituted = 0;  // daop: routed experts replaced by a cached one (counted in high)
    uint64_t precalc = 0;      // served by a stale-input pre-calculated output (counted in high)
    uint64_t precalc_computed = 0;  // experts pre-calculated for this layer (used or not)
    Counts& operator+=(const Counts& o) {
      high += o.high, low += o.low, skip += o.skip, substituted += o.substituted;
      precalc += o.precalc, precalc_computed += o.precalc_computed;
      return *this;
    }
  };
  void add(int layer, const Counts& c);
  std::vector<Counts> snapshot() const;
  Counts total() const;  // over all layers
  void reset();

 private:
  mutable std::mutex mu_;
  std::vector<Counts> layers_;
};

// {"high":..,"low":..,"skip":..,"substituted":..,"precalc":..,"precalc_computed":..} of one
// layer's counts.
nlohmann::json usage_json(const PrecisionUsage::Counts& c);

}  // namespace moeflow
