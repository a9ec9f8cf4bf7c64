#include "model/layers/attention.h"

namespace moeflow {
namespace {

// The rows of v split into rows of `width` floats (per-head normalisation).
TensorView as_rows_of(const TensorView& v, int64_t width) {
  return f32_view(v.as<float>(), width, v.rows() * (v.cols() / width), v.space);
}

}  // namespace

void gqa_attention(Backend& be, const LayerWeights& L, const AttentionSpec& spec, float norm_eps,
                   const TensorView& xn, KvCache& kv, int layer, int64_t pos0,
                   const TensorView& rope_freqs, TensorView out, AttentionScratch& s) {
  const AttentionParams& p = spec.params;
  const int64_t n = xn.rows();
  const int64_t hd = p.head_dim;
  const TensorView q = s.q.f32(spec.output_gate ? L.wq.rows() / 2 : L.wq.rows(), n);
  const TensorView k = s.k.f32(L.wk.rows(), n);
  const TensorView v = s.v.f32(spec.v_from_k ? L.wk.rows() : L.wv.rows(), n);
  // With the output gate each head's projection is [q | gate]: rows of the product viewed as
  // n*n_head rows of 2*head_dim, whose first halves are copied out as q.
  TensorView gate;
  if (spec.output_gate) {
    const TensorView qg = s.qg.f32(L.wq.rows(), n);
    be.matmul(L.wq, xn, qg);
    const int64_t heads = n * p.n_head;
    const size_t stride = 2 * hd * sizeof(float);
    be.copy(as_rows_of(q, hd),
            strided_matrix_view(qg.data, GgmlType::F32, hd, heads, stride, qg.space));
    gate = strided_matrix_view(qg.data + hd * sizeof(float), GgmlType::F32, hd, heads, stride,
                               qg.space);
  } else {
    be.matmul(L.wq, xn, q);
  }
  be.matmul(L.wk, xn, k);
  if (spec.v_from_k)
    be.copy(v, k);  // the values are the key projection, before its norm and rotation
  else
    be.matmul(L.wv, xn, v);
  if (L.bq) be.add(q, L.bq);
  if (L.bk) be.add(k, L.bk);
  if (L.bv) be.add(v, L.bv);
  if (spec.v_norm)
    be.rms_norm(as_rows_of(v, p.head_dim_v), nullptr, as_rows_of(v, p.head_dim_v), norm_eps);
  if (spec.qk_norm == QkNorm::PerHead) {
    be.rms_norm(as_rows_of(q, p.head_dim), L.q_norm.as<float>(), as_rows_of(q, p.head_dim),
                norm_eps);
    be.rms_norm(as_rows_of(k, p.head_dim), L.k_norm.as<float>(), as_rows_of(k, p.head_dim),
                norm_eps);
  } else if (spec.qk_norm == QkNorm::Full) {
    be.rms_norm(q, L.q_norm.as<float>(), q, norm_eps);
    be.rms_norm(k, L.k_norm.as<float>(), k, norm_eps);
  }
  RopeParams rope = spec.rope;
  if (rope_freqs) rope.freq_factors = rope_freqs.as<float>();
  be.rope(q, p.n_head, p.head_dim, pos0, rope);
  be.rope(k, p.n_head_kv, p.head_dim, pos0, rope);
  // The cache keeps this layer's rows at its own width (model/kv_cache.h).
  const TensorView kc = kv.k_view(layer, k.cols()), vc = kv.v_view(layer, v.cols());
  be.copy(kc.slice_rows(pos0, n), k);
  be.copy(vc.slice_rows(pos0, n), v);
  AttentionParams ap = p;
  if (spec.sinks) ap.sinks = L.sinks.as<float>();
  const TensorView att = s.att.f32((int64_t)p.n_head * p.head_dim_v, n);
  be.attention(q, kc, vc, att, pos0, ap);
  if (gate) be.sigmoid_mul(as_rows_of(att, hd), gate);
  be.matmul(L.wo, att, out);
  if (L.bo) be.add(out, L.bo);
}

}  // namespace moeflow
