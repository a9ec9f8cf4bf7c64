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
inline const float* q8_0_row_scales(const void* row, int64_t n) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(row) + q8_0_scales_offset(n));
}
// After the float scales (at the next 64-byte boundary of the row) come the row's quants once
// more, back to back (32 bytes per block, so two blocks are one 64-byte load) and offset to
// unsigned bytes (y + 128 = y ^ 0x80). The AVX-512 32-block kernels dot them with the signed
// weights by vpdpbusd starting from -128 x the weights' sum per four (once per weight pair):
// (y + 128) . w - 128 sum(w) = y . w exactly, with no per-token sign fix-up.
inline size_t q8_0_quants_offset(int64_t n) {
  return (q8_0_scales_offset(n) + (size_t)(n / 32) * 4 + 63) & ~(size_t)63;
}
// Then every block's float scale eight times (a pair of blocks is one zmm of scales for the
// lanes that hold their sums).
inline size_t q8_0_scales8_offset(int64_t n) {
  return (q8_0_quants_offset(n) + (size_t)(n / 32) * 32 + 63) & ~(size_t)63;
}
// A multiple of 64 bytes, so that in 64-byte aligned buffers every row's wide loads are aligned.
inline size_t q8_0_activation_row_bytes(int64_t n) {
  return (q8_0_scales8_offset(n) + (size_t)(n / 32) * 32 + 63) & ~(size_t)63;
}
// MXFP4_R8's activation rows (mxfp4_rows8.h) append, at the next 64-byte boundary, per block
// the 8 int32 -12 x (the sum of the quants of columns 4j .. 4j + 3): its AVX-512 and AVX2 kernels
// read the weights as unsigned bytes w + 12 (0..24) against the signed quants and start each
// vpdpbusd there (AVX-512) or add them to each vpmaddwd's sums (AVX2), (w + 12) . y - 12 sum(y) =
// w . y, instead of -128 x sum(w) per weight vector or the sign trick. Filled at those levels
// (matmul.cpp, quantize_into); the scalar level leaves them unread.
inline size_t mxfp4_r8_corrections_offset(int64_t n) { return q8_0_activation_row_bytes(n); }
inline size_t mxfp4_r8_activation_row_bytes(int64_t n) {
  return mxfp4_r8_corrections_offset(n) + (size_t)(n / 32) * 32;
}
inline const int32_t* mxfp4_r8_row_corrections(const void* row, int64_t n) {
  return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(row) +
                                          mxfp4_r8_corrections_offset(n));
}
inline const uint8_t* q8_0_row_quants_u8(const void* row, int64_t n) {
  return static_cast<const uint8_t*>(row) + q8_0_quants_offset(n);
}
inline const float* q8_0_row_scales8(const void* row, int64_t n) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(row) + q8_0_scales8_offset(n));
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

// Prefill over groups of 8 weight rows with the rows in the vector lanes, for a level and type
// whose kernels compute each row's block sums exactly in integers (so the float operations per
// row and token are the same however the rows are grouped). pack8 writes 8 rows (w, w + w_stride,
// ...) of n columns into a group of packed8_block_bytes x (n / the type's block size) bytes;
// tile8 dots one packed group with nt <= kMaxTokens activation rows, out[t * 8 + r] = row r .
// token t, bit-identical to DotFn. (MXFP4_R8 and Q8_0_R8 use the pair the other way round: pack8
// restores a group's 8 GGUF rows, tile8 runs the level's kernel of the base type on each.)
using Pack8Fn = void (*)(int64_t n, const void* w, size_t w_stride, void* dst);
using Tile8Fn = void (*)(int64_t n, const void* packed, const void* act, size_t act_stride, int nt,
                         float* out);

