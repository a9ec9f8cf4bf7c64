// The AVX-512 delta-rule step (delta_rule.h): 64 columns per block, S^T k and S^T q in 8 registers.
#include <immintrin.h>

#include "backend/cpu/delta_rule.h"

namespace moeflow::kernels {

namespace {

// Columns [j0, j0 + 16 * NV) of the state.
template <int NV>
void delta_block_avx512(float* S, int64_t hk, int64_t hv, int64_t j0, const DeltaToken& t) {
  __m512 sk[NV], sq[NV];
  for (int c = 0; c < NV; ++c) sk[c] = sq[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < hk; ++i) {
    const float* Si = S + i * hv + j0;
    const __m512 ki = _mm512_set1_ps(t.k[i]), qi = _mm512_set1_ps(t.q[i]);
    for (int c = 0; c < NV; ++c) {
      const __m512 s = _mm512_loadu_ps(Si + 16 * c);
      sk[c] = _mm512_fmadd_ps(s, ki, sk[c]);
      sq[c] = _mm512_fmadd_ps(s, qi, sq[c]);
    }
  }
  const __m512 decay = _mm512_set1_ps(t.decay), beta = _mm512_set1_ps(t.beta),
               kq = _mm512_set1_ps(t.kq);
  __m512 d[NV];
  for (int c = 0; c < NV; ++c) {
    const __m512 v = _mm512_loadu_ps(t.v + j0 + 16 * c);
    d[c] = _mm512_mul_ps(_mm512_fnmadd_ps(decay, sk[c], v), beta);
    _mm512_storeu_ps(t.out + j0 + 16 * c, _mm512_fmadd_ps(kq, d[c], _mm512_mul_ps(decay, sq[c])));
  }
  for (int64_t i = 0; i < hk; ++i) {
    float* Si = S + i * hv + j0;
    const __m512 ki = _mm512_set1_ps(t.k[i]);
    for (int c = 0; c < NV; ++c)
      _mm512_storeu_ps(
          Si + 16 * c,
          _mm512_fmadd_ps(ki, d[c], _mm512_mul_ps(decay, _mm512_loadu_ps(Si + 16 * c))));
  }
}

}  // namespace

void delta_step_avx512(float* S, int64_t hk, int64_t hv, const DeltaToken& t) {
  int64_t j0 = 0;
  for (; j0 + 64 <= hv; j0 += 64) delta_block_avx512<4>(S, hk, hv, j0, t);
  for (; j0 < hv; j0 += 16) delta_block_avx512<1>(S, hk, hv, j0, t);
}

}  // namespace moeflow::kernels
