#pragma once
// Internal to backend/cpu: the kernels of a 32-column-block interleaved type (MXFP4_R8,
// Q8_0_R8: rows8_32 in kernel_table.h) at the levels without one of their own, and its prefill at
// every level: a group is restored to its 8 GGUF rows (Unpack) and the level's kernel of the base
// type runs on them, so the results are the base type's bits by construction.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/kernel_table.h"

namespace moeflow::kernels::rows8_unpacked {

// The thread's buffer for one unpacked group (decode: matvec never nests on a thread).
inline uint8_t* group_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

// Base: the GGUF type; BlockBytes: its bytes per 32 columns; Unpack(n, group, dst) writes the
// group's 8 rows back to back at dst.
template <GgmlType Base, size_t BlockBytes, void (*Unpack)(int64_t, const void*, void*)>
struct Kernels {
  static constexpr int kRows = 8;
  static void rows8(int64_t n, const void* w, size_t, const void* act, float* out) {
    const size_t rb = (size_t)(n / 32) * BlockBytes;
    uint8_t* rows = group_scratch(kRows * rb);
    Unpack(n, w, rows);
    const DotFn fn = dot_fn(Base);
    for (int r = 0; r < kRows; ++r) fn(n, rows + r * rb, act, 0, 1, out + r);
  }
  static void pack8(int64_t n, const void* w, size_t, void* dst) { Unpack(n, w, dst); }
  static void tile8(int64_t n, const void* packed, const void* act, size_t act_stride, int nt,
                    float* out) {
    const size_t rb = (size_t)(n / 32) * BlockBytes;
    const DotFn fn = dot_fn(Base);
    float y[kMaxTokens];
    for (int r = 0; r < kRows; ++r) {
      fn(n, static_cast<const uint8_t*>(packed) + r * rb, act, act_stride, nt, y);
      for (int t = 0; t < nt; ++t) out[kRows * t + r] = y[t];
    }
  }
  // Every level's entries for the interleaved type's slot (the level's one-row kernel of Base
  // must be set already): rows past the last whole group are Base rows; whole groups unpacked
  // (decode) or restored once per pass (prefill, any token count: there is no in-place kernel).
  static void fill(DotTable& t, int slot) {
    t.fn[slot] = t.fn[(int)Base];
    t.rows_fn[slot] = rows8;
    t.rows[slot] = kRows;
    t.rows_any_length[slot] = true;
    t.pack8[slot] = pack8;
    t.tile8[slot] = tile8;
    t.packed8_block_bytes[slot] = kRows * BlockBytes;
  }
};

}  // namespace moeflow::kernels::rows8_unpacked
