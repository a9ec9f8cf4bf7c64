// AVX2 kernels of Q4_K_R8 (layout: q4k_rows8.h): the AVX-512 kernel's steps (q4k_rows8_avx512.cpp)
// on each half of a group (rows 0-3, then 4-7: bytes 32h..32h+31 of every 64-byte chunk) with
// vpmaddwd + vpaddd for vpdpwssd, and the float steps in the 4 lanes of each half (an FMA lane
// rounds alike at any width), so the same bits.
#include "backend/cpu/simd_intrinsics.h"

#include <cstring>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/q4k_rows8.h"
#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

using namespace q4k_rows8;

// A 16-byte control of kLaneControls (q4k_rows8.h) in both 128-bit lanes.
inline __m256i lane_control(const int8_t* c16) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)c16));
}

// Lanes 2r + 2r+1 summed (exact): the 4 rows' sums.
inline __m128i rows_of(__m256i v) {
  const __m256i s = _mm256_add_epi32(v, _mm256_srli_epi64(v, 32));
  return _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
}

// 8 activation bytes in every qword: one vpbroadcastq from memory (an unaligned load: qs sits
// 4 bytes into its block).
inline __m256i bcast8(const int8_t* p) {
  return _mm256_broadcastq_epi64(_mm_loadl_epi64((const __m128i*)p));
}

constexpr size_t kPrefetchBytes = 4 * kBlockBytes;  // into L2: see q4k_rows8_avx512.cpp

// Full-width controls and masks, set up once per call (kept in registers or the stack, read as
// operands).
struct Controls {
  __m256i scale[8], min[2];
  __m256i m4 = _mm256_set1_epi8(0x0F), m63 = _mm256_set1_epi8(63), m30 = _mm256_set1_epi8(0x30);
  Controls() {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) scale[j] = lane_control(kLaneControls.scale[j]);
    for (int h = 0; h < 2; ++h) min[h] = lane_control(kLaneControls.min[h]);
  }
};

// Group block g (block i of the rows) against block i of NT activation rows, into acc[t][half].
template <int NT>
inline __attribute__((always_inline)) void group_block(const uint8_t* g, const BlockQ8_K* const* a,
                                                       int64_t i, const Controls& c,
                                                       __m128 (*acc)[2]) {
  const __m256i scv[2] = {_mm256_loadu_si256((const __m256i*)(g + kScaleOff)),
                          _mm256_loadu_si256((const __m256i*)(g + kScaleOff + 32))};
  const __m256i sc6[2] = {_mm256_and_si256(scv[0], c.m63), _mm256_and_si256(scv[1], c.m63)};
  __m256i s[NT][2];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) s[t][0] = s[t][1] = _mm256_setzero_si256();
    // Sub-block by sub-block, both halves: a token's 4 activation broadcasts serve the two.
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i w0 = _mm256_loadu_si256((const __m256i*)(g + 128 * j + 32 * h));
      const __m256i w1 = _mm256_loadu_si256((const __m256i*)(g + 128 * j + 64 + 32 * h));
      const __m256i q0 = _mm256_and_si256(w0, c.m4),
                    q1 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), c.m4);
      const __m256i q2 = _mm256_and_si256(w1, c.m4),
                    q3 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), c.m4);
      const __m256i sc = _mm256_shuffle_epi8(sc6[h], c.scale[j]);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const int8_t* y = a[t][i].qs + 32 * j;
        const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast8(y)),
                                             _mm256_maddubs_epi16(q1, bcast8(y + 8)));
        const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(q2, bcast8(y + 16)),
                                             _mm256_maddubs_epi16(q3, bcast8(y + 24)));
        s[t][h] = _mm256_add_epi32(s[t][h], _mm256_madd_epi16(_mm256_add_epi16(p01, p23), sc));
      }
    }
  }
  const __m256 dd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(g + kDOff)));
  const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(g + kDminOff)));
  const __m256i nib = _mm256_loadu_si256((const __m256i*)(g + kMinOff));
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    // Mins e = 8r + j of this half (e in [32h, 32h + 32)): their low nibbles sit in the low
    // (h = 0) or high (h = 1) nibbles of the 32 nibble bytes.
    const __m256i lo = _mm256_and_si256(h ? _mm256_srli_epi16(nib, 4) : nib, c.m4);
    const __m256i mn = _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi16(scv[h], 2), c.m30));
    const __m256i mn0 = _mm256_shuffle_epi8(mn, c.min[0]), mn1 = _mm256_shuffle_epi8(mn, c.min[1]);
    const __m128 d4 = h ? _mm256_extractf128_ps(dd, 1) : _mm256_castps256_ps128(dd);
    const __m128 dm4 = h ? _mm256_extractf128_ps(dm, 1) : _mm256_castps256_ps128(dm);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& at = a[t][i];
      const __m128i b32 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i*)at.bsums),
                                         _mm_loadu_si128((const __m128i*)(at.bsums + 8)));
      const __m256i m = _mm256_add_epi32(
          _mm256_madd_epi16(mn0, _mm256_broadcastq_epi64(b32)),
          _mm256_madd_epi16(mn1, _mm256_broadcastq_epi64(_mm_unpackhi_epi64(b32, b32))));
      const __m128 ad = _mm_set1_ps(at.d);
      const __m128 x =
          _mm_fmadd_ps(_mm_mul_ps(d4, ad), _mm_cvtepi32_ps(rows_of(s[t][h])), acc[t][h]);
      acc[t][h] = _mm_fnmadd_ps(_mm_mul_ps(dm4, ad), _mm_cvtepi32_ps(rows_of(m)), x);
    }
  }
}

