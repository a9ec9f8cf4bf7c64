#pragma once
// Future-aware components for lower bounds in the simulator: Belady's replacement (evict the
// expert whose next use is farthest) and a perfect predictor. Both read the trace ahead.
#include <memory>

#include "policy/eviction_policy.h"
#include "policy/predictor.h"
#include "policy/resident_set.h"
#include "trace/trace.h"

namespace moeflow::trace {

// Logical time (policy/resident_set.h): step * n_layers + layer, a step being a trace step
// (one token; a prefill is replayed as one step at its first token).

// Belady's MIN. With `bypass` (the policy named "belady") a miss is cached only if it is needed
// again before some resident; the simulator then decides a whole route at once: of the residents
// and the route's experts it keeps the `capacity` with the soonest next use. That is the optimum
// number of demand misses of any policy, non-admitting ones (DAOP) included, so it is the lower
// bound. Without bypass ("belady-forced") every miss is cached (classic MIN, forced admission).
class BeladyPolicy : public EvictionPolicy {
 public:
  virtual bool bypass() const = 0;
  // Logical time of k's first use after t; UINT64_MAX when it is never used again.
  virtual uint64_t next_use(ExpertKey k, uint64_t t) const = 0;
};

std::unique_ptr<BeladyPolicy> make_belady(const Trace& t, bool bypass = true);
// How good an imperfect oracle is: each expert of a future route is predicted with probability
// `recall`, and each predicted route adds `wrong` experts it does not use on average (whole part
// always, fractional part with that probability). A predictor of a given recall and precision
// at a given distance, to find the quality a causal predictor would need (bench/
// predictor_quality.py). Draws hash (seed, step, layer, expert): the same on every run.
struct OracleQuality {
  double recall = 1.0;
  double wrong = 0.0;
  uint64_t seed = 1;
};
// Predicts the experts of the next `lookahead` (step, layer) routes after the current one:
// exactly them with the default quality.
std::unique_ptr<Predictor> make_oracle_predictor(const Trace& t, int lookahead,
                                                 const OracleQuality& q = {});

}  // namespace moeflow::trace
