#pragma once
// Internal to backend/cpu: the MXFP4_R8 layout (MXFP4 with every group of 8 rows interleaved
// block by block), which the CPU backend rewrites MXFP4 weights into at load (repack_for_cpu)
// where the level has a kernel for it. In GGUF layout a row's 17-byte blocks lie together, so
// the one-row kernel (all MXFP4 had) reads one short stream per row and sums horizontally per
// row; here one 136-byte block holds all 8 rows' 32 columns, laid out for 512-bit lanes:
//
//   [0, 64)    byte 8r + b: row r's column b in its low nibble, column 8 + b in its high one.
//   [64, 128)  byte 8r + b: row r's column 16 + b (low nibble) and 24 + b (high).
//   [128, 136) the 8 rows' E8M0 scales.
//
// So one broadcast of the token's 8 activation bytes meets all 8 rows, and int32 lane 2r + h
// of a product of 8 columns 8k.. belongs to row r's columns 8k + 4h .. 8k + 4h + 3: exactly the
// sum of four that lane 2k + h of the MXFP4 kernels (AVX2 and AVX-512) holds for row r. The
// AVX-512 and AVX2 decode kernels keep those lanes apart (even and odd blocks too), take the same
// float steps per lane and add them up in the same tree at the end: the bits of MXFP4 at that
// level. The scalar level and prefill restore a group's GGUF rows (unpack) and run the MXFP4
// kernel of the level on them: the same bits by construction.
//
// The same bytes as the 8 rows in GGUF layout (8 x 17 per block), so a tensor is repacked in
// place. Rows past a matrix's last whole group keep the GGUF layout (and the MXFP4 kernels).
#include <array>
#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/nt_dispatch.h"

namespace moeflow::kernels::mxfp4_rows8 {

constexpr int kRows = 8;
constexpr size_t kLowOff = 0, kHighOff = 64, kScaleOff = 128, kBlockBytes = 136;
static_assert(kBlockBytes == kRows * 17, "a group's block is its 8 rows' MXFP4 blocks");

// MXFP4's values + 12 (0..24), unsigned: the AVX2 and AVX-512 decode kernels' weight bytes
// against the activation row's corrections (kernel_table.h, mxfp4_r8_row_corrections).
namespace {  // beside kMxfp4Values (nt_dispatch.h), which has internal linkage
constexpr std::array<uint8_t, 16> kValuesPlus12 = [] {
  std::array<uint8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[i] = (uint8_t)(kMxfp4Values[i] + 12);
  return t;
}();
}  // namespace

// Rewrites `groups` groups of 8 MXFP4 rows of n columns (rows back to back, row_bytes apart)
// into the layout above, in place.
void repack(int64_t n, void* rows, size_t row_bytes, int64_t groups);
// One group (n columns) back into its 8 GGUF rows, back to back at dst (8 x n / 32 x 17 bytes).
void unpack(int64_t n, const void* group, void* dst);

}  // namespace moeflow::kernels::mxfp4_rows8

namespace moeflow::kernels {
// The entries that restore GGUF rows (rows8_unpacked.h; MXFP4's one-row kernel of the table must
// be set already); the AVX2 and AVX-512 fills then put their own decode kernel in rows_fn.
void fill_mxfp4_rows8_unpacked(DotTable& t);
}  // namespace moeflow::kernels
