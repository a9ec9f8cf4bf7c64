// AVX2 Q4_K kernels with exact block sums, and the 8-row prefill path they make possible: the
// same per-row, per-token float operations as q4k_exact_avx512.cpp (see there), so AVX2 and
// AVX-512 give the same Q4_K bits too.
#include <cmath>
#include <cstring>

#include "backend/cpu/kquant_avx2.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/q4k_rows8.h"
#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

using namespace avx2;

struct RowBlock {
  __m256i sc, mn;
  float d, dmin;
};
inline void row_scales(const BlockQ4_K& b, RowBlock& rb) {
  uint64_t sc8, mn8;
  k4_scales(b.scales, sc8, mn8);
  rb.sc = scales16x2(sc8);
  rb.mn = mins16(mn8);
  rb.d = fp16(b.d);
  rb.dmin = fp16(b.dmin);
}

// One row, NT tokens (GGUF layout).
template <int NT>
void dot_q4_k_exact(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ4_K* wb = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* a[NT];
  [[maybe_unused]] float acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_K>(act, stride, t);
    acc[t] = 0.f;
  }
  [[maybe_unused]] __m256 accv = _mm256_setzero_ps();  // NT >= 4: lane t = token t
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ4_K& b = wb[i];
    prefetch_block<sizeof(BlockQ4_K)>(wb + i);
    RowBlock rb;
    row_scales(b, rb);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m256i s_lo = scale_bcast(rb.sc, 2 * j), s_hi = scale_bcast(rb.sc, 2 * j + 1);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256i p_lo = _mm256_madd_epi16(mul_us(lo, load_act(a[t][i], 64 * j)), s_lo);
        const __m256i p_hi = _mm256_madd_epi16(mul_us(hi, load_act(a[t][i], 64 * j + 32)), s_hi);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p_lo, p_hi));
      }
    }
    if constexpr (NT >= 4) {
      // Several tokens: reduced together into the lanes of one vector (lane t = token t), the
      // float steps taken there (see q4k_exact_avx512.cpp).
      __m256i s8[8], m8[8];
      alignas(32) float ad[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        s8[t] = t < NT ? sumi[t] : _mm256_setzero_si256();
        m8[t] = t < NT ? _mm256_madd_epi16(rb.mn, _mm256_loadu_si256((const __m256i*)a[t][i].bsums))
                       : _mm256_setzero_si256();
        ad[t] = t < NT ? a[t][i].d : 0.f;
      }
      accv = lanes_step(_mm256_set1_ps(rb.d), _mm256_set1_ps(rb.dmin), _mm256_load_ps(ad),
                        reduce8_rows(s8), reduce8_rows(m8), accv);
    } else {
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& at = a[t][i];
        const int32_t m =
            reduce_i32(_mm256_madd_epi16(rb.mn, _mm256_loadu_si256((const __m256i*)at.bsums)));
        acc[t] = block_step(acc[t], rb.d, rb.dmin, at.d, reduce_i32(sumi[t]), m);
      }
    }
  }
  if constexpr (NT >= 4) {
    alignas(32) float o8[8];
    _mm256_store_ps(o8, accv);
    std::memcpy(out, o8, NT * sizeof(float));
  } else {
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
  }
}

// S lanes of one row's block (8 int32) against one activation block.
inline __m256i row_block_sumi(const BlockQ4_K& b, const RowBlock& rb, const __m256i* y) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i q = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
    const __m256i lo = _mm256_and_si256(q, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    const __m256i p_lo = _mm256_madd_epi16(mul_us(lo, y[2 * j]), scale_bcast(rb.sc, 2 * j));
    const __m256i p_hi = _mm256_madd_epi16(mul_us(hi, y[2 * j + 1]), scale_bcast(rb.sc, 2 * j + 1));
    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
  }
  return sumi;
}

// The AVX2 level of q4k_exact_rows8 (kquant_avx2.h): a row's S lanes are one ymm.
struct RowsAvx2 {
  using Sums = __m256i;
  struct Act {
    __m256i y[8];
  };
  struct Prep {};
  static Prep prep() { return {}; }
  static Act load(const BlockQ8_K& a) {
    Act x;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) x.y[k] = load_act(a, 32 * k);
    return x;
  }
  static void row(const Prep&, const BlockQ4_K& b, const Act& x, __m256i bs, Sums& s, __m256i& m,
                  float& d, float& dmin) {
    RowBlock rb;
    row_scales(b, rb);
    s = row_block_sumi(b, rb, x.y);
    m = _mm256_madd_epi16(rb.mn, bs);
    d = rb.d;
    dmin = rb.dmin;
  }
  static __m256i reduce8(const Sums* v) { return reduce8_rows(v); }
  static int32_t reduce1(const Sums& v) { return reduce_i32(v); }
};

