#include "model/layers/mla_attention.h"

#include "core/error.h"

namespace moeflow {
void mla_attention(Backend& be, const LayerWeights& L, const AttentionSpec& spec, float norm_eps,
                   const TensorView& xn, KvCache& kv, int layer, int64_t pos0, TensorView out,
                   MlaScratch& s) {
  const MlaSpec& m = spec.mla;
  const AttentionParams& p = spec.params;
  const int64_t n = xn.rows(), H = p.n_head, R = m.rope, C = m.kv_lora_rank, N = m.nope;
  const int64_t hk = N + R, W = R + C;
  MOEFLOW_CHECK(
      p.n_head_kv == 1 && p.head_dim == W && p.head_dim_v == C && kv.k_dim(layer) == W,
      "mla attention: spec and cache disagree (head_dim {}, cache row {}, rope {} + latent {})",
      p.head_dim, kv.k_dim(layer), R, C);

  // Queries: [n][H][nope | rope].
  const TensorView q = s.q.f32(H * hk, n);
  if (L.wq_a) {
    const TensorView qa = s.qa.f32(L.wq_a.rows(), n);
    be.matmul(L.wq_a, xn, qa);
    be.rms_norm(qa, L.q_a_norm.as<float>(), qa, norm_eps);
    be.matmul(L.wq_b, qa, q);
  } else {
    be.matmul(L.wq, xn, q);
  }

  // This step's cache rows: the shared key's rotary part first, then the normalised latent.
  const TensorView kva = s.kv.f32(C + R, n);
  be.matmul(L.wkv_a, xn, kva);
  const TensorView rows = kv.k_view(layer).slice_rows(pos0, n);
  const TensorView k_rope = f32_columns(rows, 0, R);
  be.copy(k_rope, f32_columns(kva, C, R));
  be.rope(k_rope, 1, R, pos0, spec.rope);
  be.rms_norm(f32_columns(kva, 0, C), L.kv_a_norm.as<float>(), f32_columns(rows, R, C), norm_eps);

  // Absorbed queries [n][H][rope | kv_lora]: the rotary part as is (then rotated), the rest
  // q_nope times the head's attn_k_b block, i.e. the head's query in latent space.
  const TensorView qf = s.qf.f32(H * W, n);
  const TensorView q_heads = f32_view(q.as<float>(), hk, n * H, q.space);
  const TensorView qf_heads = f32_view(qf.as<float>(), W, n * H, qf.space);
  be.copy(f32_columns(qf_heads, 0, R), f32_columns(q_heads, N, R));
  be.rope(qf, (int)H, W, pos0, spec.rope);
  MOEFLOW_CHECK(L.wk_b.ne[2] == H && L.wv_b.ne[2] == H,
                "mla attention: attn_k_b / attn_v_b stack {} / {} heads, the layer has {}",
                L.wk_b.ne[2], L.wv_b.ne[2], H);
  be.matmul_heads(L.wk_b, f32_columns(q, 0, N), hk, f32_columns(qf, R, C), W);

  // One shared kv head: keys are whole cache rows, values their latent columns.
  const TensorView keys = kv.k_view(layer);
  const TensorView att = s.att.f32(H * C, n);
  be.attention(qf, keys, f32_columns(keys, R, C), att, pos0, p);

  // Each head's attended latent, decompressed into its values, then the output projection.
  const int64_t dv = m.head_dim_v;
  const TensorView attv = s.attv.f32(H * dv, n);
  be.matmul_heads(L.wv_b, f32_columns(att, 0, C), C, f32_columns(attv, 0, dv), dv);
  be.matmul(L.wo, attv, out);
}

}  // namespace moeflow
