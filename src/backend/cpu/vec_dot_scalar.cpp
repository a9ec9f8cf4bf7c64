// Portable kernels for every supported weight type: the fallback on CPUs without AVX2 and the
// reference the SIMD kernels are tested against. Each block is decoded once to small integers
// and then dotted with every token of the tile.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/nt_dispatch.h"
#include "core/fp16.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

// ---- 32-element blocks against Q8_0 (Q8_1) activations------------------------------------------

struct Dec32 {
  int8_t q[32];
  float d;  // value = d * q + m
  float m;
};

void decode(const BlockQ4_0& b, Dec32& o) {
  for (int j = 0; j < 16; ++j) {
    o.q[j] = (int8_t)((b.qs[j] & 0xF) - 8);
    o.q[j + 16] = (int8_t)((b.qs[j] >> 4) - 8);
  }
  o.d = fp16_to_fp32(b.d);
  o.m = 0;
}
void decode(const BlockQ4_1& b, Dec32& o) {
  for (int j = 0; j < 16; ++j) {
    o.q[j] = (int8_t)(b.qs[j] & 0xF);
    o.q[j + 16] = (int8_t)(b.qs[j] >> 4);
  }
  o.d = fp16_to_fp32(b.d);
  o.m = fp16_to_fp32(b.m);
}
void decode(const BlockQ5_0& b, Dec32& o) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    o.q[j] = (int8_t)(((b.qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16);
    o.q[j + 16] = (int8_t)(((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
  }
  o.d = fp16_to_fp32(b.d);
  o.m = 0;
}
void decode(const BlockQ5_1& b, Dec32& o) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    o.q[j] = (int8_t)((b.qs[j] & 0xF) | (((qh >> j) & 1) << 4));
    o.q[j + 16] = (int8_t)((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
  o.d = fp16_to_fp32(b.d);
  o.m = fp16_to_fp32(b.m);
}
void decode(const BlockQ8_0& b, Dec32& o) {
  std::memcpy(o.q, b.qs, 32);
  o.d = fp16_to_fp32(b.d);
  o.m = 0;
}
void decode(const BlockIQ4_NL& b, Dec32& o) {
  for (int j = 0; j < 16; ++j) {
    o.q[j] = kIq4nlValues[b.qs[j] & 0xF];
    o.q[j + 16] = kIq4nlValues[b.qs[j] >> 4];
  }
  o.d = fp16_to_fp32(b.d);
  o.m = 0;
}
void decode(const BlockMXFP4& b, Dec32& o) {
  for (int j = 0; j < 16; ++j) {
    o.q[j] = kMxfp4Values[b.qs[j] & 0xF];
    o.q[j + 16] = kMxfp4Values[b.qs[j] >> 4];
  }
  o.d = e8m0_half(b.e);
  o.m = 0;
}

// The minimum term: none for symmetric types (Q8_0 activations); for Q4_1/Q5_1 the weight
// block's minimum times the activation block's stored sum s (Q8_1).
inline float min_term(const Dec32&, const BlockQ8_0&) { return 0.f; }
inline float min_term(const Dec32& dec, const BlockQ8_1& a) { return dec.m * fp16_to_fp32(a.s); }

template <typename B, int NT, typename A = BlockQ8_0>
void dot32(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const B* wb = static_cast<const B*>(w);
  const int64_t nb = n / 32;
  float acc[NT] = {};
  Dec32 dec;
  for (int64_t i = 0; i < nb; ++i) {
    decode(wb[i], dec);
    for (int t = 0; t < NT; ++t) {
      const A& a = act_row<A>(act, stride, t)[i];
      int sumq = 0;
      for (int j = 0; j < 32; ++j) sumq += dec.q[j] * a.qs[j];
      acc[t] += dec.d * fp16_to_fp32(a.d) * (float)sumq + min_term(dec, a);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// Q4_1 / Q5_1 (Q8_1 activations) and Q5_0 (Q8_0) in llama.cpp's x86 order: per token 8 float
// lanes (lane k takes the block's products of elements 4k..4k+3, fma'd by d * da), the minimums'
// terms summed apart, and the lanes reduced as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
// at the end, plus them. For Q5_0 this is the AVX2 and AVX-512 kernels' order too (one
// accumulator, blocks in sequence), so every level gives the same bits.
template <typename B, int NT, typename A>
void dot32_lanes(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  constexpr bool kMins = std::is_same_v<A, BlockQ8_1>;
  const B* wb = static_cast<const B*>(w);
  const int64_t nb = n / 32;
  float lane[NT][8] = {}, mins[NT] = {};
  Dec32 dec;
  for (int64_t i = 0; i < nb; ++i) {
    decode(wb[i], dec);
    for (int t = 0; t < NT; ++t) {
      const A& a = act_row<A>(act, stride, t)[i];
      if constexpr (kMins) mins[t] += min_term(dec, a);
      const float dd = dec.d * fp16_to_fp32(a.d);
      for (int k = 0; k < 8; ++k) {
        int s4 = 0;
        for (int j = 4 * k; j < 4 * k + 4; ++j) s4 += dec.q[j] * a.qs[j];
        lane[t][k] = std::fma(dd, (float)s4, lane[t][k]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    const float* l = lane[t];
    out[t] = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    if constexpr (kMins) out[t] += mins[t];
  }
}

template <int NT>
void dot_q4_0(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockQ4_0, NT>(n, w, a, s, o);
}
template <int NT>
void dot_q4_1(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32_lanes<BlockQ4_1, NT, BlockQ8_1>(n, w, a, s, o);
}
template <int NT>
void dot_q5_0(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32_lanes<BlockQ5_0, NT, BlockQ8_0>(n, w, a, s, o);
}
template <int NT>
void dot_q5_1(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32_lanes<BlockQ5_1, NT, BlockQ8_1>(n, w, a, s, o);
}
template <int NT>
void dot_q8_0(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockQ8_0, NT>(n, w, a, s, o);
}
template <int NT>
void dot_iq4_nl(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockIQ4_NL, NT>(n, w, a, s, o);
}
template <int NT>
void dot_mxfp4(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockMXFP4, NT>(n, w, a, s, o);
}

// ---- 256-element super-blocks against Q8_K activations --------------------------------------

// value[j] = d * sc[j/16] * q[j] - dmin * mn[j/16]
struct Dec256 {
  int8_t q[256];
  int sc[16];
  int mn[16];
  float d, dmin;
};

// The 6-bit scale / min pairs of Q4_K and Q5_K (8 of each, packed into 12 bytes).
inline void scale_min_k4(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void decode(const BlockQ2_K& b, Dec256& o) {
  for (int half = 0; half < 2; ++half)
    for (int shift = 0; shift < 4; ++shift)
      for (int l = 0; l < 32; ++l)
        o.q[half * 128 + shift * 32 + l] = (int8_t)((b.qs[half * 32 + l] >> (2 * shift)) & 3);
  for (int g = 0; g < 16; ++g) {
    o.sc[g] = b.scales[g] & 0xF;
    o.mn[g] = b.scales[g] >> 4;
  }
  o.d = fp16_to_fp32(b.d);
  o.dmin = fp16_to_fp32(b.dmin);
}
void decode(const BlockQ3_K& b, Dec256& o) {
  for (int half = 0; half < 2; ++half)
    for (int shift = 0; shift < 4; ++shift) {
      const int hbit = half * 4 + shift;
      for (int l = 0; l < 32; ++l) {
        const int lo = (b.qs[half * 32 + l] >> (2 * shift)) & 3;
        const int hi = (b.hmask[l] >> hbit) & 1;
        o.q[half * 128 + shift * 32 + l] = (int8_t)(lo - (hi ? 0 : 4));
      }
    }
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? (b.scales[g] & 0xF) : (b.scales[g - 8] >> 4);
    const int high = (b.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    o.sc[g] = (low | (high << 4)) - 32;
    o.mn[g] = 0;
  }
  o.d = fp16_to_fp32(b.d);
  o.dmin = 0;
}
void decode(const BlockQ4_K& b, Dec256& o) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      o.q[c * 64 + l] = (int8_t)(b.qs[c * 32 + l] & 0xF);
      o.q[c * 64 + 32 + l] = (int8_t)(b.qs[c * 32 + l] >> 4);
    }
  }
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, b.scales, sc, m);
    o.sc[2 * j] = o.sc[2 * j + 1] = sc;
    o.mn[2 * j] = o.mn[2 * j + 1] = m;
  }
  o.d = fp16_to_fp32(b.d);
  o.dmin = fp16_to_fp32(b.dmin);
}
void decode(const BlockQ5_K& b, Dec256& o) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int h1 = (b.qh[l] >> (2 * c)) & 1, h2 = (b.qh[l] >> (2 * c + 1)) & 1;
      o.q[c * 64 + l] = (int8_t)((b.qs[c * 32 + l] & 0xF) | (h1 << 4));
      o.q[c * 64 + 32 + l] = (int8_t)((b.qs[c * 32 + l] >> 4) | (h2 << 4));
    }
  }
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, b.scales, sc, m);
    o.sc[2 * j] = o.sc[2 * j + 1] = sc;
    o.mn[2 * j] = o.mn[2 * j + 1] = m;
  }
  o.d = fp16_to_fp32(b.d);
  o.dmin = fp16_to_fp32(b.dmin);
}
void decode(const BlockQ6_K& b, Dec256& o) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + half * 64;
    const uint8_t* qh = b.qh + half * 32;
    int8_t* q = o.q + half * 128;
    for (int l = 0; l < 32; ++l) {
      q[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      q[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
  for (int g = 0; g < 16; ++g) {
    o.sc[g] = b.scales[g];
    o.mn[g] = 0;
  }
  o.d = fp16_to_fp32(b.d);
  o.dmin = 0;
}
void decode(const BlockIQ4_XS& b, Dec256& o) {
  for (int ib = 0; ib < 8; ++ib) {
    for (int j = 0; j < 16; ++j) {
      o.q[ib * 32 + j] = kIq4nlValues[b.qs[ib * 16 + j] & 0xF];
      o.q[ib * 32 + j + 16] = kIq4nlValues[b.qs[ib * 16 + j] >> 4];
    }
    const int ls =
        ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    o.sc[2 * ib] = o.sc[2 * ib + 1] = ls - 32;
    o.mn[2 * ib] = o.mn[2 * ib + 1] = 0;
  }
  o.d = fp16_to_fp32(b.d);
  o.dmin = 0;
}

template <typename B, int NT>
void dot256(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const B* wb = static_cast<const B*>(w);
  const int64_t nb = n / 256;
  float acc[NT] = {};
  Dec256 dec;
  for (int64_t i = 0; i < nb; ++i) {
    decode(wb[i], dec);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& a = act_row<BlockQ8_K>(act, stride, t)[i];
      int isum = 0, msum = 0;
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += dec.q[g * 16 + j] * a.qs[g * 16 + j];
        isum += dec.sc[g] * s;
        msum += dec.mn[g] * a.bsums[g];
      }
      acc[t] += a.d * (dec.d * (float)isum - dec.dmin * (float)msum);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

template <int NT>
void dot_q2_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot256<BlockQ2_K, NT>(n, w, a, s, o);
}
template <int NT>
void dot_q3_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot256<BlockQ3_K, NT>(n, w, a, s, o);
}
template <int NT>
void dot_q4_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot256<BlockQ4_K, NT>(n, w, a, s, o);
}
template <int NT>
void dot_q5_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot256<BlockQ5_K, NT>(n, w, a, s, o);
}
template <int NT>
void dot_q6_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot256<BlockQ6_K, NT>(n, w, a, s, o);
}
template <int NT>
void dot_iq4_xs(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot256<BlockIQ4_XS, NT>(n, w, a, s, o);
}

