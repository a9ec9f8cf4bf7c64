#include "model/moe/moe_block.h"

#include <algorithm>

#include "core/error.h"

namespace moeflow {
namespace {

// The expert's rows of the layer's bias tensors (which stay resident with the layer).
void attach_biases(const LayerWeights& L, int e, ExpertView& v) {
  const TensorView* biases[kNumExpertProj] = {&L.exp_gate_bias, &L.exp_up_bias, &L.exp_down_bias};
  for (int j = 0; j < kNumExpertProj; ++j)
    if (*biases[j]) v.bias[j] = biases[j]->slice_rows(e, 1);
}

// Gemma 4's per-expert factors on the routing weights (after renormalisation), n x k.
void scale_expert_weights(const LayerWeights& L, int n, int k, const int32_t* experts,
                          float* weights) {
  if (!L.exp_weight_scale) return;
  const float* f = L.exp_weight_scale.as<float>();
  for (int i = 0; i < n * k; ++i) weights[i] *= f[experts[i]];
}

// v's values in `out`: read_f32 may hand back the view's own memory, which the backend can
// overwrite before the host is done with it.
void copy_to_host(Backend& be, const TensorView& v, std::vector<float>& out) {
  const float* p = be.read_f32(v, out);
  if (p != out.data()) out.assign(p, p + v.rows() * v.cols());
}

}  // namespace

void select_topk(const float* logits, int n_expert, int k, bool renorm, int* experts,
                 float* weights, float* scratch) {
  RoutingSpec spec;
  spec.norm_weights = renorm;
  route_on_host(logits, 1, n_expert, spec, nullptr, k, experts, weights, scratch);
}

MoeBlock::MoeBlock(Backend& be, const HParams& hp, int max_tokens)
    : be_(be),
      hp_(hp),
      k_(hp.n_expert_used),
      planner_(hp, max_tokens),
      exec_(be, hp.n_embd, hp.n_expert_used, max_tokens),
      logits_(be),
      stale_(be),
      pre_logits_(be),
      pre_out_(be) {
  pre_pick_.resize(k_);
  pre_w_.resize(k_);
  pre_probs_.resize(hp.n_expert);
  pre_computed_.reserve(k_);
  pre_outputs_ = pre_out_.f32(hp.n_embd, k_);
}

template <typename Fn>
void MoeBlock::with_expert(ExpertProvider& provider, const LayerWeights& L, int layer, int e,
                           Precision p, Fn&& compute) {
  const int64_t d = hp_.n_embd;
  // Streamed: each matrix is waited for just before its first use, so a miss's gate and up
  // products run while its down matrix is still being read.
  ExpertView v = provider.acquire_streamed(layer, e, p);
  try {
    if (v.gate().cols() != d || v.down().rows() != d)
      fail("layer {} expert {}: provider returned a slice of shape {}x{}, expected n_embd {}",
           layer, e, v.down().rows(), v.gate().cols(), d);
    attach_biases(L, e, v);
    compute(v, [&](int proj) { provider.await_matrix(layer, e, proj, p); });
  } catch (...) {
    provider.release(layer, e, p);
    throw;
  }
  provider.release(layer, e, p);
}

void MoeBlock::route_stale(int layer) {
  const LayerWeights& N = *next_;
  const LayerSpec& NS = *next_spec_;
  const TensorView stale = stale_.f32(hp_.n_embd, 1);
  if (NS.norm == NormKind::Layer)
    be_.layer_norm(resid_.slice_rows(0, 1), N.ffn_norm.as<float>(), N.ffn_norm_bias.as<float>(),
                   stale, hp_.rms_eps);
  else
    be_.rms_norm(resid_.slice_rows(0, 1), N.ffn_norm.as<float>(), stale, hp_.rms_eps);
  const TensorView lg = pre_logits_.f32(hp_.n_expert, 1);
  be_.matmul(N.gate_inp, stale, lg);
  if (N.gate_inp_bias) be_.add(lg, N.gate_inp_bias);
  be_.route(lg, NS.moe.routing, N.exp_probs_bias.as<float>(), k_, pre_pick_.data(), pre_w_.data(),
            pre_probs_.data());
  scale_expert_weights(N, 1, k_, pre_pick_.data(), pre_w_.data());
  pre_routed_ = true;
}

void MoeBlock::precalculate_resident(int layer, ExpertProvider& provider) {
  if (!pre_routed_) route_stale(layer);
  const LayerWeights& N = *next_;
  const LayerSpec& NS = *next_spec_;
  const int next = layer + 1;
  const TensorView stale = stale_.f32(hp_.n_embd, 1);
  for (int e : pre_pick_) {
    // Only what costs no read: waiting for a copy here would delay this layer's own experts.
    if (std::find(host_pick_.begin(), host_pick_.end(), e) != host_pick_.end()) continue;
    if (provider.residency(next, e) != Residency::Resident) continue;
    const TensorView y = pre_outputs_.slice_rows((int64_t)pre_computed_.size(), 1);
    with_expert(provider, N, next, e, Precision::High,
                [&](const ExpertView& v, const MatrixReady& ready) {
                  exec_.run_expert(v, stale, y, NS.moe.act, ready);
                });
    pre_computed_.push_back(e);
  }
}

void MoeBlock::prepare_host_precalc(int layer, ExpertProvider& provider) {
  route_stale(layer);
  const LayerWeights& N = *next_;
  const int next = layer + 1;
  Backend& host = *exec_.host();
  for (int e : pre_pick_) {
    ExpertView v;
    if (provider.residency(next, e) == Residency::Resident || !provider.host_view(next, e, v) ||
        !host.can_read(v.gate().space))
      continue;
    // Bias rows are read back now: a read after this layer's experts were issued would wait
    // for them, and the host's work would no longer overlap the device's.
    attach_biases(N, e, v);
    const size_t pick = host_pick_.size();
    host_bias_.resize(std::max(host_bias_.size(), (pick + 1) * kNumExpertProj));
    for (int j = 0; j < kNumExpertProj; ++j) {
      if (!v.bias[j]) continue;
      std::vector<float>& staging = host_bias_[pick * kNumExpertProj + j];
      copy_to_host(be_, v.bias[j], staging);
      v.bias[j] = matrix_view(staging.data(), GgmlType::F32, v.bias[j].cols(), 1, MemSpace::Host);
    }
    host_pick_.push_back(e);
    host_views_.push_back(v);
  }
  if (!host_pick_.empty()) copy_to_host(be_, stale_.f32(hp_.n_embd, 1), stale_host_);
}

void MoeBlock::precalculate_on_host() {
  const int64_t d = hp_.n_embd;
  const int m = (int)host_pick_.size();
  if (!host_out_) host_out_ = std::make_unique<BackendScratch>(*exec_.host());
  const TensorView hx = matrix_view(stale_host_.data(), GgmlType::F32, d, 1, MemSpace::Host);
  const TensorView hy = host_out_->f32(d, m);
  for (int i = 0; i < m; ++i)
    exec_.run_expert_on_host(host_views_[i], hx, hy.slice_rows(i, 1), next_spec_->moe.act);
  const int64_t row = (int64_t)pre_computed_.size();
  be_.copy(pre_outputs_.slice_rows(row, m), hy);
  pre_computed_.insert(pre_computed_.end(), host_pick_.begin(), host_pick_.end());
}

void MoeBlock::run(int layer, const LayerWeights& L, const LayerSpec& spec, const TensorView& xn,
                   const int32_t* tokens, int64_t pos0, ExpertProvider& provider,
                   ForwardObserver* observer, TensorView out, const TensorView& router_in) {
  const int n = (int)xn.rows();
  const PrecisionModeConfig& mode = planner_.mode();
  if (mode.needs_low() && !provider.has_low_precision())
    fail(
        "--mode {} needs low-precision copies of the experts, and this model has none: "
        "pack it with `moeflow pack -m IN.gguf -o OUT.gguf --low Q4_0` (or another type)",
        expert_mode_name(mode.mode));

  // Route on the backend; the decisions that follow are the planner's, on the host.
  const TensorView logits = logits_.f32(hp_.n_expert, n);
  be_.matmul(L.gate_inp, router_in ? router_in : xn, logits);
  if (L.gate_inp_bias) be_.add(logits, L.gate_inp_bias);
  be_.route(logits, spec.moe.routing, L.exp_probs_bias.as<float>(), k_, planner_.experts(),
            planner_.weights(), planner_.probs());
  scale_expert_weights(L, n, k_, planner_.experts(), planner_.weights());
  if (routing_override_) {
    routing_override_->apply(layer, pos0, n, k_, planner_.experts(), planner_.weights());
    observed_tokens_.resize(n);
    if (routing_override_->observed_tokens(pos0, n, observed_tokens_.data()))
      tokens = observed_tokens_.data();
  }
  std::span<const float> hidden;
  if (observer) hidden = {be_.read_f32(xn, hidden_staging_), (size_t)n * hp_.n_embd};
  planner_.plan(layer, n, tokens, pos0, hidden, provider, observer);

  // Slots served by outputs the previous layer computed ahead (before this step's own
  // pre-calculation reuses that buffer).
  for (const MoePlanner::Served& s : planner_.pre_served())
    exec_.fill_slot(s.slot, pre_outputs_, s.index);

  // Unit by unit, batched over the tokens routed to it. Pre-calculation of the next layer's
  // resident experts runs once, just before the first wait for a read that is already under
  // way (a read not yet started would only be delayed by it). The host's share is picked
  // before the units are issued and computed after, while the device runs them.
  const bool decode_precalc = mode.precalc && n == 1 && next_ && next_->moe && resid_;
  pre_routed_ = false;
  pre_computed_.clear();
  host_pick_.clear();
  host_views_.clear();
  if (decode_precalc && exec_.host()) prepare_host_precalc(layer, provider);
  bool may_precalc = decode_precalc;
  const std::vector<MoeUnit>& units = planner_.units();
  for (size_t i = 0; i < units.size(); ++i) {
    const MoeUnit& u = units[i];
    if (may_precalc && i >= planner_.n_resident()) {
      may_precalc = false;
      if (planner_.precalc_before(i, layer, provider)) precalculate_resident(layer, provider);
    }
    with_expert(provider, L, layer, u.expert, u.precision,
                [&](const ExpertView& v, const MatrixReady& ready) {
                  exec_.run_unit(v, xn, u.slots, spec.moe.act, ready);
                });
  }
  if (!host_pick_.empty()) precalculate_on_host();
  if (pre_routed_) planner_.record_precalc(layer + 1, pre_computed_);

  // Combine in fixed order: token ascending, router rank ascending. Skipped experts add
  // nothing, and the kept weights are not renormalised (docs/lossy-modes.md).
  exec_.combine(out, planner_.slot_weights(), planner_.keep(), n);
  if (spec.moe.shared_expert) exec_.add_shared(out, L, spec.moe, xn);
}

}  // namespace moeflow
