// AVX-512 Q4_K kernels with exact block sums, and the 8-row prefill path they make possible.
//
// Per weight row and token every kernel here computes, over the row's blocks i in order,
//   acc = fma(d_i * ad_i, (float)S_i, acc);  acc = fma(-(dmin_i * ad_i), (float)M_i, acc)
// with S_i = sum of scale x quant x activation over the block and M_i = sum of min x (pair of
// bsums), both exact int32 (|S_i| < 2^25, |M_i| < 2^22), and returns acc. Any grouping of rows
// and tokens therefore gives the same bits, which lets prefill put 8 rows in the lanes of one
// vector: the per-block float work (two conversions, two products, two FMAs and the mins'
// product) is paid once per 8 rows instead of once per row, and no horizontal sums remain. The
// GGUF kernels compute S_i and M_i per row as 16 / 8 int32 lanes and reduce them (exact) before
// the same float operations, scalar; before this file the AVX-512 kernels summed each lane in
// float and reduced at the end (vec_dot_avx512.cpp still does so for Q5_K).
#include "backend/cpu/simd_intrinsics.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/kquant_avx2.h"
#include "backend/cpu/kquant_avx512.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

using namespace avx2;
using namespace avx512;
// The 256-bit overloads (kquant_avx2.h) beside this file's 512-bit ones.
using avx2::reduce8_rows;
using avx2::reduce_i32;

inline int32_t reduce_i32(__m512i v) {
  return reduce_i32(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

// S_i of one row's block against one activation block, as 16 int32 lanes (the chunk loop of the
// older kernel: low nibbles of 32 bytes, then their high nibbles, times the sub-block scale).
struct RowBlock {
  __m512i q[4];
  __m512i s[4];
  __m256i mn;
  float d, dmin;
};
inline void unpack_row_block(const BlockQ4_K& b, const __m512i* sidx, RowBlock& rb) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m128i scx = k4_scales_x(b.scales);
  const __m512i sc16 = k4_sc16(scx);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * j)));
    rb.q[j] = _mm512_and_si512(_mm512_mask_srli_epi64(raw, 0xF0, raw, 4), m4);
    rb.s[j] = _mm512_permutexvar_epi16(sidx[j], sc16);
  }
  rb.mn = k4_mn16(scx);
  const __m128 dh = k4_d_dmin(&b);
  rb.d = _mm_cvtss_f32(dh);
  rb.dmin = _mm_cvtss_f32(_mm_movehdup_ps(dh));
}
// The block's S lanes against one activation block's four 64-byte chunks y.
inline __m512i row_sumi(const RowBlock& rb, const __m512i* y) {
  __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(rb.q[j], y[j]), rb.s[j]);
  return sumi;
}
inline void load_act4(const BlockQ8_K& a, __m512i* y) {
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) y[j] = load_act64(a, 64 * j);
}
inline void block_sums(const RowBlock& rb, const BlockQ8_K& a, int32_t& s, int32_t& m) {
  __m512i y[4];
  load_act4(a, y);
  s = reduce_i32(row_sumi(rb, y));
  m = reduce_i32(_mm256_madd_epi16(rb.mn, _mm256_loadu_si256((const __m256i*)a.bsums)));
}

