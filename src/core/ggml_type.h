#pragma once
// Tensor element types, numbered exactly as in the GGUF file format (ggml_type), so the number
// read from a file is the enum value.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moeflow {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  // moeflow's own in-memory layouts, never in a file (is_known_type is false for them): the
  // CPU backend repacks some weights at load into layouts its kernels read faster
  // (backend/cpu/matmul.h, repack_for_cpu). Q4_K_R8: Q4_K with every group of 8 rows
  // interleaved block by block (docs/kernels.md), the same bytes per row. MXFP4_R8, Q8_0_R8:
  // MXFP4 and Q8_0 the same way, 8 rows' 32-column blocks side by side.
  Q8_0_R8 = 1008,
  Q4_K_R8 = 1012,
  MXFP4_R8 = 1039,
};

struct TypeTraits {
  const char* name;    // "Q4_K"
  int64_t block_size;  // elements per block (1 for plain types)
  size_t type_size;    // bytes per block
  bool supported;      // moeflow can dequantize and compute with it
};

// Traits of a known type; throws moeflow::Error for an id that is no ggml type.
const TypeTraits& type_traits(GgmlType t);
// True when `id` names a ggml type at all (supported or not): the types a GGUF file may hold,
// so not moeflow's in-memory layouts (Q4_K_R8, MXFP4_R8, Q8_0_R8).
bool is_known_type(uint32_t id);
// Bytes taken by `n` elements of type t (n must be a multiple of the block size).
size_t row_bytes(GgmlType t, int64_t n);
const char* type_name(GgmlType t);
// Case-insensitive "q4_k" -> Q4_K; nullopt if unknown.
std::optional<GgmlType> type_from_name(std::string_view name);

}  // namespace moeflow
