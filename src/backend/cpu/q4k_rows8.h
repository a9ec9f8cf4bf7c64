#pragma once
// Internal to backend/cpu: the Q4_K_R8 layout (Q4_K with every group of 8 rows interleaved block
// by block), which the CPU backend rewrites Q4_K weights into at load (repack_for_cpu). The
// GGUF layout keeps each row's 144-byte blocks together, so a kernel that computes 8 rows at
// once reads 8 streams and decodes each row's packed 6-bit scales on its own; here one 1152-byte
// block holds all 8 rows' 256 columns, laid out for 512-bit (and 256-bit) lanes:
//
//   [0, 1024)    quants, 16 chunks of 64 bytes; chunk 2j + p (sub-block j, half p): byte 8r + b
//                holds row r's column 32j + 16p + b in its low nibble and column 32j + 16p + 8 + b
//                in its high one. One broadcast of the token's 8 activation bytes meets all 8
//                rows, and int32 lanes 2r and 2r + 1 of a product belong to row r.
//   [1024, 1088) byte 8r + j: row r's sub-block j scale (6 bits), and bits 4-5 of its min in
//                bits 6-7.
//   [1088, 1120) byte e: the low 4 bits of min e (e = 8r + j) in its low nibble, of min e + 32 in
//                its high nibble.
//   [1120, 1136) the 8 rows' d (fp16), [1136, 1152) their dmin (fp16).
//
// The same bytes as the 8 rows in GGUF layout (8 x 144), so a tensor is repacked in place. Rows
// past a matrix's last whole group keep the GGUF layout (and the Q4_K kernels).
//
// Every kernel computes, per row, token and block, the exact int32 sums S (scale x quant x
// activation) and M (min x pair of bsums) and takes the same two float steps as the Q4_K
// kernels of q4k_exact_*.cpp, so Q4_K_R8 gives the bits of Q4_K at the AVX2 and AVX-512 levels
// (and at the scalar level, whose own Q4_K kernel sums in a different order, the bits those
// levels give).
#include <cstddef>
#include <cstdint>

namespace moeflow::kernels::q4k_rows8 {

constexpr int kRows = 8;
constexpr size_t kQuantBytes = 1024, kScaleOff = 1024, kMinOff = 1088, kDOff = 1120,
                 kDminOff = 1136, kBlockBytes = 1152;
static_assert(kBlockBytes == kRows * 144, "a group's block is its 8 rows' Q4_K blocks");

// Row r's sub-block j scale (6 bits) and min (6 bits) in a group block g: the scalar decoding
// the scalar kernel and AVX2's prefill packing (pack8_q4_k_r8) share.
inline int scale_of(const uint8_t* g, int r, int j) { return g[kScaleOff + 8 * r + j] & 63; }
inline int min_of(const uint8_t* g, int r, int j) {
  const int e = 8 * r + j;
  const int low = e < 32 ? g[kMinOff + e] & 0x0F : g[kMinOff + e - 32] >> 4;
  return low | ((g[kScaleOff + e] >> 6) << 4);
}

// The vpshufb controls of the AVX2 and AVX-512 kernels, the same 16 bytes in every 128-bit lane
// (a lane holds rows 2L and 2L + 1 of the scale bytes; odd bytes 0x80 zero-extend to int16):
// scale[j]: int16 lanes 4r .. 4r + 3 = row r's scale byte of sub-block j; min[h]: int16 lane
// 4r + k = row r's min byte of sub-block 4h + k. A constant table, built at compile time.
struct LaneControls {
  int8_t scale[8][16];
  int8_t min[2][16];
};
inline constexpr LaneControls kLaneControls = [] {
  LaneControls c{};
  for (int b = 0; b < 16; ++b) {
    for (int j = 0; j < 8; ++j)
      c.scale[j][b] = (b & 1) ? (int8_t)0x80 : (int8_t)((b < 8 ? 0 : 8) + j);
    for (int h = 0; h < 2; ++h)
      c.min[h][b] = (b & 1) ? (int8_t)0x80 : (int8_t)(8 * (b / 8) + 4 * h + (b % 8) / 2);
  }
  return c;
}();

// Rewrites `groups` groups of 8 Q4_K rows of n columns (rows back to back, row_bytes apart)
// into the layout above, in place.
void repack(int64_t n, void* rows, size_t row_bytes, int64_t groups);

}  // namespace moeflow::kernels::q4k_rows8