// ---- float weights against float activations -----------------------------------------------

inline float to_f32(float v) { return v; }
struct F16 {
  uint16_t v;
};
struct BF16 {
  uint16_t v;
};
inline float to_f32(F16 v) { return fp16_to_fp32(v.v); }
inline float to_f32(BF16 v) { return bf16_to_fp32(v.v); }

// Eight interleaved partial sums, folded in a fixed order, keep rounding error low and the
// result independent of how the caller tiles tokens.
template <typename W, int NT>
void dot_float(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const W* wr = static_cast<const W*>(w);
  float acc[NT][8] = {};
  float wf[8];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) wf[k] = to_f32(wr[i + k]);
    for (int t = 0; t < NT; ++t) {
      const float* x = act_row<float>(act, stride, t) + i;
      for (int k = 0; k < 8; ++k) acc[t][k] += wf[k] * x[k];
    }
  }
  for (int t = 0; t < NT; ++t) {
    const float* x = act_row<float>(act, stride, t);
    float tail = 0;
    for (int64_t j = i; j < n; ++j) tail += to_f32(wr[j]) * x[j];
    out[t] = ((acc[t][0] + acc[t][4]) + (acc[t][1] + acc[t][5])) +
             ((acc[t][2] + acc[t][6]) + (acc[t][3] + acc[t][7])) + tail;
  }
}

