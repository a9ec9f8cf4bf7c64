#pragma once
// The MoE block protocol (docs/model.md): route -> provider.on_route -> observer -> order the
// experts resident, in flight, not started -> per expert acquire / SwiGLU over its tokens /
// release -> combine in a fixed order (ascending token, then router rank), so exact modes are
// bit-identical whatever order the experts ran in.
// The lossy modes (docs/lossy-modes.md) decide per token and router rank whether the expert
// runs in high precision, from its low-precision copy, or not at all; an expert is then run
// once per precision over the tokens that asked for it, and skipped ones add nothing. The
// cache-aware modes (hobbit, daop) ask the provider what it holds before deciding, so they
// only change what would have been a cache miss. With mode.precalc a decode step about to wait
// for a read fills the wait with the next layer's predicted experts on a stale input
// (set_stale_input), and the next step takes those outputs for the experts it routes to.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "experts/expert_provider.h"
#include "experts/precision_mode.h"
#include "model/hparams.h"
#include "model/observer.h"
#include "model/weights.h"

namespace moeflow {

// Softmax over all n_expert router logits, keep the k largest probabilities (ties: lower expert
// first), optionally renormalise them to sum 1. experts/weights receive k entries, rank order.
void select_topk(const float* logits, int n_expert, int k, bool renorm, int* experts,
                 float* weights, float* scratch /* n_expert */);

class MoeBlock {
 public:
  MoeBlock(const HParams& hp, int max_tokens);

  // out[n][n_embd] = MoE(xn) for the n tokens (n <= max_tokens). tokens may be null.
  void run(int layer, const LayerWeights& L, const float* xn, int n, const int32_t* tokens,
           int64_t pos0, ExpertProvider& provider, ForwardObserver* observer, float* out,
           ThreadPool* pool);

  // Lossy modes: how routed experts are served from now on. `usage` (optional) receives the
  // per-layer counts of high / low / skipped uses. Throws on an invalid configuration.
  void set_mode(const PrecisionModeConfig& mode, std::shared_ptr<PrecisionUsage> usage = nullptr);
  const PrecisionModeConfig& mode() const { return mode_; }

  // Stale-input pre-calculation (mode().precalc): the next run() may pre-calculate layer
  // next's experts on `resid` (n x n_embd, the residual stream entering this MoE block);
  // next == nullptr (last layer, or a dense one) disables it. Both must stay valid during run().
  void set_stale_input(const LayerWeights* next, const float* resid) {
    next_ = next;
    resid_ = resid;
  }

  // Router decision of the last run(): n x top_k each.
  std::span<const int> last_experts() const { return {experts_.data(), (size_t)last_n_ * k_}; }
  std::span<const float> last_weights() const { return {weights_.data(), (size_t)last_n_ * k_}; }
  // What the mode made of each of them (n x top_k).
  std::span<const ExpertUse> last_uses() const { return {uses_.data(), (size_t)last_n_ * k_}; }
  // The order experts were executed in by the last run() (for tests and statistics), and the
  // precision of each execution.
  const std::vector<int>& last_exec_order() const { return order_; }
  const std::vector<Precision>& last_exec_precisions() const { return order_prec_; }

 private:
  void revise_for_cache(int layer, int n, ExpertProvider& provider, PrecisionUsage::Counts& counts);
  // acquire, check the slice's shape, SwiGLU over the m rows of x into y, release (also when
  // the computation throws).
  void run_expert(ExpertProvider& provider, int layer, int e, Precision p, const float* x, int m,
                  float* y, ThreadPool* pool);
  // Computes layer+1's predicted resident experts on the stale input (decode, one token).
  void precalculate(int layer, ExpertProvider& provider, ThreadPool* pool);

  const HParams& hp_;
  int max_tokens_;
  int k_;
  int last_n_ = 0;
  std::vector<float> logits_, probs_;  // router logits and softmax probabilities, n x n_expert
  std::vector<char> cached_;               // cache-aware modes: expert's high copy held or coming
  std::vector<int> experts_;
  std::vector<float> weights_;
  PrecisionModeConfig mode_;
  std::shared_ptr<PrecisionUsage> usage_;
  std::vector<ExpertUse> uses_;
  // A "unit" is an expert in one precision: unit = expert * 2 + precision.
  std::vector<int> union_;                  // units of the step, router rank order
  std::vector<int> union_experts_;          // their experts / precisions (for the provider)
  std::vector<Precision> union_prec_;
  std::vector<int> order_;                  // executed experts, and their precisions
  std::vector<Precision> order_prec_;
  std::vector<int> rank_[3];  // units of the step by residency class
  std::vector<std::vector<int>> slots_of_;  // per unit: indices t*k + rank routed to it
  std::vector<char> seen_;
  AlignedBuffer xe_, gu_, h_, ye_, yslot_;
  // Stale-input pre-calculation: inputs for the next run(), and what it may take from this one.
  const LayerWeights* next_ = nullptr;
  const float* resid_ = nullptr;
  int pre_layer_ = -1;            // layer the outputs below were computed for
  std::vector<int> pre_experts_;  // their experts (at most top_k)
  std::vector<char> pre_served_;  // per unit of the current step: taken from pre_out_
  std::vector<float> pre_logits_, pre_probs_, pre_w_;
  std::vector<int> pre_pick_;
  AlignedBuffer stale_, pre_out_;  // normalised stale input; top_k x n_embd outputs
  std::vector<float> shgate_;
};

}  // namespace moeflow
