// Files written byte by byte (not by GgufWriter): a GGUF v2 file, and one malformed file per
// validation rule, each of which must be refused with a moeflow::Error naming the file.
#include "core/error.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf_test_util.h"

namespace moeflow {
namespace {

using test::Bytes;
using test::kF32;
using test::kQ8_0;
using test::TempDir;

TEST(GgufHandmade, ReadsVersion2) {
  TempDir dir;
  Bytes b;
  b.header(2, 2, 4);
  b.kv_str("general.architecture", "llama");
  b.kv_u32("llama.block_count", 1);
  b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(3).str("<unk>").str("a").str("bc");
  b.str("k.f32s").u32(9).u32(6).u64(2).put(1.25f).put(-8.0f);
  b.tensor("w", {3, 2}, kF32, 0);
  b.tensor("q", {32}, kQ8_0, 32);
  b.pad(32);
  const size_t data_start = b.b.size();
  for (int k = 0; k < 6; ++k) b.put(static_cast<float>(k) * 0.5f);
  b.pad(32);
  b.fill(34, 0x5a);
  const std::string path = dir.file("v2.gguf");
  test::write_bytes(path, b.b);

  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.block_count"), 1);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"<unk>", "a", "bc"}));
  EXPECT_EQ(f->get_float_array("k.f32s"), (std::vector<float>{1.25f, -8.0f}));
  ASSERT_EQ(f->tensors().size(), 2u);
  const auto& w = f->tensor("w");
  EXPECT_EQ(w.file_offset, data_start);
  EXPECT_EQ(w.nbytes, 24u);
  EXPECT_EQ(w.rows(), 2);
  EXPECT_EQ(w.n_elements(), 6);
  const float* wf = reinterpret_cast<const float*>(f->data(w));
  for (int k = 0; k < 6; ++k) EXPECT_EQ(wf[k], k * 0.5f);
  const auto& q = f->tensor("q");
  EXPECT_EQ(q.file_offset, data_start + 32);
  EXPECT_EQ(q.nbytes, 34u);
  EXPECT_EQ(f->data(q)[33], 0x5a);
}

// Opens `bytes` as a file and expects an Error whose message names the file and contains
// `needle`.
void expect_refused(const std::string& bytes, const std::string& needle) {
  TempDir dir;
  const std::string path = dir.file("bad.gguf");
  test::write_bytes(path, bytes);
  try {
    auto f = GgufFile::open(path);
    build_expert_index(*f);
    FAIL() << "accepted; expected an error containing: " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

// A one-tensor file whose tensor info is given by the caller.
std::string one_tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                       uint64_t offset, uint64_t data_bytes = 64) {
  Bytes b;
  b.header(3, 1, 0);
  b.tensor(name, dims, type, offset);
  b.pad(32);
  b.fill(data_bytes, 1);
  return b.b;
}

TEST(GgufHandmade, RefusesEachMalformation) {
  expect_refused("GGUX" + std::string(20, '\0'), "not a GGUF file");
  expect_refused(Bytes().header(1, 0, 0).b, "version 1");
  expect_refused(Bytes().header(7, 0, 0).b, "unsupported GGUF version 7");
  expect_refused(Bytes().header(0x03000000, 0, 0).b, "big-endian");
  expect_refused("GGUF", "truncated");
  expect_refused(Bytes().header(3, 0, 1).str("k").u32(8).u64(1ull << 62).b, "string length");
  expect_refused(Bytes().header(3, 0, 1).str("arr").u32(9).u32(4).u64(1ull << 61).b,
                 "array of 2305843009213693952 UINT32 items cannot fit");
  expect_refused(Bytes().header(3, 0, 1).str("arr").u32(9).u32(13).u64(0).b,
                 "unknown array element type id 13");
  expect_refused(Bytes().header(3, 0, 1).str("k").u32(99).u32(0).b, "unknown value type id 99");
  expect_refused(Bytes().header(3, 0, 1).str("k").u32(7).u8(2).b, "invalid bool");
  expect_refused(Bytes().header(3, 0, 1ull << 40).b, "metadata count");
  expect_refused(Bytes().header(3, 1ull << 40, 0).b, "tensor count");
  {
    Bytes deep;
    deep.header(3, 0, 1).str("deep").u32(9);
    for (int k = 0; k < 20; ++k) deep.u32(9).u64(1);
    deep.u32(0).u64(0);
    expect_refused(deep.b, "nested deeper");
  }
  expect_refused(Bytes().header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2).b,
                 "duplicate metadata key 'a'");
  expect_refused(Bytes().header(3, 0, 1).kv_u32("general.alignment", 48).b, "general.alignment");
  expect_refused(Bytes().header(3, 0, 1).kv_u32("general.alignment", 0).b, "general.alignment");
  expect_refused(Bytes().header(3, 0, 1).kv_str("general.alignment", "x").b, "general.alignment");

  expect_refused(one_tensor("blk.0.x", {4, 1, 1, 1, 1}, kF32, 0), "n_dims 5");
  expect_refused(one_tensor("blk.0.x", {}, kF32, 0), "n_dims 0");
  expect_refused(one_tensor("blk.0.x", {4, 0}, kF32, 0), "dimension 1 = 0");
  expect_refused(one_tensor("blk.0.x", {static_cast<uint64_t>(-3)}, kF32, 0), "dimension 0 = -3");
  expect_refused(one_tensor("blk.0.x", {1ull << 32, 1ull << 32}, kF32, 0), "overflows");
  expect_refused(one_tensor("blk.0.x", {1ull << 40, 1ull << 22}, kF32, 0), "overflows");
  expect_refused(one_tensor("blk.0.x", {4}, 77, 0),
                 "unknown tensor type id 77 in tensor 'blk.0.x'");
  expect_refused(one_tensor("blk.0.x", {48}, kQ8_0, 0), "not a multiple of the Q8_0 block size 32");
  expect_refused(one_tensor("blk.0.x", {32}, kF32, 0, 100), "past the end of the file");
  expect_refused(one_tensor("blk.0.x", {4}, kF32, 1ull << 63), "past the end of the file");
  expect_refused(one_tensor("blk.0.x", {4}, kF32, 0xFFFFFFFFFFFFFFE0ull), "overflows");
  expect_refused(one_tensor("blk.0.x", {4}, kF32, 16), "not a multiple of the alignment 32");
  {
    Bytes b;
    b.header(3, 2, 0).tensor("t", {4}, kF32, 0).tensor("t", {4}, kF32, 32).pad(32).fill(64, 0);
    expect_refused(b.b, "duplicate tensor name 't'");
  }
}

TEST(GgufHandmade, ToleratesRepeatedIdenticalKey) {
  // llama.cpp's ggml-vocab-dbrx.gguf repeats general.file_type with the same value.
  TempDir dir;
  const std::string path = dir.file("dup.gguf");
  test::write_bytes(path, Bytes().header(3, 0, 3).kv_u32("a", 1).kv_u32("b", 2).kv_u32("a", 1).b);
  auto f = GgufFile::open(path);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->get_int("a"), 1);
}

TEST(GgufHandmade, RefusesNonFiles) {
  TempDir dir;
  EXPECT_THROW(GgufFile::open(dir.file("does-not-exist.gguf")), Error);
  EXPECT_THROW(GgufFile::open(dir.file("")), Error);  // a directory
  test::write_bytes(dir.file("empty.gguf"), "");
  EXPECT_THROW(GgufFile::open(dir.file("empty.gguf")), Error);
}

}  // namespace
}  // namespace moeflow
