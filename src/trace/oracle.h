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
// Predicts exactly the experts of the next `lookahead` (step, layer) routes after the current one.
std::unique_ptr<Predictor> make_oracle_predictor(const Trace& t, int lookahead);

}  // namespace moeflow::trace
