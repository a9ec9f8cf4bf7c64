#pragma once
// The gated feed-forward network every architecture uses for its dense layers, its routed
// experts and its shared experts: out = down(act(gate x + bg) * (up x + bu)) + bd.
#include <functional>

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

// Called with 0 (gate, or fused gate_up), 1 (up) or 2 (down) just before glu_ffn's first op
// on that matrix: an expert still being read can be computed as its matrices arrive, the
// gate and up products under the read of its down matrix.
using MatrixReady = std::function<void(int proj)>;

// out[m][d] for the m rows of x. Throws when the matrices do not fit together.
void glu_ffn(Backend& be, const FfnMatrices& w, const TensorView& x, TensorView out,
             const GluParams& act, FfnScratch& scratch, const MatrixReady& ready = {});

}  // namespace moeflow
