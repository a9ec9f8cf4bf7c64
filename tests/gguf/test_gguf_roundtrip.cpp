// Writer -> reader round trips: every metadata type, several tensor types and ranks, alignment
// 32 and 64, byte-exact data, and re-writing what was read reproduces the file exactly.
#include <cmath>
#include <random>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace moeflow {
namespace {

using test::TempDir;

GgufValue raw(GgufType t, uint64_t u, int64_t i, double f = 0) {
  GgufValue v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

// Expected byte size from first principles (block counts times block bytes).
uint64_t expected_bytes(GgmlType t, const std::vector<int64_t>& dims) {
  uint64_t n = 1;
  for (int64_t d : dims) n *= static_cast<uint64_t>(d);
  switch (t) {
    case GgmlType::F32: return n * 4;
    case GgmlType::F16:
    case GgmlType::BF16: return n * 2;
    case GgmlType::Q8_0: return n / 32 * 34;
    case GgmlType::Q4_0: return n / 32 * 18;
    case GgmlType::Q4_K: return n / 256 * 144;
    case GgmlType::Q6_K: return n / 256 * 210;
    case GgmlType::I32: return n * 4;
    default: ADD_FAILURE() << "no expectation for type"; return 0;
  }
}

std::vector<TensorSpec> make_tensors(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TensorSpec> ts = {
      {"token_embd.weight", GgmlType::F32, {7, 3}, {}},
      {"blk.0.attn_q.weight", GgmlType::F16, {16, 5}, {}},
      {"blk.0.ffn_up_exps.weight", GgmlType::Q8_0, {64, 3, 2}, {}},
      {"blk.0.ffn_down.weight", GgmlType::Q4_K, {512, 2}, {}},
      {"blk.0.x4d", GgmlType::Q4_0, {32, 2, 3, 2}, {}},
      {"output.weight", GgmlType::Q6_K, {256, 1}, {}},
      {"bf16", GgmlType::BF16, {9}, {}},
      {"ids", GgmlType::I32, {1}, {}},
  };
  for (auto& t : ts) {
    t.data.resize(expected_bytes(t.type, t.dims));
    for (auto& b : t.data) b = static_cast<uint8_t>(rng());
  }
  return ts;
}

std::vector<std::pair<std::string, GgufValue>> make_metadata() {
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("general.architecture", GgufValue::make_string("llama"));
  kv.emplace_back("k.u8", raw(GgufType::UINT8, 255, 255));
  kv.emplace_back("k.i8", raw(GgufType::INT8, 0, -128));
  kv.emplace_back("k.u16", raw(GgufType::UINT16, 65535, 65535));
  kv.emplace_back("k.i16", raw(GgufType::INT16, 0, -32768));
  kv.emplace_back("k.u32", GgufValue::make_u32(4294967295u));
  kv.emplace_back("k.i32", GgufValue::make_i32(-2147483647 - 1));
  kv.emplace_back("k.u64", GgufValue::make_u64(18446744073709551615ull));
  kv.emplace_back("k.i64", raw(GgufType::INT64, 0, INT64_MIN));
  kv.emplace_back("k.f32", GgufValue::make_f32(-0.1f));
  kv.emplace_back("k.f64", raw(GgufType::FLOAT64, 0, 0, 1e-300));
  kv.emplace_back("k.bool", GgufValue::make_bool(false));
  kv.emplace_back("k.str", GgufValue::make_string(std::string("with\0nul", 8)));
  kv.emplace_back("k.empty_str", GgufValue::make_string(""));
  kv.emplace_back("k.strs", GgufValue::make_string_array({"<s>", "</s>", "", "\xe2\x96\x81the"}));
  kv.emplace_back("k.f32s", GgufValue::make_f32_array({1.0f, -2.5f, 3e38f}));
  kv.emplace_back("k.i32s", GgufValue::make_i32_array({-1, 0, 7}));
  kv.emplace_back("k.nested",
                  GgufValue::make_array(GgufType::ARRAY, {GgufValue::make_string_array({"a", "b"}),
                                                          GgufValue::make_string_array({}),
                                                          GgufValue::make_string_array({"c"})}));
  kv.emplace_back("k.nested2",
                  GgufValue::make_array(
                      GgufType::ARRAY, {GgufValue::make_array(
                                           GgufType::ARRAY, {GgufValue::make_i32_array({1, 2})})}));
  kv.emplace_back("k.empty_arr", GgufValue::make_array(GgufType::FLOAT64, {}));
  return kv;
}

void expect_same(const GgufValue& a, const GgufValue& b, const std::string& key) {
  ASSERT_EQ(a.type, b.type) << key;
  switch (a.type) {
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
    case GgufType::UINT64: EXPECT_EQ(a.u, b.u) << key; break;
    case GgufType::INT8:
    case GgufType::INT16:
    case GgufType::INT32:
    case GgufType::INT64: EXPECT_EQ(a.i, b.i) << key; break;
    case GgufType::FLOAT32:
      EXPECT_EQ(static_cast<float>(a.f), static_cast<float>(b.f)) << key;
      break;
    case GgufType::FLOAT64: EXPECT_EQ(a.f, b.f) << key; break;
    case GgufType::BOOL: EXPECT_EQ(a.b, b.b) << key; break;
    case GgufType::STRING: EXPECT_EQ(a.s, b.s) << key; break;
    case GgufType::ARRAY:
      ASSERT_EQ(a.elem_type, b.elem_type) << key;
      ASSERT_EQ(a.arr.size(), b.arr.size()) << key;
      for (size_t k = 0; k < a.arr.size(); ++k) expect_same(a.arr[k], b.arr[k], key);
      break;
  }
}

class RoundTrip : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RoundTrip, MetadataAndTensorsSurviveByteExact) {
  const uint64_t alignment = GetParam();
  TempDir dir;
  const std::string path = dir.file("rt.gguf");
  const auto kv = make_metadata();
  const auto ts = make_tensors(static_cast<uint32_t>(alignment));

