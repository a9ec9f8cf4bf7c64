#pragma once
// The host side of the MoE block protocol (docs/ARCHITECTURE.md): from the router's choice for
// the step's tokens to the list of expert units to execute, in order. It holds every decision
// that is control rather than arithmetic:
//   decide   the lossy modes' use of each (token, rank): high precision, low copy or skip, and
//            the cache-aware revisions (hobbit, daop) after asking the provider what it holds;
//   union    the (expert, precision) units of the step in rank order and the (token, rank)
//            slots each one serves;
//   announce provider.on_route (early preemption), then the observer (its predictions are LOW);
//   order    resident units first, then in flight, then not started.
// Stale-input pre-calculation (--precalc) is planned here too: which next-layer experts may be
// computed ahead, and which of this layer's units take such an output instead of running.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/hparams.h"
#include "model/moe/expert_provider.h"
#include "model/moe/precision_mode.h"
#include "model/observer.h"

namespace moeflow {

// One (expert, precision) to run, and the (token * k + rank) slots its output goes to.
struct MoeUnit {
  int expert = 0;
  Precision precision = Precision::High;
  std::span<const int32_t> slots;
};

class MoePlanner {
 public:
  MoePlanner(const HParams& hp, int max_tokens);

  void set_mode(const PrecisionModeConfig& mode, std::shared_ptr<PrecisionUsage> usage);
  const PrecisionModeConfig& mode() const { return mode_; }

  // Buffers the router fills for the step (n x k experts and weights, n x n_expert
  // probabilities), before plan().
  int32_t* experts() { return experts_.data(); }
  float* weights() { return weights_.data(); }
  float* probs() { return probs_.data(); }

  // Decides, unions, announces and orders the step of n tokens routed into the buffers above.
  // `hidden` is the normalised input on the host (for the observer; may be empty if there is
  // none). Outputs pre-calculated for this layer by the previous layer are taken when allowed.
  void plan(int layer, int n, const int32_t* tokens, int64_t pos0, std::span<const float> hidden,
            ExpertProvider& provider, ForwardObserver* observer);

  // The units to execute, in order (resident, in flight, not started).
  const std::vector<MoeUnit>& units() const { return units_; }
  // How many of them were resident when ordered.
  size_t n_resident() const { return n_resident_; }
  // Per (token, rank): kept (1) or skipped (0); the combine applies only kept slots.
  std::span<const uint8_t> keep() const { return {keep_.data(), (size_t)last_n_ * k_}; }
  std::span<const float> slot_weights() const { return {weights_.data(), (size_t)last_n_ * k_}; }
  // Slots served by outputs pre-calculated by the previous layer, and where each output is.
  struct Served {
    int32_t slot;
    int index;  // into the previous layer's pre-calculated outputs
  };
  const std::vector<Served>& pre_served() const { return served_; }

  // Stale-input pre-calculation: `computed` are the experts of layer `next` whose outputs were
  // computed ahead on the stale input (rank order of that layer's router on it); that layer's
  // plan() serves the (token, rank) slots routed to them from those outputs.
  void record_precalc(int next, std::span<const int> computed);
  // True when a decode step should pre-calculate the next layer before the unit at `index`
  // (the first unit that is not resident, if it is already being read).
  bool precalc_before(size_t index, int layer, ExpertProvider& provider) const;

  // Router decision of the last plan(): n x top_k each, and what the mode made of them.
  std::span<const int> last_experts() const { return {experts_.data(), (size_t)last_n_ * k_}; }
  std::span<const float> last_weights() const { return {weights_.data(), (size_t)last_n_ * k_}; }
  std::span<const ExpertUse> last_uses() const { return {uses_.data(), (size_t)last_n_ * k_}; }
  const std::vector<int>& last_exec_order() const { return order_; }
  const std::vector<Precision>& last_exec_precisions() const { return order_prec_; }

 private:
  void revise_for_cache(int layer, int n, ExpertProvider& provider, PrecisionUsage::Counts& counts);

  const HParams& hp_;
  int max_tokens_;
  int k_;
  int last_n_ = 0;
  std::vector<float> probs_;
  std::vector<char> cached_;  // cache-aware modes: expert's high copy held or coming
  std::vector<int32_t> experts_;
  std::vector<float> weights_;
  std::vector<uint8_t> keep_;
  PrecisionModeConfig mode_;
  std::shared_ptr<PrecisionUsage> usage_;
  std::vector<ExpertUse> uses_;
  // A "unit" is an expert in one precision: unit = expert * 2 + precision.
  std::vector<int> union_;
  std::vector<int> union_experts_;
  std::vector<Precision> union_prec_;
  std::vector<int> order_;
  std::vector<Precision> order_prec_;
  std::vector<int> rank_[3];
  std::vector<std::vector<int32_t>> slots_of_;
  std::vector<char> seen_;
  std::vector<MoeUnit> units_;
  size_t n_resident_ = 0;
  // Pre-calculation bookkeeping.
  int pre_layer_ = -1;            // layer the pre-calculated outputs were computed for
  std::vector<int> pre_experts_;  // their experts (at most top_k)
  std::vector<char> pre_served_;  // per unit of the current step: taken from them
  std::vector<Served> served_;
};

}  // namespace moeflow
