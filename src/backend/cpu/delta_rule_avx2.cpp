// The AVX2 delta-rule step (delta_rule.h): 32 columns per block, S^T k and S^T q in 8 registers.
#include <immintrin.h>

#include "backend/cpu/delta_rule.h"

namespace moeflow::kernels {

namespace {

// Columns [j0, j0 + 8 * NV) of the state.
template <int NV>
void delta_block_avx2(float* S, int64_t hk, int64_t hv, int64_t j0, const DeltaToken& t) {
  __m256 sk[NV], sq[NV];
  for (int c = 0; c < NV; ++c) sk[c] = sq[c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < hk; ++i) {
    const float* Si = S + i * hv + j0;
    const __m256 ki = _mm256_set1_ps(t.k[i]), qi = _mm256_set1_ps(t.q[i]);
    for (int c = 0; c < NV; ++c) {
      const __m256 s = _mm256_loadu_ps(Si + 8 * c);
      sk[c] = _mm256_fmadd_ps(s, ki, sk[c]);
      sq[c] = _mm256_fmadd_ps(s, qi, sq[c]);
    }
  }
  const __m256 decay = _mm256_set1_ps(t.decay), beta = _mm256_set1_ps(t.beta),
               kq = _mm256_set1_ps(t.kq);
  __m256 d[NV];
  for (int c = 0; c < NV; ++c) {
    const __m256 v = _mm256_loadu_ps(t.v + j0 + 8 * c);
    d[c] = _mm256_mul_ps(_mm256_fnmadd_ps(decay, sk[c], v), beta);
    _mm256_storeu_ps(t.out + j0 + 8 * c, _mm256_fmadd_ps(kq, d[c], _mm256_mul_ps(decay, sq[c])));
  }
  for (int64_t i = 0; i < hk; ++i) {
    float* Si = S + i * hv + j0;
    const __m256 ki = _mm256_set1_ps(t.k[i]);
    for (int c = 0; c < NV; ++c)
      _mm256_storeu_ps(
          Si + 8 * c, _mm256_fmadd_ps(ki, d[c], _mm256_mul_ps(decay, _mm256_loadu_ps(Si + 8 * c))));
  }
}

}  // namespace

void delta_step_avx2(float* S, int64_t hk, int64_t hv, const DeltaToken& t) {
  int64_t j0 = 0;
  for (; j0 + 32 <= hv; j0 += 32) delta_block_avx2<4>(S, hk, hv, j0, t);
  for (; j0 < hv; j0 += 8) delta_block_avx2<1>(S, hk, hv, j0, t);
}

}  // namespace moeflow::kernels