// ---- 8 rows in the lanes --------------------------------------------------------------------
//
// A packed group holds, per block of 256 columns (kPackedBlockBytes):
//   wq[8 sub-blocks][8 steps][32 bytes]: bytes 4r..4r+3 = row r's quants (0..15) at columns
//        32 sb + 4 step + 0..3 (int32 lane r is row r; one broadcast of 4 activation bytes);
//   sc[8][32 bytes]: int16 lanes 2r, 2r+1 = row r's sub-block scale;
//   mn[4][32 bytes]: int32 lane r = row r's mins 2q and 2q+1 as int16;
//   d[8], dmin[8] as floats.
constexpr size_t kWqBytes = 8 * 8 * 32, kScOff = kWqBytes, kMnOff = kScOff + 8 * 32,
                 kDOff = kMnOff + 4 * 32, kDminOff = kDOff + 32, kPackedBlockBytes = kDminOff + 32;
static_assert(kPackedBlockBytes % 64 == 0, "packed blocks keep 64-byte alignment");

// v[r] (8 dwords each) -> o[s] = dword s of every v[r], lane r.
inline void transpose8x8_epi32(const __m256i* v, __m256i* o) {
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  }
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {
    u[4 * k + 0] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    o[s] = _mm256_permute2x128_si256(u[s], u[4 + s], 0x20);
    o[s + 4] = _mm256_permute2x128_si256(u[s], u[4 + s], 0x31);
  }
}

void pack8_q4_k(int64_t n, const void* w, size_t stride, void* dst) {
  const uint8_t* wr = static_cast<const uint8_t*>(w);
  uint8_t* out = static_cast<uint8_t*>(dst);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t* g = out + (size_t)i * kPackedBlockBytes;
    const BlockQ4_K* b[8];
    for (int r = 0; r < 8; ++r) b[r] = reinterpret_cast<const BlockQ4_K*>(wr + r * stride) + i;
    for (int j = 0; j < 4; ++j) {
      __m256i lo[8], hi[8], o[8];
      for (int r = 0; r < 8; ++r) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)(b[r]->qs + 32 * j));
        lo[r] = _mm256_and_si256(q, m4);
        hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      }
      transpose8x8_epi32(lo, o);
      for (int s = 0; s < 8; ++s)
        _mm256_store_si256((__m256i*)(g + (size_t)(2 * j * 8 + s) * 32), o[s]);
      transpose8x8_epi32(hi, o);
      for (int s = 0; s < 8; ++s)
        _mm256_store_si256((__m256i*)(g + (size_t)((2 * j + 1) * 8 + s) * 32), o[s]);
    }
    const uint8_t* bp[8];
    for (int r = 0; r < 8; ++r) bp[r] = reinterpret_cast<const uint8_t*>(b[r]);
    const K4Meta8 m = k4_meta8(bp);
    for (int sb = 0; sb < 8; ++sb)
      _mm256_store_si256((__m256i*)(g + kScOff + (size_t)sb * 32),
                         k4_rows8(k4_pick_pairs(m.sc_lo, sb, sb), k4_pick_pairs(m.sc_hi, sb, sb)));
    for (int q = 0; q < 4; ++q)
      _mm256_store_si256((__m256i*)(g + kMnOff + (size_t)q * 32),
                         k4_rows8(k4_pick_pairs(m.mn_lo, 2 * q, 2 * q + 1),
                                  k4_pick_pairs(m.mn_hi, 2 * q, 2 * q + 1)));
    _mm256_store_ps((float*)(g + kDOff), m.d);
    _mm256_store_ps((float*)(g + kDminOff), m.dmin);
  }
}

