#pragma once
// Scalar reference conversions between float and every supported block format. These are the
// ground truth that the SIMD kernels in backend/cpu are tested against.
#include <cstdint>

#include "core/ggml_type.h"

namespace moeflow {

// dst[0..n) = values of n elements of type t at src. n must be a multiple of the block size.
// Throws moeflow::Error for an unsupported type.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Encode n floats into type t at dst (row_bytes(t, n) bytes). Throws if t cannot be produced.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// True if quantize_row supports t.
bool can_quantize(GgmlType t);

// True if dequantize_row supports t (a superset of TypeTraits::supported: it includes Q8_K).
bool can_dequantize(GgmlType t);

}  // namespace moeflow
