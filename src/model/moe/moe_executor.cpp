#include "model/moe/moe_executor.h"

#include "core/error.h"

namespace moeflow {

MoeExecutor::MoeExecutor(Backend& be, int64_t n_embd, int k, int max_tokens)
    : be_(be), d_(n_embd), k_(k), xe_(be), ye_(be), slots_(be), gate_(be), ffn_(be) {
  rows_.reserve(max_tokens);
  slot_rows_ = slots_.f32(d_, (int64_t)max_tokens * k);
}

void MoeExecutor::set_host(Backend* host) {
  host_ = host;
  hy_ = host ? std::make_unique<BackendScratch>(*host) : nullptr;
  host_ffn_ = host ? std::make_unique<FfnScratch>(*host) : nullptr;
}

void MoeExecutor::check_host(const ExpertView& v) const {
  if (!host_ || !host_->can_read(v.gate().space))
    fail(
        "an expert's weights are in {} memory, which the {} backend cannot read, and no host "
        "backend was given to compute it",
        mem_space_name(v.gate().space), be_.name());
}

void MoeExecutor::run_on_host(const ExpertView& v, const TensorView& x, TensorView y,
                              const GluParams& act, const MatrixReady& ready) {
  check_host(v);
  const int64_t m = x.rows();
  const float* xh = be_.read_f32(x, hx_staging_);  // waits for the rows
  const TensorView hx = matrix_view(xh, GgmlType::F32, d_, m, MemSpace::Host);
  const TensorView hy = hy_->f32(d_, m);
  run_expert_on_host(v, hx, hy, act, ready);
  be_.copy(y, hy);
}

void MoeExecutor::run_expert_on_host(const ExpertView& v, const TensorView& hx, TensorView hy,
                                     const GluParams& act, const MatrixReady& ready) {
  check_host(v);
  FfnMatrices w;
  w.gate = v.gate();
  w.up = v.up();
  w.down = v.down();
  TensorView* bias[kNumExpertProj] = {&w.gate_bias, &w.up_bias, &w.down_bias};
  for (int j = 0; j < kNumExpertProj; ++j) {
    const TensorView& b = v.bias[j];
    if (!b) continue;
    // Biases live with the layer's resident weights, in the backend's memory.
    const float* bh = host_->can_read(b.space) ? b.as<float>() : be_.read_f32(b, bias_staging_[j]);
    *bias[j] = matrix_view(bh, GgmlType::F32, b.cols(), b.rows(), MemSpace::Host);
  }
  glu_ffn(*host_, w, hx, hy, act, *host_ffn_, ready);
}

void MoeExecutor::run_expert(const ExpertView& v, const TensorView& x, TensorView y,
                             const GluParams& act, const MatrixReady& ready) {
  if (!be_.can_read(v.gate().space)) {
    run_on_host(v, x, y, act, ready);
    return;
  }
  FfnMatrices w;
  w.gate = v.gate();
  w.up = v.up();
  w.down = v.down();
  w.gate_bias = v.bias[(int)ExpertProj::Gate];
  w.up_bias = v.bias[(int)ExpertProj::Up];
  w.down_bias = v.bias[(int)ExpertProj::Down];
  glu_ffn(be_, w, x, y, act, ffn_, ready);
}

void MoeExecutor::run_unit(const ExpertView& v, const TensorView& x, std::span<const int32_t> slots,
                           const GluParams& act, const MatrixReady& ready) {
  const int64_t m = (int64_t)slots.size();
  rows_.clear();
  for (int32_t s : slots) rows_.push_back(s / k_);
  const TensorView xe = xe_.f32(d_, m);
  const TensorView ye = ye_.f32(d_, m);
  be_.gather_rows(x, rows_, xe);
  run_expert(v, xe, ye, act, ready);
  be_.scatter_rows(slot_rows_, slots, ye);
}

void MoeExecutor::fill_slot(int32_t slot, const TensorView& outputs, int index) {
  be_.copy(slot_rows_.slice_rows(slot, 1), outputs.slice_rows(index, 1));
}

void MoeExecutor::combine(TensorView out, std::span<const float> weights,
                          std::span<const uint8_t> keep, int n) {
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
  MOEFLOW_CHECK(L.gate_inp_shexp,
                "shared expert gate requested but the layer has no ffn_gate_inp_shexp");
  const TensorView g = gate_.f32(1, n);
  be_.matmul(L.gate_inp_shexp, x, g);
  be_.gated_add(out, ye, g, spec.shared_gate);
}

}  // namespace moeflow