// The same packed group from a Q4_K_R8 group (q4k_rows8.h), for prefill at this level: the
// in-place R8 kernel unpacks each chunk once per 4 tokens here (16 ymm registers), and from 24
// tokens the packed tiles (8 tokens per unpacked block) ran faster (bench_micro BM_matmul,
// Mixtral's 14336 x 4096 x 64 tokens, Zen 4: 1028 / 1430 tok/s in place on 1 / 2 threads).
// Chunk 2j + p holds 8 bytes per row (dwords 2r, 2r + 1 of its 64 bytes): columns 32j + 16p +
// 0..7 in the low nibbles, + 8..15 in the high ones, i.e. steps 4p + {0, 1} and 4p + {2, 3}.
void pack8_q4_k_r8(int64_t n, const void* w, size_t, void* dst) {
  namespace r8 = q4k_rows8;
  const uint8_t* src = static_cast<const uint8_t*>(w);
  uint8_t* out = static_cast<uint8_t*>(dst);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i pick[2] = {_mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6),
                           _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7)};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* g = src + (size_t)i * r8::kBlockBytes;
    uint8_t* o = out + (size_t)i * kPackedBlockBytes;
    for (int c = 0; c < 16; ++c) {
      const __m256i a = _mm256_loadu_si256((const __m256i*)(g + 64 * c));       // rows 0-3
      const __m256i b = _mm256_loadu_si256((const __m256i*)(g + 64 * c + 32));  // rows 4-7
      const __m256i nib[2][2] = {{_mm256_and_si256(a, m4), _mm256_and_si256(b, m4)},
                                 {_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                                  _mm256_and_si256(_mm256_srli_epi16(b, 4), m4)}};
      for (int q = 0; q < 4; ++q) {
        const __m256i* x = nib[q / 2];
        const __m256i v = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(x[0], pick[q % 2]),
                                             _mm256_permutevar8x32_epi32(x[1], pick[q % 2]), 0xF0);
        _mm256_store_si256((__m256i*)(o + (size_t)(8 * (c / 2) + 4 * (c % 2) + q) * 32), v);
      }
    }
    alignas(32) int16_t sc[8][16], mn[4][16];
    for (int r = 0; r < 8; ++r)
      for (int j = 0; j < 8; ++j) {
        sc[j][2 * r] = sc[j][2 * r + 1] = (int16_t)r8::scale_of(g, r, j);
        mn[j / 2][2 * r + j % 2] = (int16_t)r8::min_of(g, r, j);
      }
    std::memcpy(o + kScOff, sc, sizeof sc);
    std::memcpy(o + kMnOff, mn, sizeof mn);
    _mm256_store_ps((float*)(o + kDOff),
                    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(g + r8::kDOff))));
    _mm256_store_ps((float*)(o + kDminOff),
                    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(g + r8::kDminOff))));
  }
}

template <int NT>
void tile8_q4_k(int64_t n, const void* packed, const void* act, size_t stride, float* out) {
  const uint8_t* pk = static_cast<const uint8_t*>(packed);
  const BlockQ8_K* a[NT];
  __m256 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_K>(act, stride, t);
    acc[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* g = pk + (size_t)i * kPackedBlockBytes;
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    // A sub-block's eight steps are summed as int16 before the scale multiply: each
    // vpmaddubsw lane is at most 2 x 15 x 128 = 3840 in magnitude, eight of them 30720 < 2^15.
    // Tokens outer: loading each packed vector once for up to four tokens (steps outer, so that
    // p16 and sumi of four tokens share the 16 registers) measured ~30% slower.
    for (int sb = 0; sb < 8; ++sb) {
      const __m256i sc = _mm256_load_si256((const __m256i*)(g + kScOff + 32 * sb));
      const uint8_t* wsb = g + (size_t)sb * 8 * 32;
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const int8_t* y = a[t][i].qs + 32 * sb;
        __m256i p16 = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < 8; ++s) {
          int32_t y4;
          std::memcpy(&y4, y + 4 * s, 4);
          p16 = _mm256_add_epi16(
              p16, _mm256_maddubs_epi16(_mm256_load_si256((const __m256i*)(wsb + 32 * s)),
                                        _mm256_set1_epi32(y4)));
        }
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p16, sc));
      }
    }
    const __m256 d8 = _mm256_load_ps((const float*)(g + kDOff));
    const __m256 dm8 = _mm256_load_ps((const float*)(g + kDminOff));
    const __m256i* mn = reinterpret_cast<const __m256i*>(g + kMnOff);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = tile8_step(a[t][i], sumi[t], mn, d8, dm8, acc[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + 8 * t, acc[t]);
}

constexpr int kRows = 8;

}  // namespace

void fill_avx2_q4k_exact(DotTable& t) {
  const int k = (int)GgmlType::Q4_K;
  t.fn[k] = MOEFLOW_DOT_FN8(dot_q4_k_exact);
  t.rows_fn[k] = q4k_exact_rows8<RowsAvx2>;
  t.rows[k] = kRows;
  t.rows_any_length[k] = true;
  t.pack8[k] = pack8_q4_k;
  t.tile8[k] = MOEFLOW_DOT_FN8(tile8_q4_k);
  t.packed8_block_bytes[k] = kPackedBlockBytes;
  // Q4_K_R8's prefill from 24 tokens (its other entries: q4k_rows8_avx2.cpp).
  t.pack8[kQ4KR8Slot] = pack8_q4_k_r8;
  t.tile8[kQ4KR8Slot] = t.tile8[k];
  t.packed8_block_bytes[kQ4KR8Slot] = kPackedBlockBytes;
}

}  // namespace moeflow::kernels
