#include "model/moe/moe_executor.h"

#include "core/error.h"

namespace moeflow {

MoeExecutor::MoeExecutor(Backend& be, int64_t n_embd, int k, int max_tokens)
    : be_(be), d_(n_embd), k_(k), xe_(be), ye_(be), slots_(be), gate_(be), ffn_(be) {
  rows_.reserve(max_tokens);
  slot_rows_ = slots_.f32(d_, (int64_t)max_tokens * k);
}

void MoeExecutor::run_expert(const ExpertView& v, const TensorView& x, TensorView y,
                             const GluParams& act) {
  FfnMatrices w;
  w.gate = v.gate();
  w.up = v.up();
  w.down = v.down();
  w.gate_bias = v.bias[(int)ExpertProj::Gate];
  w.up_bias = v.bias[(int)ExpertProj::Up];
  w.down_bias = v.bias[(int)ExpertProj::Down];
  glu_ffn(be_, w, x, y, act, ffn_);
}

void MoeExecutor::run_unit(const ExpertView& v, const TensorView& x, std::span<const int32_t> slots,
                           const GluParams& act) {
  const int64_t m = (int64_t)slots.size();
  rows_.clear();
  for (int32_t s : slots) rows_.push_back(s / k_);
  const TensorView xe = xe_.f32(d_, m);
  const TensorView ye = ye_.f32(d_, m);
  be_.gather_rows(x, rows_, xe);
  run_expert(v, xe, ye, act);
  be_.scatter_rows(slot_rows_, slots, ye);
}

void MoeExecutor::fill_slot(int32_t slot, const TensorView& outputs, int index) {
  be_.copy(slot_rows_.slice_rows(slot, 1), outputs.slice_rows(index, 1));
}

void MoeExecutor::combine(TensorView out, std::span<const float> weights, std::span<const uint8_t> keep,
                          int n) {
  be_.moe_combine(out, slot_rows_.slice_rows(0, (int64_t)n * k_), weights, keep, k_);
}

void MoeExecutor::add_shared(TensorView out, const LayerWeights& L, const MoeSpec& spec,
                             const TensorView& x) {
  const int64_t n = x.rows();
  const TensorView ye = ye_.f32(d_, n);
  FfnMatrices w;
  w.gate = L.shexp.gate;
  w.up = L.shexp.up;
  w.down = L.shexp.down;
  glu_ffn(be_, w, x, ye, spec.act, ffn_);
  if (spec.shared_gate == GateFn::None) {
    be_.add(out, ye);
    return;
  }
  MOEFLOW_CHECK(L.gate_inp_shexp, "shared expert gate requested but the layer has no ffn_gate_inp_shexp");
  const TensorView g = gate_.f32(1, n);
  be_.matmul(L.gate_inp_shexp, x, g);
  be_.gated_add(out, ye, g, spec.shared_gate);
}

}  // namespace moeflow
