#include "model/layers/ffn.h"

#include "core/error.h"

namespace moeflow {

void glu_ffn(Backend& be, const FfnMatrices& w, const TensorView& x, TensorView out,
             const GluParams& act, FfnScratch& scratch, const MatrixReady& ready) {
  const bool fused = !w.up;
  const int64_t ff = fused ? w.gate.rows() / 2 : w.gate.rows();
  if (!w.gate || !w.down || w.down.rows() <= 0 || w.down.cols() != ff)
    fail("expert view is incomplete or inconsistent (gate rows {}, down cols {})", w.gate.rows(),
         w.down.cols());
  const int64_t m = x.rows();
  const auto await = [&](int proj) {
    if (ready) ready(proj);
  };
  TensorView gate, up;
  if (fused) {
    await(0);
    // One product gives [m][2ff]: each row's gate half, then its up half.
    const TensorView gu = scratch.gu.f32(2 * ff, m);
    be.matmul(w.gate, x, gu);
    gate = f32_columns(gu, 0, ff);
    up = f32_columns(gu, ff, ff);
  } else {
    // Gate and up share x, so they go in one buffer: [m][ff] gate then [m][ff] up.
    const TensorView gu = scratch.gu.f32(ff, 2 * m);
    gate = gu.slice_rows(0, m);
    up = gu.slice_rows(m, m);
    await(0);
    be.matmul(w.gate, x, gate);
    await(1);
    be.matmul(w.up, x, up);
  }
  if (w.gate_bias) be.add(gate, w.gate_bias);
  if (w.up_bias) be.add(up, w.up_bias);
  const TensorView h = scratch.h.f32(ff, m);
  be.glu(gate, up, h, act);
  await(2);
  be.matmul(w.down, h, out);
  if (w.down_bias) be.add(out, w.down_bias);
}

}  // namespace moeflow
