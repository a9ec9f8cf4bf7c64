#pragma once
// Internal to backend/cpu: which kernel table is in use.
#include "backend/cpu/kernel_table.h"

namespace moeflow::kernels {

Simd active_simd();  // forced level if any, else the best the CPU supports
Simd best_simd();
// Kernel for weight type w at the active level; throws for a type without one.
DotFn dot_fn(GgmlType w);
// Multi-row kernel matching dot_fn(w) bit for bit, or {nullptr, 0} when there is none.
struct RowsKernel {
  RowsFn fn = nullptr;
  int rows = 0;
  bool any_length = false;  // chooses its own walk by row length: use it for short rows too
  RowsFn fn2 = nullptr;     // optional: two groups of `rows` rows at once (kernel_table.h)
};
RowsKernel rows_fn(GgmlType w);
// The 8-row prefill path matching dot_fn(w) bit for bit, or {} when there is none.
struct Tile8Kernel {
  Pack8Fn pack = nullptr;
  Tile8Fn tile = nullptr;
  size_t block_bytes = 0;  // packed bytes per 256 columns of a group of 8 rows
};
Tile8Kernel tile8_fn(GgmlType w);
// The in-place kernel of an interleaved type (kernel_table.h, groups8), or nullptr.
Tile8Fn groups8_fn(GgmlType w);

}  // namespace moeflow::kernels
