#pragma once
// The MoE block protocol (docs/ARCHITECTURE.md): route -> plan (MoePlanner: lossy decisions,
// union over tokens, provider.on_route, observer, order resident / in flight / not started) ->
// per unit acquire / compute (MoeExecutor, on the Backend) / release -> combine in a fixed
// order (ascending token, then router rank), so exact modes are bit-identical whatever order
// the experts ran in. With mode.precalc a decode step about to wait for a read fills the wait
// with the next layer's predicted resident experts on a stale input (set_stale_input), and the
// next layer takes those outputs for the experts it routes to. On a device backend with a host
// backend (DAOP's CPU pre-calculation) the next layer's predicted experts that are not in
// device memory are also computed, every decode step, by the host backend from the provider's
// host views, while the device runs this layer's experts.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/hparams.h"
#include "model/layer_spec.h"
#include "model/moe/expert_provider.h"
#include "model/moe/moe_executor.h"
#include "model/moe/moe_planner.h"
#include "model/moe/precision_mode.h"
#include "model/observer.h"
#include "model/routing_override.h"
#include "model/weights.h"

namespace moeflow {

// Softmax over all n_expert router logits, keep the k largest probabilities (ties: lower expert
// first), optionally renormalise them to sum 1. experts/weights receive k entries, rank order.
// (The softmax-before-top-k rule of RoutingSpec, on the host.)
void select_topk(const float* logits, int n_expert, int k, bool renorm, int* experts,
                 float* weights, float* scratch /* n_expert */);

class MoeBlock {
 public:
  MoeBlock(Backend& be, const HParams& hp, int max_tokens);

  // out[n][n_embd] = MoE(xn) for the n rows of xn (n <= max_tokens). tokens may be null.
  // router_in: the router's input when it is not xn (Gemma 4), or empty.
  void run(int layer, const LayerWeights& L, const LayerSpec& spec, const TensorView& xn,
           const int32_t* tokens, int64_t pos0, ExpertProvider& provider, ForwardObserver* observer,
           TensorView out, const TensorView& router_in = {});

  // Lossy modes: how routed experts are served from now on. `usage` (optional) receives the
  // per-layer counts of high / low / skipped uses. Throws on an invalid configuration.
  // Computes experts held in host memory when the backend is a device (see MoeExecutor).
  void set_host_backend(Backend* host) { exec_.set_host(host); }
  void set_mode(const PrecisionModeConfig& mode, std::shared_ptr<PrecisionUsage> usage = nullptr) {
    planner_.set_mode(mode, std::move(usage));
  }
  const PrecisionModeConfig& mode() const { return planner_.mode(); }

  // Stale-input pre-calculation (mode().precalc): the next run() may pre-calculate layer
  // next's experts on `resid` (the residual stream entering this MoE block); next == nullptr
  // (last layer, or a dense one) disables it. All must stay valid during run().
  void set_stale_input(const LayerWeights* next, const LayerSpec* next_spec,
                       const TensorView& resid) {
    next_ = next;
    next_spec_ = next_spec;
    resid_ = resid;
  }

  // Routing decided elsewhere (model/routing_override.h), or null: the router's own. Must
  // outlive the runs it is set for.
  void set_routing_override(RoutingOverride* o) { routing_override_ = o; }

  // Router decision of the last run(): n x top_k each.
  std::span<const int> last_experts() const { return planner_.last_experts(); }
  std::span<const float> last_weights() const { return planner_.last_weights(); }
  // What the mode made of each of them (n x top_k).
  std::span<const ExpertUse> last_uses() const { return planner_.last_uses(); }
  // The order experts were executed in by the last run(), and the precision of each.
  const std::vector<int>& last_exec_order() const { return planner_.last_exec_order(); }
  const std::vector<Precision>& last_exec_precisions() const {
    return planner_.last_exec_precisions();
  }

 private:
  RoutingOverride* routing_override_ = nullptr;
  std::vector<int32_t> observed_tokens_;  // the override's token ids for observers
  // acquire (streamed), check the slice's shape, add the expert's resident bias rows from L,
  // compute(view, ready) (ready(proj) awaits a matrix), release (also when compute throws).
  template <typename Fn>
  void with_expert(ExpertProvider& provider, const LayerWeights& L, int layer, int e, Precision p,
                   Fn&& compute);
  // Routes the stale input through layer+1's router (decode, one token): pre_pick_.
  void route_stale(int layer);
  // Computes layer+1's predicted resident experts on the stale input, on the backend (those
  // left to the host are not).
  void precalculate_resident(int layer, ExpertProvider& provider);
  // Picks layer+1's predicted experts that are not in the backend's memory and have host views,
  // and brings the stale input and their bias rows to the host while the backend is idle.
  void prepare_host_precalc(int layer, ExpertProvider& provider);
  // Computes the picked experts on the host backend and copies the outputs to the backend.
  void precalculate_on_host();

  Backend& be_;
  const HParams& hp_;
  int k_;
  MoePlanner planner_;
  MoeExecutor exec_;
  BackendScratch logits_;
  std::vector<float> hidden_staging_;
  // Stale-input pre-calculation.
  const LayerWeights* next_ = nullptr;
  const LayerSpec* next_spec_ = nullptr;
  TensorView resid_;
  BackendScratch stale_, pre_logits_, pre_out_;
  std::vector<int32_t> pre_pick_;
  std::vector<float> pre_w_, pre_probs_;
  std::vector<int> pre_computed_;
  TensorView pre_outputs_;   // outputs computed ahead for the next layer (rows in computed order)
  bool pre_routed_ = false;  // pre_pick_ holds this step's stale route
  // The host's share: experts (host views with host bias rows), the stale row, outputs.
  std::vector<int> host_pick_;
  std::vector<ExpertView> host_views_;
  std::vector<std::vector<float>> host_bias_;  // [pick * kNumExpertProj + proj]
  std::vector<float> stale_host_;
  std::unique_ptr<BackendScratch> host_out_;
};

}  // namespace moeflow
