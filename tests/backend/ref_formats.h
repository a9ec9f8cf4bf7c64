#pragma once
// Test-local float64 decoders for every weight and activation format, written straight from
// the format descriptions so that the kernels are checked against independent code. Each
// element also gets a magnitude bound (|scale part| + |min part|) for error tolerances.
#include <cstdint>
#include <random>
#include <vector>

#include "core/ggml_type.h"
#include "quant/blocks.h"

namespace moeflow::test {

struct RefRow {
  std::vector<double> val;  // decoded element values
  std::vector<double> mag;  // |d*sc*q| + |dmin*m| per element (== |val| without mins)
  std::vector<double> add;  // the additive (minimum) part of each value; 0 without mins
};

// Decodes n elements of weight type t.
RefRow ref_decode(GgmlType t, const void* row, int64_t n);
// Decodes an activation produced by quantize_activation(w, ...).
std::vector<double> ref_decode_activation(GgmlType w, const void* act, int64_t n);
// Q4_1/Q5_1 weights take Q8_1 activations, whose blocks carry a stored sum s (fp16 of d*sum(q))
// that the kernels multiply by the block's minimum: s per 32-block; empty for other types.
std::vector<double> ref_activation_block_sums(GgmlType w, const void* act, int64_t n);

// Random but valid weight bytes: payload bits uniformly random, scale fields set to finite
// values of a sensible range.
std::vector<uint8_t> random_weights(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng);

// One Q4_K row against a Q8_K activation as the exact-sum kernels compute it (q4k_exact_*.cpp,
// q4k_rows8*.cpp): per block S = sum of scale x quant x activation and M = sum of min x (two
// bsums) in integers, then acc = fma(d * ad, S, acc) and acc = fma(-(dmin * ad), M, acc).
float q4k_exact_reference(const BlockQ4_K* w, const BlockQ8_K* a, int64_t nb);

// All weight types the CPU kernels support.
const std::vector<GgmlType>& kernel_types();

}  // namespace moeflow::test
