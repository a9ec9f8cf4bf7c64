// AVX-512 kernels of Q4_K_R8 (layout: q4k_rows8.h). Per group block and token: 16 64-byte quant
// loads, each unpacked to two vectors of 8 rows x 8 columns, one vpmaddubsw each against a
// broadcast of the token's 8 activation bytes, the four of a sub-block summed as int16 (|sum| <=
// 4 x 2 x 15 x 127 < 2^15) and one vpdpwssd by the rows' scales; the mins' sums likewise with two
// vpdpwssd. No per-row scale decoding and no horizontal sums: each row's S and M fall out in its
// two int32 lanes. Measured against the GGUF-layout 8-row kernel (q4k_exact_avx512.cpp), one
// thread, 256 x 4096 cache-resident on a Zen 4 EPYC: 42-44 GB/s against 17-20.
#include "backend/cpu/simd_intrinsics.h"

#include <cstring>

#include "backend/cpu/kquant_avx2.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/q4k_rows8.h"
#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

using namespace q4k_rows8;
using avx2::lanes_step;

// A 16-byte control of kLaneControls (q4k_rows8.h) in all four 128-bit lanes.
inline __m512i lane_control(const int8_t* c16) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)c16));
}

// Lanes 2r + 2r+1 summed (exact), the low dword of each qword kept: row r's sum in lane r.
inline __m256i rows_of(__m512i v) {
  return _mm512_cvtepi64_epi32(_mm512_add_epi32(v, _mm512_srli_epi64(v, 32)));
}

// 8 activation bytes in every qword: one vpbroadcastq from memory (unaligned: qs sits 4 bytes
// into its block).
inline __m512i bcast8(const int8_t* p) {
  return _mm512_broadcastq_epi64(_mm_loadl_epi64((const __m128i*)p));
}

// The weight stream is prefetched four group blocks (4.5 KiB) ahead into L2 (T1): on the Zen 4
// VM (engine decode, 5 interleaved runs each, medians) T1 decoded the DeepSeek-V2-Lite shape at
// 91.0 tok/s and the Mixtral shape at 32.4, no software prefetch 89.6 / 32.9, into L1 (T0) 86.0 /
// 31.2: what the kernel computes is no longer the bound, and L1 fills compete with its loads.
// Two (2.3 KiB) and eight (9 KiB) blocks ahead measured alike.
constexpr size_t kPrefetchBytes = 4 * kBlockBytes;

// Full-width controls and masks, set up once per call (kept in registers or the stack, read as
// operands).
struct Controls {
  __m512i scale[8], min[2];
  __m512i m4 = _mm512_set1_epi8(0x0F), m63 = _mm512_set1_epi8(63), m30 = _mm512_set1_epi8(0x30);
  Controls() {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) scale[j] = lane_control(kLaneControls.scale[j]);
    for (int h = 0; h < 2; ++h) min[h] = lane_control(kLaneControls.min[h]);
  }
};

