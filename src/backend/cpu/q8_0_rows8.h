#pragma once
// Internal to backend/cpu: the Q8_0_R8 layout (Q8_0 with every group of 8 rows interleaved block
// by block), which the CPU backend rewrites Q8_0 weights into at load (repack_for_cpu): attention
// and output matrices are Q8_0 in many released files (gpt-oss's 615 MB output head is two
// thirds of its decode bytes). One 272-byte block holds the 8 rows' 32 columns:
//
//   [64k, 64k + 64), k = 0..3   byte 8r + b: row r's column 8k + b (signed, as in GGUF).
//   [256, 272)                  the 8 rows' scales (fp16).
//
// Bytes 0-31 of each chunk are rows 0-3, 32-63 rows 4-7 (the AVX2 kernel's halves), and int32
// lane 2r + h of a product of chunk k belongs to row r's columns 8k + 4h .. 8k + 4h + 3: the sum
// of four that lane 2k + h of the Q8_0 kernels holds. The kernels follow MXFP4_R8's
// (mxfp4_rows8.h, rows8_32_*.cpp) with the quants read as they lie and fp16 scales: the bits of
// Q8_0 at every level. The same bytes as 8 GGUF rows (8 x 34 per block): repacked in place.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernel_table.h"

namespace moeflow::kernels::q8_0_rows8 {

constexpr int kRows = 8;
constexpr size_t kScaleOff = 256, kBlockBytes = 272;
static_assert(kBlockBytes == kRows * 34, "a group's block is its 8 rows' Q8_0 blocks");

// As mxfp4_rows8.h's: `groups` groups of 8 rows into the layout, in place; one group back.
void repack(int64_t n, void* rows, size_t row_bytes, int64_t groups);
void unpack(int64_t n, const void* group, void* dst);

}  // namespace moeflow::kernels::q8_0_rows8

namespace moeflow::kernels {
// The entries that restore GGUF rows (rows8_unpacked.h), as fill_mxfp4_rows8_unpacked.
void fill_q8_0_rows8_unpacked(DotTable& t);
}  // namespace moeflow::kernels
