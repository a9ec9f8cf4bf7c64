// Q4_K_R8 (q4k_rows8.h): the repacking, and the scalar kernels, which also define the arithmetic
// the AVX2 and AVX-512 ones (q4k_rows8_avx2.cpp, q4k_rows8_avx512.cpp) reproduce bit for bit.
#include "backend/cpu/q4k_rows8.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/rows8_repack.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/k_scales.h"

namespace moeflow::kernels {
namespace q4k_rows8 {
namespace {

uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// One group's block i from the 8 GGUF rows at src (row_bytes apart) into dst (kBlockBytes).
void repack_block(const uint8_t* src, size_t row_bytes, int64_t i, uint8_t* dst) {
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL;
  uint8_t mins[64];
  for (int r = 0; r < kRows; ++r) {
    const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(src + (size_t)r * row_bytes)[i];
    // Bytes 32k.. of qs hold sub-block 2k in their low nibbles, 2k + 1 in their high ones; 8
    // bytes at a time (little-endian: byte b of the word is column b).
    for (int k = 0; k < 4; ++k)
      for (int p = 0; p < 2; ++p) {
        const uint64_t a = load64(b.qs + 32 * k + 16 * p), c = load64(b.qs + 32 * k + 16 * p + 8);
        const uint64_t even = (a & kLow) | ((c & kLow) << 4);
        const uint64_t odd = ((a >> 4) & kLow) | (c & ~kLow);
        std::memcpy(dst + (size_t)(2 * (2 * k) + p) * 64 + 8 * r, &even, 8);
        std::memcpy(dst + (size_t)(2 * (2 * k + 1) + p) * 64 + 8 * r, &odd, 8);
      }
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k4_get_scale_min(b.scales, j, sc, m);
      dst[kScaleOff + 8 * r + j] = (uint8_t)(sc | ((m >> 4) << 6));
      mins[8 * r + j] = m;
    }
    std::memcpy(dst + kDOff + 2 * r, &b.d, 2);
    std::memcpy(dst + kDminOff + 2 * r, &b.dmin, 2);
  }
  for (int e = 0; e < 32; ++e)
    dst[kMinOff + e] = (uint8_t)((mins[e] & 0x0F) | ((mins[e + 32] & 0x0F) << 4));
}

// Row r's quant at column c of a group block.
int quant(const uint8_t* g, int r, int c) {
  const int j = c / 32, o = c % 32, p = o / 16, b = o % 16;
  const uint8_t byte = g[(size_t)(2 * j + p) * 64 + 8 * r + b % 8];
  return b < 8 ? byte & 0x0F : byte >> 4;
}
float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

template <int NT>
void groups8_scalar(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const uint8_t* g = static_cast<const uint8_t*>(w);
  float acc[NT][kRows] = {};
  for (int64_t i = 0; i < n / QK_K; ++i, g += kBlockBytes)
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& a = act_row<BlockQ8_K>(act, stride, t)[i];
      for (int r = 0; r < kRows; ++r) {
        int32_t s = 0, m = 0;
        for (int j = 0; j < 8; ++j) {
          int32_t sj = 0;
          for (int c = 32 * j; c < 32 * j + 32; ++c) sj += quant(g, r, c) * a.qs[c];
          s += scale_of(g, r, j) * sj;
          m += min_of(g, r, j) * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
        }
        // The vector kernels' two lane steps (lanes_step): a scalar fma rounds like one lane.
        const float d = half(g + kDOff + 2 * r), dmin = half(g + kDminOff + 2 * r);
        acc[t][r] = std::fma(d * a.d, (float)s, acc[t][r]);
        acc[t][r] = std::fma(-(dmin * a.d), (float)m, acc[t][r]);
      }
    }
  for (int t = 0; t < NT; ++t) std::memcpy(out + kRows * t, acc[t], sizeof acc[t]);
}

void rows8_scalar(int64_t n, const void* w, size_t, const void* act, float* out) {
  groups8_scalar<1>(n, w, act, 0, out);
}

}  // namespace

void repack(int64_t n, void* rows, size_t row_bytes, int64_t groups) {
  repack_groups_in_place(
      n / QK_K, rows, row_bytes, groups, kBlockBytes,
      [&](const uint8_t* copy, int64_t i, uint8_t* dst) { repack_block(copy, row_bytes, i, dst); });
}

}  // namespace q4k_rows8

void fill_scalar_q4k_rows8(DotTable& t) {
  const int k = kQ4KR8Slot;
  // Rows past the last whole group are plain Q4_K rows.
  t.fn[k] = t.fn[(int)GgmlType::Q4_K];
  t.rows_fn[k] = q4k_rows8::rows8_scalar;
  t.rows[k] = q4k_rows8::kRows;
  t.rows_any_length[k] = true;
  t.groups8[k] = MOEFLOW_GROUPS8_FN(q4k_rows8::groups8_scalar);
}

}  // namespace moeflow::kernels
