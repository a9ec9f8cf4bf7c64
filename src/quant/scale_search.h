#pragma once
// Least-squares scale searches for the K-quant formats. Each one quantizes a super-block of
// QK_K floats into small integers plus integer sub-block scales under one or two fp16
// super-block scales, minimising the squared reconstruction error rather than taking max-abs.
#include <cstdint>

#include "quant/ggml_type.h"

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

// A sorted grid of 16 integer levels (the IQ4 code book) with its decision midpoints, so the
// nearest level is a branch-free count instead of a mispredicting binary search.
struct Grid16 {
  int8_t v[16];
  float mid[15];
};
Grid16 make_grid16(const int8_t* levels);
inline int nearest_level(float t, const Grid16& g) {
  int k = 0;
  for (int i = 0; i < 15; ++i) k += t > g.mid[i];
  return k;
}

// Best scale s for x ~= s * g.v[idx[i]]; writes the chosen indices. Returns s (0 for an
// all-zero block).
float fit_grid_scale(const float* x, int n, const Grid16& g, uint8_t* idx);

}  // namespace moeflow::quant_detail
