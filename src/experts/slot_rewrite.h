#pragma once
// How an expert's matrices lie in a host slot once read: as in the file, or rewritten on arrival
// into a layout the compute backend reads faster (today the CPU's rows-in-lanes layouts, wired
// by runtime/cpu_repack.h: the same rewrite a model read into memory gets at load). The loader
// rewrites a matrix on its I/O worker right after the matrix's last byte arrived and before the
// matrix is marked ready, so compute never sees a half-rewritten matrix, and the provider hands
// out its views with the type the rewrite gives. Only for slots in host memory.
#include <cstdint>
#include <functional>

#include "core/ggml_type.h"

namespace moeflow {

struct SlotRewrite {
  // The type a matrix of `type` with `rows` rows has in its slot: `type` itself when it is not
  // rewritten.
  std::function<GgmlType(GgmlType type, int64_t rows)> type_in_slot;
  // Rewrites one matrix (`rows` x `cols` of `type`, at `data`) in place into type_in_slot's
  // layout; called only when that differs from `type`.
  std::function<void(GgmlType type, uint8_t* data, int64_t cols, int64_t rows)> rewrite;

  explicit operator bool() const { return static_cast<bool>(type_in_slot); }
  GgmlType slot_type(GgmlType type, int64_t rows) const {
    return type_in_slot ? type_in_slot(type, rows) : type;
  }
};

}  // namespace moeflow
