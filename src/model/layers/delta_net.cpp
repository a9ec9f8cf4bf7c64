#include "model/layers/delta_net.h"

namespace moeflow {
namespace {

// The rows of a contiguous v split into rows of `width` floats (per-head normalisation).
TensorView as_rows_of(const TensorView& v, int64_t width) {
  return f32_view(v.as<float>(), width, v.rows() * (v.cols() / width), v.space);
}

}  // namespace

void delta_net_attention(Backend& be, const LayerWeights& L, const DeltaNetSpec& d, float norm_eps,
                         const TensorView& xn, RecurrentState& state, int layer, TensorView out,
                         DeltaNetScratch& s) {
  const int64_t n = xn.rows();
  const int64_t C = d.conv_channels(), key_dim = (int64_t)d.n_k_heads * d.head_k;
  const int64_t value_dim = (int64_t)d.n_v_heads * d.head_v, NV = d.n_v_heads;
  const TensorView qkv = s.qkv.f32(C, n);
  be.matmul(L.ssm_qkv, xn, qkv);
  const TensorView conv = s.conv.f32(C, n);
  be.conv1d_silu(qkv, state.conv(layer), L.ssm_conv1d, conv);

  const TensorView a = s.a.f32(NV, n), b = s.b.f32(NV, n);
  if (d.fused_ba) {
    // ssm_ba: per key head [beta of its n_v/n_k value heads | their alpha]; as rows of 2*per
    // (n * n_k of them), the halves copied out give the value heads in order.
    const int64_t per = NV / d.n_k_heads, rows = n * d.n_k_heads;
    const TensorView ba = s.ba.f32(2 * NV, n);
    be.matmul(L.ssm_ba, xn, ba);
    const size_t stride = 2 * per * sizeof(float);
    be.copy(as_rows_of(b, per),
            strided_matrix_view(ba.data, GgmlType::F32, per, rows, stride, ba.space));
    be.copy(as_rows_of(a, per), strided_matrix_view(ba.data + per * sizeof(float), GgmlType::F32,
                                                    per, rows, stride, ba.space));
  } else {
    be.matmul(L.ssm_beta, xn, b);
    be.matmul(L.ssm_alpha, xn, a);
  }

  DeltaNetParams p;
  p.n_k_heads = d.n_k_heads;
  p.n_v_heads = d.n_v_heads;
  p.head_k = d.head_k;
  p.head_v = d.head_v;
  p.tiled = d.tiled;
  p.A = L.ssm_a.as<float>();
  p.dt_bias = L.ssm_dt.as<float>();
  const TensorView o = s.o.f32(value_dim, n);
  be.gated_delta_net(f32_columns(conv, 0, key_dim), f32_columns(conv, key_dim, key_dim),
                     f32_columns(conv, 2 * key_dim, value_dim), a, b, state.ssm(layer), o, p);

  // Gated RMSNorm: per value head RMSNorm with ssm_norm, times silu(z).
  be.rms_norm(as_rows_of(o, d.head_v), L.ssm_norm.as<float>(), as_rows_of(o, d.head_v), norm_eps);
  const TensorView z = s.z.f32(value_dim, n);
  be.matmul(L.ssm_z, xn, z);
  be.glu(z, o, o, GluParams{});  // silu(z) * o
  be.matmul(L.ssm_out, o, out);
}

}  // namespace moeflow
