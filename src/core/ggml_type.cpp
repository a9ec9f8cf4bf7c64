#include "core/ggml_type.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"

namespace moeflow {
namespace {

struct Entry {
  GgmlType type;
  TypeTraits traits;
};

constexpr Entry kTypes[] = {
    {GgmlType::F32, {"F32", 1, 4, true}},
    {GgmlType::F16, {"F16", 1, 2, true}},
    {GgmlType::Q4_0, {"Q4_0", 32, 18, true}},
    {GgmlType::Q4_1, {"Q4_1", 32, 20, true}},
    {GgmlType::Q5_0, {"Q5_0", 32, 22, true}},
    {GgmlType::Q5_1, {"Q5_1", 32, 24, true}},
    {GgmlType::Q8_0, {"Q8_0", 32, 34, true}},
    {GgmlType::Q8_1, {"Q8_1", 32, 36, false}},
    {GgmlType::Q2_K, {"Q2_K", 256, 84, true}},
    {GgmlType::Q3_K, {"Q3_K", 256, 110, true}},
    {GgmlType::Q4_K, {"Q4_K", 256, 144, true}},
    {GgmlType::Q5_K, {"Q5_K", 256, 176, true}},
    {GgmlType::Q6_K, {"Q6_K", 256, 210, true}},
    {GgmlType::Q8_K, {"Q8_K", 256, 292, false}},
    {GgmlType::IQ2_XXS, {"IQ2_XXS", 256, 66, false}},
    {GgmlType::IQ2_XS, {"IQ2_XS", 256, 74, false}},
    {GgmlType::IQ3_XXS, {"IQ3_XXS", 256, 98, false}},
    {GgmlType::IQ1_S, {"IQ1_S", 256, 50, false}},
    {GgmlType::IQ4_NL, {"IQ4_NL", 32, 18, true}},
    {GgmlType::IQ3_S, {"IQ3_S", 256, 110, false}},
    {GgmlType::IQ2_S, {"IQ2_S", 256, 82, false}},
    {GgmlType::IQ4_XS, {"IQ4_XS", 256, 136, true}},
    {GgmlType::I8, {"I8", 1, 1, false}},
    {GgmlType::I16, {"I16", 1, 2, false}},
    {GgmlType::I32, {"I32", 1, 4, false}},
    {GgmlType::I64, {"I64", 1, 8, false}},
    {GgmlType::F64, {"F64", 1, 8, false}},
    {GgmlType::IQ1_M, {"IQ1_M", 256, 56, false}},
    {GgmlType::BF16, {"BF16", 1, 2, true}},
    {GgmlType::TQ1_0, {"TQ1_0", 256, 54, false}},
    {GgmlType::TQ2_0, {"TQ2_0", 256, 66, false}},
    {GgmlType::MXFP4, {"MXFP4", 32, 17, true}},
    {GgmlType::Q4_K_R8, {"Q4_K_R8", 256, 144, true}},
    {GgmlType::MXFP4_R8, {"MXFP4_R8", 32, 17, true}},
    {GgmlType::Q8_0_R8, {"Q8_0_R8", 32, 34, true}},
};

bool in_memory_only(GgmlType t) {
  return t == GgmlType::Q4_K_R8 || t == GgmlType::MXFP4_R8 || t == GgmlType::Q8_0_R8;
}

const Entry* lookup(uint32_t id) {
  for (const auto& e : kTypes)
    if ((uint32_t)e.type == id) return &e;
  return nullptr;
}

}  // namespace

bool is_known_type(uint32_t id) {
  const Entry* e = lookup(id);
  return e != nullptr && !in_memory_only(e->type);
}

const TypeTraits& type_traits(GgmlType t) {
  const Entry* e = lookup((uint32_t)t);
  if (!e) fail("unknown tensor type id {}", (uint32_t)t);
  return e->traits;
}

const char* type_name(GgmlType t) {
  const Entry* e = lookup((uint32_t)t);
  return e ? e->traits.name : "UNKNOWN";
}

size_t row_bytes(GgmlType t, int64_t n) {
  const TypeTraits& tr = type_traits(t);
  if (n % tr.block_size != 0)
    fail("{} elements is not a multiple of the {} block size {}", n, tr.name, tr.block_size);
  return (size_t)(n / tr.block_size) * tr.type_size;
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  std::string up(name);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& e : kTypes)
    if (up == e.traits.name && !in_memory_only(e.type)) return e.type;
  return std::nullopt;
}

}  // namespace moeflow
