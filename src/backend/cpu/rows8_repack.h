#pragma once
// Internal to backend/cpu: the walk every 8-row interleaved layout's repacking shares
// (q4k_rows8, mxfp4_rows8, q8_0_rows8): each group of 8 rows is copied aside, then rewritten in
// place block by block (a group's interleaved blocks take exactly its rows' bytes).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace moeflow::kernels {

// For `groups` groups of 8 rows (rows back to back, row_bytes apart, nb blocks each):
// write_block(copy, i, dst) writes block i of the group from the copy of its 8 GGUF rows (row r at
// copy + r * row_bytes) to dst = the group's start + i * block_bytes.
template <class WriteBlock>
void repack_groups_in_place(int64_t nb, void* rows, size_t row_bytes, int64_t groups,
                            size_t block_bytes, WriteBlock write_block) {
  std::vector<uint8_t> copy(8 * row_bytes);
  auto* p = static_cast<uint8_t*>(rows);
  for (int64_t g = 0; g < groups; ++g, p += copy.size()) {
    std::memcpy(copy.data(), p, copy.size());
    for (int64_t i = 0; i < nb; ++i) write_block(copy.data(), i, p + i * block_bytes);
  }
}

}  // namespace moeflow::kernels
