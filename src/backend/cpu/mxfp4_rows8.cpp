// MXFP4_R8 (mxfp4_rows8.h): the repacking both ways, and the table entries of the levels without
// a kernel of their own (rows8_unpacked.h).
#include "backend/cpu/mxfp4_rows8.h"

#include <cstring>

#include "backend/cpu/rows8_repack.h"
#include "backend/cpu/rows8_unpacked.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace mxfp4_rows8 {
namespace {

// Row r's 8 bytes of a chunk, and of a GGUF block's qs, as little-endian words (byte b of the
// word is column b): the repacking is 64-bit mask-and-shift work, 8 rows x ~8 operations per
// block, which prefill pays once per pass and row block (mxfp4_rows8.h).
constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL;
uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// GGUF qs[0..7] (columns 0-7 low, 16-23 high) = a, qs[8..15] (8-15, 24-31) = b ->
// chunk words lo (columns 0-7 low, 8-15 high) and hi (16-23, 24-31).
void repack_block(const BlockMXFP4* const* rows, int64_t i, uint8_t* dst) {
  for (int r = 0; r < kRows; ++r) {
    const BlockMXFP4& blk = rows[r][i];
    const uint64_t a = load64(blk.qs), b = load64(blk.qs + 8);
    store64(dst + kLowOff + 8 * r, (a & kLow) | ((b & kLow) << 4));
    store64(dst + kHighOff + 8 * r, ((a >> 4) & kLow) | (b & ~kLow));
    dst[kScaleOff + r] = blk.e;
  }
}

void unpack_block(const uint8_t* src, BlockMXFP4* const* rows, int64_t i) {
  for (int r = 0; r < kRows; ++r) {
    BlockMXFP4& blk = rows[r][i];
    const uint64_t lo = load64(src + kLowOff + 8 * r), hi = load64(src + kHighOff + 8 * r);
    store64(blk.qs, (lo & kLow) | ((hi & kLow) << 4));
    store64(blk.qs + 8, ((lo >> 4) & kLow) | (hi & ~kLow));
    blk.e = src[kScaleOff + r];
  }
}

}  // namespace

void repack(int64_t n, void* rows, size_t row_bytes, int64_t groups) {
  repack_groups_in_place(n / 32, rows, row_bytes, groups, kBlockBytes,
                         [&](const uint8_t* copy, int64_t i, uint8_t* dst) {
                           const BlockMXFP4* src[kRows];
                           for (int r = 0; r < kRows; ++r)
                             src[r] = reinterpret_cast<const BlockMXFP4*>(copy + r * row_bytes);
                           repack_block(src, i, dst);
                         });
}

void unpack(int64_t n, const void* group, void* dst) {
  const int64_t nb = n / 32;
  BlockMXFP4* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = static_cast<BlockMXFP4*>(dst) + r * nb;
  const auto* g = static_cast<const uint8_t*>(group);
  for (int64_t i = 0; i < nb; ++i) unpack_block(g + i * kBlockBytes, rows, i);
}

}  // namespace mxfp4_rows8

void fill_mxfp4_rows8_unpacked(DotTable& t) {
  rows8_unpacked::Kernels<GgmlType::MXFP4, sizeof(BlockMXFP4), mxfp4_rows8::unpack>::fill(
      t, kMxfp4R8Slot);
}

void fill_scalar_mxfp4_rows8(DotTable& t) { fill_mxfp4_rows8_unpacked(t); }

}  // namespace moeflow::kernels