enum class Simd : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// Indexed by type_slot(type); nullptr where the level has no kernel of its own (the dispatcher
// then falls back to the next lower level).
constexpr int kTypeSlots = 43;
// A file type's slot is its ggml id (all below 40); the in-memory layouts come after.
constexpr int kQ4KR8Slot = 40, kMxfp4R8Slot = 41, kQ80R8Slot = 42;
inline int type_slot(GgmlType t) {
  const uint32_t id = (uint32_t)t;
  if (id < (uint32_t)kQ4KR8Slot) return (int)id;
  if (t == GgmlType::Q4_K_R8) return kQ4KR8Slot;
  if (t == GgmlType::MXFP4_R8) return kMxfp4R8Slot;
  return t == GgmlType::Q8_0_R8 ? kQ80R8Slot : -1;
}
// The layouts whose weight rows are interleaved in groups of 8 (q4k_rows8.h, mxfp4_rows8.h,
// q8_0_rows8.h): readable group by group only, never one row alone.
inline bool rows_interleaved(GgmlType t) {
  return t == GgmlType::Q4_K_R8 || t == GgmlType::MXFP4_R8 || t == GgmlType::Q8_0_R8;
}

// groups8: types whose rows are interleaved in groups of 8 (rows_interleaved): out[t * 8 + r] =
// row r of the group at w . token t, for nt <= kMaxTokens activation rows, read in place (the
// Tile8Fn signature). Rows past the last whole group keep the base type's layout and go through
// DotFn (which, for these types, is the base type's kernel of the same level: the same bits). A
// type without it (MXFP4_R8, Q8_0_R8) has pack8/tile8 for every token count instead. Q5_0 at
// AVX-512 has one too, over 8 consecutive GGUF rows (which lie back to back), bit-identical to
// its DotFn: its serial FMA chain per row needs several rows in flight (q5_0_avx512.cpp).
struct DotTable {
  DotFn fn[kTypeSlots] = {};
  // Optional multi-row kernels (nullptr: matvec uses fn row by row) and their row counts. Only
  // ever used together with fn of the same level, since other levels round differently.
  RowsFn rows_fn[kTypeSlots] = {};
  int rows[kTypeSlots] = {};
  // The multi-row kernel picks its own walk by row length (rows one after another below
  // kMultiRowMinBytes, interleaved above), so matvec uses it for rows of any length.
  bool rows_any_length[kTypeSlots] = {};
  // Optional: two consecutive groups of rows_fn's R rows in one call (2R outputs), each group's
  // arithmetic exactly rows_fn's, the two weight streams read side by side: a core running a
  // compute-heavy kernel keeps more lines in flight from DRAM with two sequential streams than
  // with one (rows8_32_avx512.cpp).
  RowsFn rows2_fn[kTypeSlots] = {};
  // Optional 8-row prefill path (nullptr: none), same level as fn; packed bytes per block of the
  // weight type (256 columns for the K-quants).
  Pack8Fn pack8[kTypeSlots] = {};
  Tile8Fn tile8[kTypeSlots] = {};
  size_t packed8_block_bytes[kTypeSlots] = {};
  // Interleaved types and Q5_0 at AVX-512 (see above); matmul uses it for every whole group.
  Tile8Fn groups8[kTypeSlots] = {};
};

void fill_scalar_table(DotTable& t);
void fill_avx2_table(DotTable& t);
void fill_avx2_q4k_exact(DotTable& t);  // called by fill_avx2_table
void fill_avx512_table(DotTable& t);
void fill_avx512_q4k_exact(DotTable& t);  // called by fill_avx512_table
// Q4_K_R8 (q4k_rows8*.cpp), called by the fill functions above after their Q4_K entries.
void fill_scalar_q4k_rows8(DotTable& t);
void fill_avx2_q4k_rows8(DotTable& t);
void fill_avx512_q4k_rows8(DotTable& t);
// MXFP4_R8 and Q8_0_R8 (mxfp4_rows8.cpp, q8_0_rows8.cpp, rows8_32_*.cpp), likewise after the
// MXFP4 and Q8_0 entries.
void fill_scalar_mxfp4_rows8(DotTable& t);
void fill_avx2_mxfp4_rows8(DotTable& t);
void fill_avx512_mxfp4_rows8(DotTable& t);
void fill_scalar_q8_0_rows8(DotTable& t);
void fill_avx2_q8_0_rows8(DotTable& t);
void fill_avx512_q8_0_rows8(DotTable& t);
// Q5_0 in llama.cpp's order at AVX-512 (q5_0_avx512.cpp): its DotFn, 8-row matvec and groups8.
void fill_avx512_q5_0(DotTable& t);

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