// 8 int32 vectors -> one vector whose lane r is the sum of v[r]'s lanes (exact). ~24 / ~21
// instructions for eight rows instead of ~7 / ~5 per row.
inline __m256i reduce8_rows(const __m512i* v) {
  __m512i x[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)  // 128-bit chunk: [a0+a2, b0+b2, a1+a3, b1+b3]
    x[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                            _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
  // 128-bit chunk c of y[h]: rows 4h..4h+3, their chunk-c partial sums.
  const __m512i y0 =
      _mm512_add_epi32(_mm512_unpacklo_epi64(x[0], x[1]), _mm512_unpackhi_epi64(x[0], x[1]));
  const __m512i y1 =
      _mm512_add_epi32(_mm512_unpacklo_epi64(x[2], x[3]), _mm512_unpackhi_epi64(x[2], x[3]));
  const __m512i t = _mm512_add_epi32(_mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i u = _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(3, 1, 2, 0));
  return _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
}

// One row, NT tokens (GGUF layout): tails of the 8-row groups, short prefills.
template <int NT>
void dot_q4_k_exact(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ4_K* wb = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* a[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) a[t] = act_row<BlockQ8_K>(act, stride, t);
  __m512i sidx[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) sidx[j] = idx_pair(2 * j, 2 * j + 1);
  if constexpr (NT >= 4) {
    // Several tokens: their sums reduced together into the lanes of one vector (lane t =
    // token t) and the float steps taken there, instead of reducing each token on its own;
    // the experts of a 256-512-expert model get ~10-16 tokens of a prefill, below the packed
    // path's threshold.
    __m256 accv = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
      prefetch_block<sizeof(BlockQ4_K)>(wb + i);
      RowBlock rb;
      unpack_row_block(wb[i], sidx, rb);
      __m512i s16[8];
      __m256i m8[8];
      alignas(32) float ad[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        if (t < NT) {
          __m512i y[4];
          load_act4(a[t][i], y);
          s16[t] = row_sumi(rb, y);
          m8[t] = _mm256_madd_epi16(rb.mn, _mm256_loadu_si256((const __m256i*)a[t][i].bsums));
          ad[t] = a[t][i].d;
        } else {
          s16[t] = _mm512_setzero_si512();
          m8[t] = _mm256_setzero_si256();
          ad[t] = 0.f;
        }
      }
      accv = lanes_step(_mm256_set1_ps(rb.d), _mm256_set1_ps(rb.dmin), _mm256_load_ps(ad),
                        reduce8_rows(s16), reduce8_rows(m8), accv);
    }
    alignas(32) float o8[8];
    _mm256_store_ps(o8, accv);
    std::memcpy(out, o8, NT * sizeof(float));
  } else {
    float acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = 0.f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
      prefetch_block<sizeof(BlockQ4_K)>(wb + i);
      RowBlock rb;
      unpack_row_block(wb[i], sidx, rb);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        int32_t s, m;
        block_sums(rb, a[t][i], s, m);
        acc[t] = block_step(acc[t], rb.d, rb.dmin, a[t][i].d, s, m);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
  }
}

