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
};
RowsKernel rows_fn(GgmlType w);

}  // namespace moeflow::kernels
