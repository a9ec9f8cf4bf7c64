// AVX2 versions of the activation quantizers. They produce exactly the bytes of the scalar
// ones in activation.cpp (same float operations, round-to-nearest-even conversion), so the
// activation never depends on the dispatch level; blocks with NaN/Inf take the scalar path.
#include <cstring>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline bool has_nan(__m256 v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }

// 32 int32 (four vectors) to 32 int8 in order.
inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i r = _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace

void quantize_q8_0_avx2(const float* x, int64_t n, void* out) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(out);
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    const float* xb = x + i * QK8_0;
    __m256 v[4];
    bool nan = false;
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      nan |= has_nan(v[k]);
    }
    if (nan) {
      quantize_q8_0(xb, QK8_0, &y[i]);
      continue;
    }
    const float amax = hmax(_mm256_max_ps(_mm256_max_ps(abs8(v[0]), abs8(v[1])),
                                          _mm256_max_ps(abs8(v[2]), abs8(v[3]))));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 s = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], s));
    _mm256_storeu_si256((__m256i*)y[i].qs, pack32(q[0], q[1], q[2], q[3]));
  }
}

void quantize_q8_k_avx2(const float* x, int64_t n, void* out) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(out);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* xb = x + i * QK_K;
    __m256 mx = _mm256_setzero_ps();
    bool nan = false;
    for (int k = 0; k < 32; ++k) {
      const __m256 v = _mm256_loadu_ps(xb + 8 * k);
      nan |= has_nan(v);
      mx = _mm256_max_ps(mx, abs8(v));
    }
    const float amax = hmax(mx);
    if (nan || amax == 0.f || amax > 3.4e38f) {
      quantize_q8_k(xb, QK_K, &y[i]);
      continue;
    }
    // The scalar code scales by the first element of largest magnitude; find the same one.
    const __m256 am = _mm256_set1_ps(amax);
    float vmax = 0;
    for (int k = 0; k < 32; ++k) {
      const __m256 v = _mm256_loadu_ps(xb + 8 * k);
      const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs8(v), am, _CMP_EQ_OQ));
      if (m) {
        vmax = xb[8 * k + __builtin_ctz((unsigned)m)];
        break;
      }
    }
    BlockQ8_K& b = y[i];
    const float iscale = -127.f / vmax;
    const __m256 s = _mm256_set1_ps(iscale);
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    for (int k = 0; k < 8; ++k) {
      __m256i q[4];
      for (int m = 0; m < 4; ++m) {
        const __m256i r =
            _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * k + 8 * m), s));
        q[m] = _mm256_max_epi32(_mm256_min_epi32(r, lim), nlim);
      }
      _mm256_storeu_si256((__m256i*)(b.qs + 32 * k), pack32(q[0], q[1], q[2], q[3]));
    }
    for (int g = 0; g < QK_K / 16; ++g) {
      // Sum 16 int8 exactly: widen to int16 and fold.
      const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(b.qs + 16 * g)));
      const __m256i s32 = _mm256_madd_epi16(w, _mm256_set1_epi16(1));
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
      b.bsums[g] = (int16_t)_mm_cvtsi128_si32(t);
    }
    b.d = 1.f / iscale;
  }
}

}  // namespace moeflow::kernels
