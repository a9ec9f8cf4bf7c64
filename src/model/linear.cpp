#include "model/linear.h"

#include "core/error.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace moeflow {

void linear_raw(GgmlType t, const void* W, int64_t rows, int64_t cols, const float* X, int64_t m,
                float* Y, ThreadPool* pool) {
  if (m == 1)
    matvec(t, W, rows, cols, X, Y, pool);
  else
    matmul(t, W, rows, cols, X, m, Y, pool);
}

void linear(const WeightRef& w, const float* X, int64_t m, float* Y, ThreadPool* pool) {
  linear_raw(w.type, w.data, w.rows, w.cols, X, m, Y, pool);
}

ExpertView view_of(const WeightRef& gate, const WeightRef& up, const WeightRef& down) {
  ExpertView v;
  const WeightRef* w[kNumExpertProj] = {&gate, &up, &down};
  for (int p = 0; p < kNumExpertProj; ++p) {
    v.data[p] = w[p]->data;
    v.type[p] = w[p]->type;
    v.rows[p] = w[p]->rows;
    v.cols[p] = w[p]->cols;
  }
  return v;
}

int64_t ffn_size(const ExpertView& e) {
  const int G = (int)ExpertProj::Gate;
  return e.data[(int)ExpertProj::Up] ? e.rows[G] : e.rows[G] / 2;
}

void swiglu_ffn(const ExpertView& e, const float* X, int64_t m, float* GU, float* H, float* Y,
                ThreadPool* pool) {
  const int G = (int)ExpertProj::Gate, U = (int)ExpertProj::Up, D = (int)ExpertProj::Down;
  const int64_t ff = ffn_size(e);
  if (!e.data[G] || !e.data[D] || e.rows[D] <= 0 || e.cols[D] != ff)
    fail("expert view is incomplete or inconsistent (gate rows {}, down cols {})", e.rows[G],
         e.cols[D]);
  if (e.data[U]) {
    // Gate and up share X, so they go in one buffer: [m][ff] gate then [m][ff] up.
    linear_raw(e.type[G], e.data[G], ff, e.cols[G], X, m, GU, pool);
    linear_raw(e.type[U], e.data[U], ff, e.cols[U], X, m, GU + m * ff, pool);
    for (int64_t t = 0; t < m; ++t) swiglu(GU + t * ff, GU + (m + t) * ff, H + t * ff, ff);
  } else {
    linear_raw(e.type[G], e.data[G], 2 * ff, e.cols[G], X, m, GU, pool);
    for (int64_t t = 0; t < m; ++t) swiglu(GU + t * 2 * ff, GU + t * 2 * ff + ff, H + t * ff, ff);
  }
  linear_raw(e.type[D], e.data[D], e.rows[D], ff, H, m, Y, pool);
}

}  // namespace moeflow
