// MXFP4_R8 (mxfp4_rows8.h): the repacking both ways, and the kernels of the levels without one
// of their own, which restore a group's GGUF rows and run the level's MXFP4 kernel on them.
#include "backend/cpu/mxfp4_rows8.h"

#include <cstring>
#include <vector>

#include "backend/cpu/dispatch.h"
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

// The thread's buffer for one unpacked group (rows8_unpacked: matvec never nests on a thread).
uint8_t* group_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

}  // namespace

void repack(int64_t n, void* rows, size_t row_bytes, int64_t groups) {
  const int64_t nb = n / 32;
  std::vector<uint8_t> copy((size_t)kRows * row_bytes);
  auto* p = static_cast<uint8_t*>(rows);
  for (int64_t gi = 0; gi < groups; ++gi, p += copy.size()) {
    std::memcpy(copy.data(), p, copy.size());
    const BlockMXFP4* src[kRows];
    for (int r = 0; r < kRows; ++r)
      src[r] = reinterpret_cast<const BlockMXFP4*>(copy.data() + (size_t)r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) repack_block(src, i, p + i * kBlockBytes);
  }
}

void unpack(int64_t n, const void* group, void* dst) {
  const int64_t nb = n / 32;
  BlockMXFP4* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = static_cast<BlockMXFP4*>(dst) + r * nb;
  const auto* g = static_cast<const uint8_t*>(group);
  for (int64_t i = 0; i < nb; ++i) unpack_block(g + i * kBlockBytes, rows, i);
}

void rows8_unpacked(int64_t n, const void* w, size_t, const void* act, float* out) {
  const size_t rb = (size_t)(n / 32) * sizeof(BlockMXFP4);
  uint8_t* rows = group_scratch(kRows * rb);
  unpack(n, w, rows);
  const DotFn fn = dot_fn(GgmlType::MXFP4);
  for (int r = 0; r < kRows; ++r) fn(n, rows + r * rb, act, 0, 1, out + r);
}

void pack8_unpack(int64_t n, const void* w, size_t, void* dst) { unpack(n, w, dst); }

void tile8_unpacked(int64_t n, const void* packed, const void* act, size_t act_stride, int nt,
                    float* out) {
  const size_t rb = (size_t)(n / 32) * sizeof(BlockMXFP4);
  const DotFn fn = dot_fn(GgmlType::MXFP4);
  float y[kMaxTokens];
  for (int r = 0; r < kRows; ++r) {
    fn(n, static_cast<const uint8_t*>(packed) + r * rb, act, act_stride, nt, y);
    for (int t = 0; t < nt; ++t) out[kRows * t + r] = y[t];
  }
}

}  // namespace mxfp4_rows8

// Every level: rows past the last whole group are MXFP4 rows; whole groups unpacked (decode)
// or restored once per pass (prefill, any token count: there is no in-place kernel).
void fill_mxfp4_rows8_unpacked(DotTable& t) {
  const int k = kMxfp4R8Slot;
  t.fn[k] = t.fn[(int)GgmlType::MXFP4];
  t.rows_fn[k] = mxfp4_rows8::rows8_unpacked;
  t.rows[k] = mxfp4_rows8::kRows;
  t.rows_any_length[k] = true;
  t.pack8[k] = mxfp4_rows8::pack8_unpack;
  t.tile8[k] = mxfp4_rows8::tile8_unpacked;
  t.packed8_block_bytes[k] = mxfp4_rows8::kBlockBytes;
}

void fill_scalar_mxfp4_rows8(DotTable& t) { fill_mxfp4_rows8_unpacked(t); }

}  // namespace moeflow::kernels