// The AVX-512 level of q4k_exact_rows8 (kquant_avx2.h): a row's S lanes are one zmm.
struct RowsAvx512 {
  using Sums = __m512i;
  struct Act {
    __m512i y[4];
  };
  struct Prep {
    __m512i sidx[4];
  };
  static Prep prep() {
    Prep p;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) p.sidx[j] = idx_pair(2 * j, 2 * j + 1);
    return p;
  }
  static Act load(const BlockQ8_K& a) {
    Act x;
    load_act4(a, x.y);
    return x;
  }
  static void row(const Prep& p, const BlockQ4_K& b, const Act& x, __m256i bs, Sums& s, __m256i& m,
                  float& d, float& dmin) {
    RowBlock rb;
    unpack_row_block(b, p.sidx, rb);
    s = row_sumi(rb, x.y);
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
//   wq[8 sub-blocks][4 steps][64 bytes]: bytes 8r..8r+7 = row r's quants (0..15, one per byte)
//        at columns 32 sb + 8 step + 0..7, so one broadcast of the token's 8 activation bytes
//        lines up with all 8 rows and int32 lanes 2r, 2r+1 belong to row r;
//   sc[8][64 bytes]: int16 lanes 4r..4r+3 = row r's sub-block scale (for vpdpwssd);
//   mn[4][32 bytes]: int32 lane r = row r's mins 2q and 2q+1 as int16 (for vpmaddwd against
//        the token's bsum pairs 2q, 2q+1);
//   d[8], dmin[8] as floats.
constexpr size_t kWqBytes = 8 * 4 * 64, kScOff = kWqBytes, kMnOff = kScOff + 8 * 64,
                 kDOff = kMnOff + 4 * 32, kDminOff = kDOff + 32, kPackedBlockBytes = kDminOff + 32;
static_assert(kPackedBlockBytes % 64 == 0, "packed blocks keep 64-byte alignment");

// Row qwords (two per 128-bit lane) -> each row's byte b as four int16 in its qword.
inline __m256i k4_pick_x4(__m256i q4, int b) {
  const char z = (char)0x80, l = (char)b, h = (char)(8 + b);
  const __m256i ctl = _mm256_setr_epi8(l, z, l, z, l, z, l, z, h, z, h, z, h, z, h, z,  //
                                       l, z, l, z, l, z, l, z, h, z, h, z, h, z, h, z);
  return _mm256_shuffle_epi8(q4, ctl);
}

void pack8_q4_k(int64_t n, const void* w, size_t stride, void* dst) {
  const uint8_t* wr = static_cast<const uint8_t*>(w);
  uint8_t* out = static_cast<uint8_t*>(dst);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t* g = out + (size_t)i * kPackedBlockBytes;
    const uint8_t* bp[8];
    for (int r = 0; r < 8; ++r) {
      const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(wr + r * stride)[i];
      bp[r] = reinterpret_cast<const uint8_t*>(&b);
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
        const __m256i lo = _mm256_and_si256(q, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        for (int h = 0; h < 2; ++h) {
          const __m256i v = h ? hi : lo;
          const int sb = 2 * j + h;
          const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
          uint8_t* base = g + (size_t)sb * 4 * 64 + 8 * r;
          _mm_storel_epi64((__m128i*)(base + 0 * 64), v0);
          _mm_storeh_pd((double*)(base + 1 * 64), _mm_castsi128_pd(v0));
          _mm_storel_epi64((__m128i*)(base + 2 * 64), v1);
          _mm_storeh_pd((double*)(base + 3 * 64), _mm_castsi128_pd(v1));
        }
      }
    }
    const K4Meta8 m = k4_meta8(bp);
    for (int sb = 0; sb < 8; ++sb)
      _mm512_store_si512((void*)(g + kScOff + (size_t)sb * 64),
                         _mm512_inserti64x4(_mm512_castsi256_si512(k4_pick_x4(m.sc_lo, sb)),
                                            k4_pick_x4(m.sc_hi, sb), 1));
    for (int q = 0; q < 4; ++q)
      _mm256_store_si256((__m256i*)(g + kMnOff + (size_t)q * 32),
                         k4_rows8(k4_pick_pairs(m.mn_lo, 2 * q, 2 * q + 1),
                                  k4_pick_pairs(m.mn_hi, 2 * q, 2 * q + 1)));
    _mm256_store_ps((float*)(g + kDOff), m.d);
    _mm256_store_ps((float*)(g + kDminOff), m.dmin);
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
    // (Summing a sub-block's four vpmaddubsw results as int16 before one vpdpwssd, as the AVX2
    // tile does, measured 5-10% slower here.)
    __m512i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int sb = 0; sb < 8; ++sb) {
      const __m512i sc = _mm512_load_si512((const void*)(g + kScOff + 64 * sb));
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        const __m512i wq = _mm512_load_si512((const void*)(g + (size_t)(4 * sb + p) * 64));
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          int64_t y8;
          std::memcpy(&y8, a[t][i].qs + 32 * sb + 8 * p, 8);
          sumi[t] =
              _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(wq, _mm512_set1_epi64(y8)), sc);
        }
      }
    }
    const __m256 d8 = _mm256_load_ps((const float*)(g + kDOff));
    const __m256 dm8 = _mm256_load_ps((const float*)(g + kDminOff));
    __m256i mn[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) mn[q] = _mm256_load_si256((const __m256i*)(g + kMnOff + 32 * q));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& at = a[t][i];
      // S: lanes 2r + 2r+1 (exact), the low dword of each qword kept.
      const __m512i s2 = _mm512_add_epi32(sumi[t], _mm512_srli_epi64(sumi[t], 32));
      const __m256i s = _mm512_cvtepi64_epi32(s2);
      acc[t] = tile8_step(at, s, mn, d8, dm8, acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + 8 * t, acc[t]);
}

constexpr int kRows = 8;

}  // namespace

void fill_avx512_q4k_exact(DotTable& t) {
  const int k = (int)GgmlType::Q4_K;
  t.fn[k] = MOEFLOW_DOT_FN8(dot_q4_k_exact);
  t.rows_fn[k] = q4k_exact_rows8<RowsAvx512>;
  t.rows[k] = kRows;
  t.rows_any_length[k] = true;
  t.pack8[k] = pack8_q4_k;
  t.tile8[k] = MOEFLOW_DOT_FN8(tile8_q4_k);
  t.packed8_block_bytes[k] = kPackedBlockBytes;
}

}  // namespace moeflow::kernels