template <int NT>
void dot_f32(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_float<float, NT>(n, w, a, s, o);
}
template <int NT>
void dot_f16(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_float<F16, NT>(n, w, a, s, o);
}
template <int NT>
void dot_bf16(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_float<BF16, NT>(n, w, a, s, o);
}

}  // namespace

void fill_scalar_table(DotTable& t) {
  auto set = [&](GgmlType ty, DotFn f) { t.fn[(int)ty] = f; };
  set(GgmlType::F32, MOEFLOW_DOT_FN(dot_f32));
  set(GgmlType::F16, MOEFLOW_DOT_FN(dot_f16));
  set(GgmlType::BF16, MOEFLOW_DOT_FN(dot_bf16));
  set(GgmlType::Q4_0, MOEFLOW_DOT_FN(dot_q4_0));
  set(GgmlType::Q4_1, MOEFLOW_DOT_FN(dot_q4_1));
  set(GgmlType::Q5_0, MOEFLOW_DOT_FN(dot_q5_0));
  set(GgmlType::Q5_1, MOEFLOW_DOT_FN(dot_q5_1));
  set(GgmlType::Q8_0, MOEFLOW_DOT_FN(dot_q8_0));
  set(GgmlType::IQ4_NL, MOEFLOW_DOT_FN(dot_iq4_nl));
  set(GgmlType::MXFP4, MOEFLOW_DOT_FN(dot_mxfp4));
  set(GgmlType::Q2_K, MOEFLOW_DOT_FN(dot_q2_k));
  set(GgmlType::Q3_K, MOEFLOW_DOT_FN(dot_q3_k));
  set(GgmlType::Q4_K, MOEFLOW_DOT_FN(dot_q4_k));
  set(GgmlType::Q5_K, MOEFLOW_DOT_FN(dot_q5_k));
  set(GgmlType::Q6_K, MOEFLOW_DOT_FN(dot_q6_k));
  set(GgmlType::IQ4_XS, MOEFLOW_DOT_FN(dot_iq4_xs));
  fill_scalar_q4k_rows8(t);
  fill_scalar_mxfp4_rows8(t);
  fill_scalar_q8_0_rows8(t);
}

}  // namespace moeflow::kernels
