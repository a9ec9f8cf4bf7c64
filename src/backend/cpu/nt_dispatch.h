#pragma once
// Turns a kernel template `name<NT>(n, w, act, stride, out)` into a DotFn that picks NT at run
// time. Each NT instantiation runs the same per-token arithmetic, only interleaved.
#include <bit>

#include "backend/cpu/kernel_table.h"

// Kernels instantiated up to NT = 4 (the scalar level, and the AVX2 32-block kernels, whose two
// accumulators per token would not fit 16 ymm registers for eight tokens) serve nt = 5..8 as two
// calls.
#define MOEFLOW_DOT_FN(name)                                                \
  [](int64_t n, const void* w, const void* a, size_t s, int nt, float* o) { \
    for (int t0 = 0; t0 < nt; t0 += 4) {                                    \
      const void* at = static_cast<const uint8_t*>(a) + (size_t)t0 * s;     \
      switch (nt - t0) {                                                    \
        case 1: name<1>(n, w, at, s, o + t0); break;                        \
        case 2: name<2>(n, w, at, s, o + t0); break;                        \
        case 3: name<3>(n, w, at, s, o + t0); break;                        \
        default: name<4>(n, w, at, s, o + t0); break;                       \
      }                                                                     \
    }                                                                       \
  }

// The same for kernels of 8 interleaved rows (kernel_table.h, groups8), whose output holds 8
// floats per token.
#define MOEFLOW_GROUPS8_FN(name)                                            \
  [](int64_t n, const void* w, const void* a, size_t s, int nt, float* o) { \
    for (int t0 = 0; t0 < nt; t0 += 4) {                                    \
      const void* at = static_cast<const uint8_t*>(a) + (size_t)t0 * s;     \
      float* ot = o + 8 * t0;                                               \
      switch (nt - t0) {                                                    \
        case 1: name<1>(n, w, at, s, ot); break;                            \
        case 2: name<2>(n, w, at, s, ot); break;                            \
        case 3: name<3>(n, w, at, s, ot); break;                            \
        default: name<4>(n, w, at, s, ot); break;                           \
      }                                                                     \
    }                                                                       \
  }

// Eight tokens per weight block where the registers hold them (AVX-512: 32 zmm; AVX2's K-quant
// kernels, one accumulator per token): the block is unpacked once for twice as many tokens.
#define MOEFLOW_DOT_FN8(name)                                               \
  [](int64_t n, const void* w, const void* a, size_t s, int nt, float* o) { \
    switch (nt) {                                                           \
      case 1: name<1>(n, w, a, s, o); break;                                \
      case 2: name<2>(n, w, a, s, o); break;                                \
      case 3: name<3>(n, w, a, s, o); break;                                \
      case 4: name<4>(n, w, a, s, o); break;                                \
      case 5: name<5>(n, w, a, s, o); break;                                \
      case 6: name<6>(n, w, a, s, o); break;                                \
      case 7: name<7>(n, w, a, s, o); break;                                \
      default: name<8>(n, w, a, s, o); break;                               \
    }                                                                       \
  }

namespace moeflow::kernels {
static_assert(kMaxTokens == 8, "MOEFLOW_DOT_FN / MOEFLOW_DOT_FN8 handle up to 8 tokens");

// Internal linkage on purpose: this header is compiled with different -m flags in different
// files, and one shared inline copy could carry AVX-512 code into the scalar path.
namespace {

// Where a stream of a two-group matvec kernel (kernel_table.h, rows2_fn: two consecutive groups
// of group_bytes each, walked side by side) prefetches: `ahead` bytes past p, or, once that runs
// past the end of the stream's own group, as far into the group after the other one, which is the
// next call's group of this stream (matvec walks a thread's rows front to back).
inline const uint8_t* two_group_ahead(const uint8_t* p, size_t ahead, const uint8_t* group_end,
                                      size_t group_bytes) {
  const uint8_t* q = p + ahead;
  return q < group_end ? q : q + group_bytes;
}

template <typename T>
inline const T* act_row(const void* a, size_t stride, int t) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(a) + (size_t)t * stride);
}

// The value of an E8M0 exponent byte halved (MXFP4 stores its E2M1 values doubled as ints).
constexpr float e8m0_half(uint8_t e) {
  return std::bit_cast<float>(e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e);
}

inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace
}  // namespace moeflow::kernels