// Group block g (block i of the rows) against block i of NT activation rows, into acc[t].
template <int NT>
inline __attribute__((always_inline)) void group_block(const uint8_t* g, const BlockQ8_K* const* a,
                                                       int64_t i, const Controls& c, __m256* acc) {
  const __m512i scv = _mm512_loadu_si512(g + kScaleOff);
  const __m512i sc6 = _mm512_and_si512(scv, c.m63);
  __m512i s[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const __m512i w0 = _mm512_loadu_si512(g + 128 * j), w1 = _mm512_loadu_si512(g + 128 * j + 64);
    const __m512i q0 = _mm512_and_si512(w0, c.m4),
                  q1 = _mm512_and_si512(_mm512_srli_epi16(w0, 4), c.m4);
    const __m512i q2 = _mm512_and_si512(w1, c.m4),
                  q3 = _mm512_and_si512(_mm512_srli_epi16(w1, 4), c.m4);
    const __m512i sc = _mm512_shuffle_epi8(sc6, c.scale[j]);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const int8_t* y = a[t][i].qs + 32 * j;
      const __m512i p01 = _mm512_add_epi16(_mm512_maddubs_epi16(q0, bcast8(y)),
                                           _mm512_maddubs_epi16(q1, bcast8(y + 8)));
      const __m512i p23 = _mm512_add_epi16(_mm512_maddubs_epi16(q2, bcast8(y + 16)),
                                           _mm512_maddubs_epi16(q3, bcast8(y + 24)));
      s[t] = _mm512_dpwssd_epi32(s[t], _mm512_add_epi16(p01, p23), sc);
    }
  }
  // The mins as bytes [r][j]: low nibbles from the 32 nibble bytes, bits 4-5 from the scales.
  __m512i lo = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(g + kMinOff)));
  lo = _mm512_and_si512(_mm512_mask_srli_epi64(lo, 0xF0, lo, 4), c.m4);
  const __m512i mn = _mm512_or_si512(lo, _mm512_and_si512(_mm512_srli_epi16(scv, 2), c.m30));
  const __m512i mn0 = _mm512_shuffle_epi8(mn, c.min[0]), mn1 = _mm512_shuffle_epi8(mn, c.min[1]);
  const __m512 dd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(g + kDOff)));
  const __m256 d8 = _mm512_castps512_ps256(dd), dm8 = _mm512_extractf32x8_ps(dd, 1);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const BlockQ8_K& at = a[t][i];
    // The 8 sums of 32 (pairs of bsums) as int16, then sub-blocks 0-3 / 4-7 in every qword.
    const __m128i b32 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i*)at.bsums),
                                       _mm_loadu_si128((const __m128i*)(at.bsums + 8)));
    __m512i m = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn0, _mm512_broadcastq_epi64(b32));
    m = _mm512_dpwssd_epi32(m, mn1, _mm512_broadcastq_epi64(_mm_unpackhi_epi64(b32, b32)));
    acc[t] = lanes_step(d8, dm8, _mm256_set1_ps(at.d), rows_of(s[t]), rows_of(m), acc[t]);
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
  __m256 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_K>(act, stride, t);
    acc[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / QK_K; ++i, g += kBlockBytes) {
    prefetch_block(g + kPrefetchBytes);
    group_block<NT>(g, a, i, c, acc);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + kRows * t, acc[t]);
}

void rows8_q4_k(int64_t n, const void* w, size_t, const void* act, float* out) {
  groups8_q4_k<1>(n, w, act, 0, out);
}

// Two consecutive groups (16 rows) block by block side by side, each group's operations in
// rows8_q4_k's order (its bits): two sequential weight streams per core instead of one, as the
// 32-column-block types' rows8x2 (rows8_32_avx512.cpp, where the measurement is). A stream's
// prefetch that runs past its group skips the other group.
void rows8x2_q4_k(int64_t n, const void* w, size_t, const void* act, float* out) {
  const int64_t nb = n / QK_K;
  const size_t group = (size_t)nb * kBlockBytes;
  const uint8_t* ga = static_cast<const uint8_t*>(w);
  const uint8_t* gb = ga + group;
  const uint8_t* const a_end = gb;  // group A ends where group B starts
  const uint8_t* const b_end = gb + group;
  const Controls c;
  const BlockQ8_K* a[1] = {static_cast<const BlockQ8_K*>(act)};
  __m256 acc_a[1] = {_mm256_setzero_ps()}, acc_b[1] = {_mm256_setzero_ps()};
  for (int64_t i = 0; i < nb; ++i, ga += kBlockBytes, gb += kBlockBytes) {
    prefetch_block(two_group_ahead(ga, kPrefetchBytes, a_end, group));
    prefetch_block(two_group_ahead(gb, kPrefetchBytes, b_end, group));
    group_block<1>(ga, a, i, c, acc_a);
    group_block<1>(gb, a, i, c, acc_b);
  }
  _mm256_storeu_ps(out, acc_a[0]);
  _mm256_storeu_ps(out + kRows, acc_b[0]);
}

}  // namespace

void fill_avx512_q4k_rows8(DotTable& t) {
  const int k = kQ4KR8Slot;
  t.fn[k] = t.fn[(int)GgmlType::Q4_K];  // rows past the last whole group
  t.rows_fn[k] = rows8_q4_k;
  t.rows2_fn[k] = rows8x2_q4_k;
  t.rows[k] = kRows;
  t.rows_any_length[k] = true;
  t.groups8[k] = MOEFLOW_DOT_FN8(groups8_q4_k);
}

}  // namespace moeflow::kernels
