#pragma once
// Internal to backend/cpu: the per-instruction-set tables of dot kernels that dispatch.cpp picks
// from. Not part of the public contract (use matmul.h).
#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace moeflow::kernels {

// Most activation rows one kernel call dots against the same weight row. matmul tiles tokens
// by this so each weight block is loaded and unpacked once per tile.
constexpr int kMaxTokens = 8;

// A Q8_0 activation row is its n / 32 blocks followed (at the next 4-byte boundary) by the same
// blocks' scales once more as floats: a prefill tile dots each activation block against many
// weight rows, and converting the fp16 scale for every one of them was a third of the 32-block
// kernels' work. Rows are a multiple of 4 bytes, so every row's floats are aligned.
inline size_t q8_0_scales_offset(int64_t n) { return ((size_t)(n / 32) * 34 + 3) & ~(size_t)3; }
inline size_t q8_0_activation_row_bytes(int64_t n) {
  return q8_0_scales_offset(n) + (size_t)(n / 32) * 4;
}
inline const float* q8_0_row_scales(const void* row, int64_t n) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(row) + q8_0_scales_offset(n));
}

// out[t] = dot(weight row w of n elements, activation row at act + t * act_stride bytes),
// t in [0, nt), 1 <= nt <= kMaxTokens. Every kernel computes each token with exactly the same
// operations in the same order whatever nt is, so matmul rows equal matvec bit for bit.
using DotFn = void (*)(int64_t n, const void* w, const void* act, size_t act_stride, int nt,
                       float* out);

// Multi-row matvec kernel for the single-token case: out[r] = dot(weight row at
// w + r * w_stride bytes, one activation row) for r in [0, R), R fixed per table entry. The rows
// share the activation loads and each row stream gets its own software prefetch. Every out[r]
// is bit-identical to the same level's DotFn with nt = 1 on that row (same float operations in
// the same order per row; only integer sums, which are exact, may be regrouped).
using RowsFn = void (*)(int64_t n, const void* w, size_t w_stride, const void* act, float* out);
// matvec uses the multi-row kernels only for rows at least this long. Measured from DRAM
// (Xeon, 2 vCPU, Q4_K, 8 rows per call): 4096 x 14336 (8064-byte rows) +8-35% over row by
// row, 14336 x 4096 (2304-byte rows) 20-30% slower at every prefetch distance and hint tried:
// R short interleaved streams defeat the hardware streamer that one long sequential walk
// keeps busy.
constexpr size_t kMultiRowMinBytes = 4096;

enum class Simd : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// Indexed by the GgmlType id; nullptr where the level has no kernel of its own (the dispatcher
// then falls back to the next lower level).
constexpr int kTypeSlots = 40;
struct DotTable {
  DotFn fn[kTypeSlots] = {};
  // Optional multi-row kernels (nullptr: matvec uses fn row by row) and their row counts. Only
  // ever used together with fn of the same level, since other levels round differently.
  RowsFn rows_fn[kTypeSlots] = {};
  int rows[kTypeSlots] = {};
};

void fill_scalar_table(DotTable& t);
void fill_avx2_table(DotTable& t);
void fill_avx512_table(DotTable& t);

// Activation quantizers. Every level produces the same bytes, so activations never depend on
// the dispatch choice.
void quantize_q8_0(const float* x, int64_t n, void* out);
// Q8_1 (for Q4_1/Q5_1, whose kernels are scalar at every level): scalar only.
void quantize_q8_1(const float* x, int64_t n, void* out);
void quantize_q8_k(const float* x, int64_t n, void* out);
// Byte-identical AVX2 versions (activation_avx2.cpp).
void quantize_q8_0_avx2(const float* x, int64_t n, void* out);
void quantize_q8_k_avx2(const float* x, int64_t n, void* out);

}  // namespace moeflow::kernels
