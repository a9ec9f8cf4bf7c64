#pragma once
// A GGUF metadata value of any of the 13 GGUF value types (arrays nest).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moeflow {

enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

const char* gguf_type_name(GgufType t);

struct GgufValue {
  GgufType type = GgufType::UINT32;
  // Scalars are held widened; the original width is kept in `type` so a round trip through
  // the writer reproduces the file byte for byte.
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  GgufType elem_type = GgufType::UINT8;  // for ARRAY
  std::vector<GgufValue> arr;            // for ARRAY

  static GgufValue make_u32(uint32_t v);
  static GgufValue make_i32(int32_t v);
  static GgufValue make_u64(uint64_t v);
  static GgufValue make_f32(float v);
  static GgufValue make_bool(bool v);
  static GgufValue make_string(std::string v);
  static GgufValue make_array(GgufType elem, std::vector<GgufValue> items);
  static GgufValue make_string_array(const std::vector<std::string>& items);
  static GgufValue make_f32_array(const std::vector<float>& items);
  static GgufValue make_i32_array(const std::vector<int32_t>& items);

  bool is_integer() const;  // any of the integer types (and BOOL)
  bool is_float() const;
  int64_t as_int() const;   // throws moeflow::Error if not an integer type
  double as_float() const;  // integers convert
};

}  // namespace moeflow
