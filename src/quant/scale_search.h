#pragma once
// Least-squares scale searches for the K-quant formats. Each one quantizes a super-block of
// QK_K floats into small integers plus integer sub-block scales under one or two fp16
// super-block scales, minimising the squared reconstruction error rather than taking max-abs.
#include <cstdint>

#include "core/ggml_type.h"

namespace moeflow::quant_detail {

// x ~= d * ls[j] * L[i] - dmin * lm[j] with j = i / sub, L in [0, nmax], ls/lm in [0, smax]
// (Q2_K: sub 16, nmax 3, smax 15; Q4_K: 32, 15, 63; Q5_K: 32, 31, 63).
struct AsymResult {
  uint8_t L[256];
  uint8_t ls[16];
  uint8_t lm[16];
  uint16_t d, dmin;  // fp16
};
void quantize_superblock_asym(const float* x, int sub, int nmax, int smax, AsymResult& out,
                              GgmlType t);

// x ~= d * ls[j] * L[i] with L in [-nneg, npos], ls in [sc_lo, sc_hi]
// (Q3_K: sub 16, L -4..3, ls -32..31; Q6_K: sub 16, L -32..31, ls -128..127).
struct SymResult {
  int8_t L[256];
  int8_t ls[16];
  uint16_t d;  // fp16
};
void quantize_superblock_sym(const float* x, int sub, int nneg, int npos, int sc_lo, int sc_hi,
                             SymResult& out, GgmlType t);

// A sorted grid of 16 integer levels in [-128, 127] (the IQ4 code book). Midpoints between
// integer levels are multiples of 1/2, so the nearest level is constant on every half-unit
// interval: a 512-entry table indexed by floor(2t) answers it exactly (ties aside) without the
// mispredicting branches of a binary search.
struct Grid16 {
  int8_t v[16];
  uint8_t lut[512];  // nearest level index for t in [k/2 - 128, (k+1)/2 - 128)
};
constexpr Grid16 make_grid16(const int8_t (&levels)[16]) {
  Grid16 g{};
  for (int i = 0; i < 16; ++i) g.v[i] = levels[i];
  for (int k = 0; k < 512; ++k) {
    const float t = 0.5f * (float)k - 128.0f + 0.25f;  // centre of the interval
    int idx = 0;
    for (int i = 0; i < 15; ++i) idx += t > 0.5f * ((float)levels[i] + (float)levels[i + 1]);
    g.lut[k] = (uint8_t)idx;
  }
  return g;
}
inline int nearest_level(float t, const Grid16& g) {
  t = t > -128.0f ? t : -128.0f;  // NaN -> lowest
  t = t < 127.75f ? t : 127.75f;
  return g.lut[(int)(2.0f * t + 256.0f)];
}

// Best scale s for x ~= s * g.v[idx[i]]; writes the chosen indices. Returns s (0 for an
// all-zero block).
float fit_grid_scale(const float* x, int n, const Grid16& g, uint8_t* idx);

}  // namespace moeflow::quant_detail