inline void prefetch_block(const uint8_t* p) {
#pragma GCC unroll 18
  for (size_t l = 0; l < kBlockBytes; l += 64) _mm_prefetch((const char*)p + l, _MM_HINT_T1);
}

template <int NT>
void groups8_q4_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const uint8_t* g = static_cast<const uint8_t*>(w);
  const Controls c;
  const BlockQ8_K* a[NT];
  __m128 acc[NT][2];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_K>(act, stride, t);
    acc[t][0] = acc[t][1] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / QK_K; ++i, g += kBlockBytes) {
    prefetch_block(g + kPrefetchBytes);
    group_block<NT>(g, a, i, c, acc);
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    _mm_storeu_ps(out + kRows * t, acc[t][0]);
    _mm_storeu_ps(out + kRows * t + 4, acc[t][1]);
  }
}

void rows8_q4_k(int64_t n, const void* w, size_t, const void* act, float* out) {
  groups8_q4_k<1>(n, w, act, 0, out);
}

// Two consecutive groups (16 rows) block by block side by side, each group's operations in
// rows8_q4_k's order (its bits): two sequential weight streams per core instead of one, as at
// AVX-512 (rows8_32_avx512.cpp, where the measurement is). A stream's prefetch that runs past
// its group skips the other group.
void rows8x2_q4_k(int64_t n, const void* w, size_t, const void* act, float* out) {
  const int64_t nb = n / QK_K;
  const size_t group = (size_t)nb * kBlockBytes;
  const uint8_t* ga = static_cast<const uint8_t*>(w);
  const uint8_t* gb = ga + group;
  const uint8_t* const a_end = gb;  // group A ends where group B starts
  const uint8_t* const b_end = gb + group;
  const Controls c;
  const BlockQ8_K* a[1] = {static_cast<const BlockQ8_K*>(act)};
  __m128 acc_a[1][2] = {{_mm_setzero_ps(), _mm_setzero_ps()}};
  __m128 acc_b[1][2] = {{_mm_setzero_ps(), _mm_setzero_ps()}};
  for (int64_t i = 0; i < nb; ++i, ga += kBlockBytes, gb += kBlockBytes) {
    prefetch_block(two_group_ahead(ga, kPrefetchBytes, a_end, group));
    prefetch_block(two_group_ahead(gb, kPrefetchBytes, b_end, group));
    group_block<1>(ga, a, i, c, acc_a);
    group_block<1>(gb, a, i, c, acc_b);
  }
  _mm_storeu_ps(out, acc_a[0][0]);
  _mm_storeu_ps(out + 4, acc_a[0][1]);
  _mm_storeu_ps(out + kRows, acc_b[0][0]);
  _mm_storeu_ps(out + kRows + 4, acc_b[0][1]);
}

}  // namespace

void fill_avx2_q4k_rows8(DotTable& t) {
  const int k = kQ4KR8Slot;
  t.fn[k] = t.fn[(int)GgmlType::Q4_K];  // rows past the last whole group
  t.rows_fn[k] = rows8_q4_k;
  t.rows2_fn[k] = rows8x2_q4_k;
  t.rows[k] = kRows;
  t.rows_any_length[k] = true;
  t.groups8[k] = MOEFLOW_GROUPS8_FN(groups8_q4_k);
}

}  // namespace moeflow::kernels
