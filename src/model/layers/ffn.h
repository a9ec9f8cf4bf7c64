#pragma once
// The gated feed-forward network every architecture uses for its dense layers, its routed
// experts and its shared experts: out = down(act(gate x + bg) * (up x + bu)) + bd.
#include "backend/backend.h"

namespace moeflow {

struct FfnMatrices {
  TensorView gate, up, down;  // up empty: gate is a fused [2*ff][d] gate_up (gate rows first)
  TensorView gate_bias, up_bias, down_bias;  // optional, one row each
};

// Scratch for glu_ffn, grown on demand in the backend's memory.
struct FfnScratch {
  explicit FfnScratch(Backend& be) : gu(be), h(be) {}
  BackendScratch gu, h;
};

// out[m][d] for the m rows of x. Throws when the matrices do not fit together.
void glu_ffn(Backend& be, const FfnMatrices& w, const TensorView& x, TensorView out,
             const GluParams& act, FfnScratch& scratch);

}  // namespace moeflow