  GgufWriter w(alignment);
  for (const auto& [k, v] : kv) w.set(k, v);
  for (const auto& t : ts) w.add_tensor(t.name, t.type, t.dims, t.data.data(), t.data.size());
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  w.write(path, [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });

  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  uint64_t total = 0;
  for (const auto& t : ts) total += t.data.size();
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().first, total);
  for (size_t k = 1; k < progress.size(); ++k) EXPECT_GE(progress[k].first, progress[k - 1].first);

  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), alignment);
  // The writer states a non-default alignment as the first key; the rest keep insertion order.
  const size_t extra = alignment == 32 ? 0 : 1;
  ASSERT_EQ(f->metadata().size(), kv.size() + extra);
  if (extra) {
    EXPECT_EQ(f->metadata()[0].key, "general.alignment");
    EXPECT_EQ(f->get_int("general.alignment"), static_cast<int64_t>(alignment));
  }
  for (size_t k = 0; k < kv.size(); ++k) {
    EXPECT_EQ(f->metadata()[k + extra].key, kv[k].first);
    expect_same(f->metadata()[k + extra].value, kv[k].second, kv[k].first);
  }
  EXPECT_EQ(f->get_int("k.u8"), 255);
  EXPECT_EQ(f->get_int("k.i64"), INT64_MIN);
  EXPECT_THROW(f->get_int("k.u64"), Error);  // does not fit int64
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("k.f32")), -0.1f);
  EXPECT_EQ(f->get_string_array("k.strs")[3], "\xe2\x96\x81the");
  EXPECT_EQ(f->get_int_array("k.i32s"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(f->get_float_array("k.f32s")[2], 3e38f);
  EXPECT_FALSE(f->get_bool("k.bool", true));
  EXPECT_EQ(f->get_int("missing", 42), 42);
  EXPECT_THROW(f->get_string("k.u8"), Error);
  EXPECT_THROW(f->get_int("missing"), Error);

  ASSERT_EQ(f->tensors().size(), ts.size());
  uint64_t expect_offset = 0;
  for (size_t k = 0; k < ts.size(); ++k) {
    const GgufTensorInfo& t = f->tensors()[k];
    EXPECT_EQ(t.name, ts[k].name);
    EXPECT_EQ(t.type, ts[k].type);
    EXPECT_EQ(t.dims, ts[k].dims);
    EXPECT_EQ(t.nbytes, ts[k].data.size());
    EXPECT_EQ(t.offset, expect_offset);
    EXPECT_EQ(t.file_offset % alignment, 0u);
    EXPECT_EQ(t.file_offset, f->data_section_offset() + t.offset);
    expect_offset = (expect_offset + t.nbytes + alignment - 1) / alignment * alignment;
    EXPECT_EQ(0, std::memcmp(f->data(t), ts[k].data.data(), t.nbytes)) << t.name;
    EXPECT_EQ(&t, &f->tensor(t.name));
  }
  EXPECT_EQ(f->file_size(), f->data_section_offset() + expect_offset);
  EXPECT_THROW(f->tensor("nope"), Error);

  // Writing back what was read reproduces the file byte for byte.
  GgufWriter w2(alignment);
  for (const auto& m : f->metadata()) w2.set(m.key, m.value);
  for (const auto& t : f->tensors()) w2.add_tensor(t.name, t.type, t.dims, f->data(t), t.nbytes);
  const std::string path2 = dir.file("rt2.gguf");
  w2.write(path2);
  EXPECT_EQ(test::read_bytes(path), test::read_bytes(path2));
}

INSTANTIATE_TEST_SUITE_P(Alignments, RoundTrip, ::testing::Values(32, 64));

TEST(GgufWriter, FailingFillLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("fail.gguf");
  GgufWriter w;
  w.add_tensor("a", GgmlType::F32, {4}, [](uint8_t*, uint64_t) { fail("source exhausted"); });
  try {
    w.write(path);
    FAIL() << "write succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(GgufWriter, RejectsBadTensors) {
  GgufWriter w;
  const float x[4] = {};
  w.add_tensor("a", GgmlType::F32, {4}, x, sizeof(x));
  EXPECT_THROW(w.add_tensor("a", GgmlType::F32, {4}, x, sizeof(x)), Error);  // duplicate
  EXPECT_THROW(w.add_tensor("b", GgmlType::F32, {4}, x, 8), Error);          // wrong size
  EXPECT_THROW(w.add_tensor("c", GgmlType::Q8_0, {16}, [](uint8_t*, uint64_t) {}), Error);
  EXPECT_THROW(w.add_tensor("d", GgmlType::F32, {1, 1, 1, 1, 1}, [](uint8_t*, uint64_t) {}), Error);
  EXPECT_THROW(w.add_tensor("e", GgmlType::F32, {0}, [](uint8_t*, uint64_t) {}), Error);
  EXPECT_THROW(w.add_tensor("f", static_cast<GgmlType>(77), {4}, [](uint8_t*, uint64_t) {}), Error);
  EXPECT_THROW(w.set("general.alignment", GgufValue::make_u32(48)), Error);
}

TEST(GgufWriter, SetReplacesKeyInPlace) {
  TempDir dir;
  GgufWriter w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "x");
  w.write(dir.file("s.gguf"));
  auto f = GgufFile::open(dir.file("s.gguf"));
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "a");
  EXPECT_EQ(f->get_string("a"), "x");
  EXPECT_TRUE(f->tensors().empty());
}

}  // namespace
}  // namespace moeflow
