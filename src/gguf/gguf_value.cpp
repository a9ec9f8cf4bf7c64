#include "gguf/gguf_value.h"

#include <limits>

#include "core/error.h"

namespace moeflow {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "UINT8";
    case GgufType::INT8: return "INT8";
    case GgufType::UINT16: return "UINT16";
    case GgufType::INT16: return "INT16";
    case GgufType::UINT32: return "UINT32";
    case GgufType::INT32: return "INT32";
    case GgufType::FLOAT32: return "FLOAT32";
    case GgufType::BOOL: return "BOOL";
    case GgufType::STRING: return "STRING";
    case GgufType::ARRAY: return "ARRAY";
    case GgufType::UINT64: return "UINT64";
    case GgufType::INT64: return "INT64";
    case GgufType::FLOAT64: return "FLOAT64";
  }
  return "UNKNOWN";
}

namespace {

bool is_unsigned(GgufType t) {
  return t == GgufType::UINT8 || t == GgufType::UINT16 || t == GgufType::UINT32 ||
         t == GgufType::UINT64;
}

bool is_signed(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 ||
         t == GgufType::INT64;
}

}  // namespace

GgufValue GgufValue::make_u32(uint32_t v) {
  GgufValue r;
  r.type = GgufType::UINT32;
  r.u = v;
  r.i = v;
  return r;
}

GgufValue GgufValue::make_i32(int32_t v) {
  GgufValue r;
  r.type = GgufType::INT32;
  r.i = v;
  r.u = static_cast<uint64_t>(static_cast<int64_t>(v));
  return r;
}

GgufValue GgufValue::make_u64(uint64_t v) {
  GgufValue r;
  r.type = GgufType::UINT64;
  r.u = v;
  r.i = static_cast<int64_t>(v);
  return r;
}

GgufValue GgufValue::make_f32(float v) {
  GgufValue r;
  r.type = GgufType::FLOAT32;
  r.f = v;
  return r;
}

GgufValue GgufValue::make_bool(bool v) {
  GgufValue r;
  r.type = GgufType::BOOL;
  r.b = v;
  r.u = v ? 1 : 0;
  r.i = v ? 1 : 0;
  return r;
}

GgufValue GgufValue::make_string(std::string v) {
  GgufValue r;
  r.type = GgufType::STRING;
  r.s = std::move(v);
  return r;
}

GgufValue GgufValue::make_array(GgufType elem, std::vector<GgufValue> items) {
  for (size_t k = 0; k < items.size(); ++k)
    if (items[k].type != elem)
      fail("GGUF array of {} has an item {} of type {}", gguf_type_name(elem), k,
           gguf_type_name(items[k].type));
  GgufValue r;
  r.type = GgufType::ARRAY;
  r.elem_type = elem;
  r.arr = std::move(items);
  return r;
}

GgufValue GgufValue::make_string_array(const std::vector<std::string>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(make_string(s));
  return make_array(GgufType::STRING, std::move(v));
}

GgufValue GgufValue::make_f32_array(const std::vector<float>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (float x : items) v.push_back(make_f32(x));
  return make_array(GgufType::FLOAT32, std::move(v));
}

GgufValue GgufValue::make_i32_array(const std::vector<int32_t>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(make_i32(x));
  return make_array(GgufType::INT32, std::move(v));
}

bool GgufValue::is_integer() const {
  return is_unsigned(type) || is_signed(type) || type == GgufType::BOOL;
}

bool GgufValue::is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }

int64_t GgufValue::as_int() const {
  if (type == GgufType::BOOL) return b ? 1 : 0;
  if (is_signed(type)) return i;
  if (is_unsigned(type)) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("GGUF value {} does not fit a signed 64-bit integer", u);
    return static_cast<int64_t>(u);
  }
  fail("GGUF value of type {} is not an integer", gguf_type_name(type));
}

double GgufValue::as_float() const {
  if (is_float()) return f;
  if (type == GgufType::BOOL) return b ? 1.0 : 0.0;
  if (is_signed(type)) return static_cast<double>(i);
  if (is_unsigned(type)) return static_cast<double>(u);
  fail("GGUF value of type {} is not a number", gguf_type_name(type));
}

}  // namespace moeflow
