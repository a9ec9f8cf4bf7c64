#include "gguf/gguf_selftest.h"

#include "gguf/gguf_writer.h"

namespace moeflow {
namespace {

GgufValue scalar(GgufType t, uint64_t u, int64_t i, double f = 0) {
  GgufValue v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

}  // namespace

void write_gguf_selftest(const std::string& path) {
  GgufWriter w(64);
  w.set_string("general.architecture", "selftest");
  w.set_string("general.name", "moeflow gguf selftest");
  w.set("test.u8", scalar(GgufType::UINT8, 200, 200));
  w.set("test.i8", scalar(GgufType::INT8, 0, -100));
  w.set("test.u16", scalar(GgufType::UINT16, 60000, 60000));
  w.set("test.i16", scalar(GgufType::INT16, 0, -30000));
  w.set_u32("test.u32", 4000000000u);
  w.set("test.i32", GgufValue::make_i32(-2000000000));
  w.set_f32("test.f32", 1.5f);
  w.set_bool("test.bool", true);
  w.set_string("test.string", "h\xc3\xa9llo w\xc3\xb6rld");
  w.set("test.u64", GgufValue::make_u64((uint64_t{1} << 63) + 5));
  w.set("test.i64", scalar(GgufType::INT64, 0, -(int64_t{1} << 62) - 3));
  w.set("test.f64", scalar(GgufType::FLOAT64, 0, 0, 3.141592653589793));
  w.set("test.arr_str", GgufValue::make_string_array({"a", "bc", ""}));
  w.set("test.arr_i32", GgufValue::make_i32_array({1, -2, 3}));
  w.set("test.arr_f32", GgufValue::make_f32_array({0.5f, -0.25f}));
  w.set("test.arr_bool", GgufValue::make_array(GgufType::BOOL, {GgufValue::make_bool(true),
                                                                GgufValue::make_bool(false)}));
  w.set("test.arr_nested",
        GgufValue::make_array(
            GgufType::ARRAY,
            {GgufValue::make_array(GgufType::UINT16, {scalar(GgufType::UINT16, 1, 1),
                                                      scalar(GgufType::UINT16, 2, 2)}),
             GgufValue::make_array(GgufType::UINT16, {scalar(GgufType::UINT16, 3, 3)})}));
  w.set("test.arr_empty", GgufValue::make_array(GgufType::INT64, {}));

  struct Spec {
    const char* name;
    GgmlType type;
    std::vector<int64_t> dims;
  };
  const Spec specs[] = {
      {"t.f32", GgmlType::F32, {3, 2}},     {"t.f16", GgmlType::F16, {8}},
      {"t.q8_0", GgmlType::Q8_0, {64, 2}},  {"t.q4_k", GgmlType::Q4_K, {256, 3, 1}},
      {"t.i8", GgmlType::I8, {5, 1, 1, 2}},
  };
  uint64_t j = 0;
  for (const auto& s : specs) {
    w.add_tensor(s.name, s.type, s.dims, [j](uint8_t* dst, uint64_t n) {
      for (uint64_t k = 0; k < n; ++k) dst[k] = gguf_selftest_byte(j, k);
    });
    ++j;
  }
  w.write(path);
}

}  // namespace moeflow
