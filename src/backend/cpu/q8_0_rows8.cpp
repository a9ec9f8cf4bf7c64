// Q8_0_R8 (q8_0_rows8.h): the repacking both ways (8-byte copies), and the table entries of the
// levels without a kernel of their own (rows8_unpacked.h).
#include "backend/cpu/q8_0_rows8.h"

#include <cstring>

#include "backend/cpu/rows8_repack.h"
#include "backend/cpu/rows8_unpacked.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace q8_0_rows8 {

void repack(int64_t n, void* rows, size_t row_bytes, int64_t groups) {
  repack_groups_in_place(n / 32, rows, row_bytes, groups, kBlockBytes,
                         [&](const uint8_t* copy, int64_t i, uint8_t* dst) {
                           for (int r = 0; r < kRows; ++r) {
                             const BlockQ8_0& b =
                                 reinterpret_cast<const BlockQ8_0*>(copy + r * row_bytes)[i];
                             for (int k = 0; k < 4; ++k)
                               std::memcpy(dst + 64 * k + 8 * r, b.qs + 8 * k, 8);
                             std::memcpy(dst + kScaleOff + 2 * r, &b.d, 2);
                           }
                         });
}

void unpack(int64_t n, const void* group, void* dst) {
  const int64_t nb = n / 32;
  const auto* g = static_cast<const uint8_t*>(group);
  for (int r = 0; r < kRows; ++r) {
    BlockQ8_0* row = static_cast<BlockQ8_0*>(dst) + r * nb;
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* src = g + i * kBlockBytes;
      for (int k = 0; k < 4; ++k) std::memcpy(row[i].qs + 8 * k, src + 64 * k + 8 * r, 8);
      std::memcpy(&row[i].d, src + kScaleOff + 2 * r, 2);
    }
  }
}

}  // namespace q8_0_rows8

void fill_q8_0_rows8_unpacked(DotTable& t) {
  rows8_unpacked::Kernels<GgmlType::Q8_0, sizeof(BlockQ8_0), q8_0_rows8::unpack>::fill(t,
                                                                                       kQ80R8Slot);
}

void fill_scalar_q8_0_rows8(DotTable& t) { fill_q8_0_rows8_unpacked(t); }

}  // namespace moeflow::kernels
