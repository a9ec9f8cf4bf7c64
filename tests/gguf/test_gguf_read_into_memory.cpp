// GgufFile::read_into_memory: the copy of a model in anonymous memory that the engine reads a
// model that fits from. Same metadata and bytes as the mapping; the page-cache hints leave it
// alone (MADV_DONTNEED on anonymous memory would zero the weights); a file rewritten since it
// was opened is refused by name.
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace moeflow {
namespace {

using test::TempDir;

// A file of several MiB (past one 2 MiB huge page and one 8 MiB read), random bytes.
std::string write_model(const std::string& path, uint32_t seed) {
  std::mt19937 rng(seed);
  GgufWriter w(32);
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set("k.strs", GgufValue::make_string_array({"<s>", "</s>", "a"}));
  for (int k = 0; k < 3; ++k) {
    std::vector<uint8_t> data((size_t{4} << 20) + 4 * 1000 * (size_t)k);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    w.add_tensor("t" + std::to_string(k), GgmlType::F32, {(int64_t)data.size() / 4}, data.data(),
                 data.size());
  }
  w.write(path);
  return path;
}

TEST(GgufReadIntoMemory, HoldsTheSameMetadataAndBytesAsTheMapping) {
  TempDir dir;
  auto mapped = GgufFile::open(write_model(dir.file("m.gguf"), 1));
  const auto copy = mapped->read_into_memory();
  EXPECT_FALSE(mapped->in_anonymous_memory());
  EXPECT_TRUE(copy->in_anonymous_memory());
  EXPECT_EQ(copy->path(), mapped->path());
  EXPECT_EQ(copy->get_string("general.architecture"), "llama");
  EXPECT_EQ(copy->get_string_array("k.strs"), mapped->get_string_array("k.strs"));
  ASSERT_EQ(copy->tensors().size(), mapped->tensors().size());
  EXPECT_EQ(copy->file_size(), mapped->file_size());
  for (const GgufTensorInfo& t : mapped->tensors()) {
    const GgufTensorInfo& c = copy->tensor(t.name);
    EXPECT_EQ(c.nbytes, t.nbytes);
    EXPECT_NE(copy->data(c), mapped->data(t)) << t.name << ": the copy is not the mapping";
    EXPECT_EQ(std::memcmp(copy->data(c), mapped->data(t), t.nbytes), 0) << t.name;
  }
}

TEST(GgufReadIntoMemory, PageCacheHintsLeaveTheCopyIntact) {
  TempDir dir;
  auto mapped = GgufFile::open(write_model(dir.file("m.gguf"), 2));
  const auto copy = mapped->read_into_memory();
  const GgufTensorInfo& t = copy->tensor("t1");
  const std::vector<uint8_t> want(copy->data(t), copy->data(t) + t.nbytes);
  // What the offloading paths call on the file; on anonymous memory MADV_DONTNEED would
  // replace the weights with zero pages.
  copy->release(t);
  copy->prefetch(t);
  copy->advise_random();
  copy->drop_mapped(copy->data(t), t.nbytes);
  EXPECT_EQ(std::memcmp(copy->data(t), want.data(), want.size()), 0);
}

TEST(GgufReadIntoMemory, AFileRewrittenSinceItWasOpenedIsRefusedByName) {
  TempDir dir;
  const std::string path = write_model(dir.file("m.gguf"), 3);
  auto mapped = GgufFile::open(path);
  // Another model written over it (a new inode; the mapping keeps the old one): other sizes.
  std::filesystem::remove(path);
  {
    GgufWriter w(32);
    w.set("general.architecture", GgufValue::make_string("llama"));
    const std::vector<uint8_t> data(4096, 7);
    w.add_tensor("t0", GgmlType::F32, {1024}, data.data(), data.size());
    w.write(path);
  }
  try {
    (void)mapped->read_into_memory();
    FAIL() << "a rewritten file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("changed on disk"), std::string::npos) << e.what();
  }
}

TEST(GgufReadIntoMemory, ASameSizeRewriteWithAnotherHeaderIsRefused) {
  TempDir dir;
  const std::string path = write_model(dir.file("m.gguf"), 4);
  auto mapped = GgufFile::open(path);
  const uint64_t n = mapped->file_size();
  // The same length, another header: flip a byte of the metadata in a new file of that name.
  std::vector<char> bytes(n);
  {
    std::ifstream in(path, std::ios::binary);
    in.read(bytes.data(), (std::streamsize)n);
  }
  bytes[40] ^= 0x55;  // inside the first key (the header is 24 bytes)
  std::filesystem::remove(path);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), (std::streamsize)n);
  }
  try {
    (void)mapped->read_into_memory();
    FAIL() << "a file with another header was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("header differs"), std::string::npos) << e.what();
  }
}

TEST(GgufReadIntoMemory, AnInMemoryImageCopiesToo) {
  TempDir dir;
  const std::string path = write_model(dir.file("m.gguf"), 5);
  std::vector<char> bytes(std::filesystem::file_size(path));
  std::ifstream(path, std::ios::binary).read(bytes.data(), (std::streamsize)bytes.size());
  auto image = GgufFile::open_bytes("image", bytes.data(), bytes.size());
  const auto copy = image->read_into_memory();
  const GgufTensorInfo& t = copy->tensor("t2");
  EXPECT_EQ(std::memcmp(copy->data(t), image->data(image->tensor("t2")), t.nbytes), 0);
  EXPECT_FALSE(copy->in_anonymous_memory());  // a heap copy, as the image itself
}

TEST(GgufReadIntoMemory, ATransformRewritesTensorsAndTheirTypesInTheCopyOnly) {
  TempDir dir;
  auto mapped = GgufFile::open(write_model(dir.file("m.gguf"), 6));
  const GgufTensorInfo& t1 = mapped->tensor("t1");
  const std::vector<uint8_t> before(mapped->data(t1), mapped->data(t1) + t1.nbytes);
  std::atomic<int> calls{0};
  const auto copy = mapped->read_into_memory([&](const GgufTensorInfo& t, uint8_t* bytes) {
    ++calls;
    if (t.name != "t1") return t.type;
    for (uint64_t i = 0; i < t.nbytes; ++i) bytes[i] ^= 0x5A;
    return GgmlType::I32;  // the same 4 bytes per element
  });
  EXPECT_EQ(calls.load(), 3);
  const GgufTensorInfo& c1 = copy->tensor("t1");
  EXPECT_EQ(c1.type, GgmlType::I32);
  EXPECT_EQ(t1.type, GgmlType::F32) << "the mapping's table is its own";
  for (uint64_t i = 0; i < c1.nbytes; ++i)
    ASSERT_EQ(copy->data(c1)[i], before[i] ^ 0x5A) << "byte " << i;
  EXPECT_EQ(std::memcmp(mapped->data(t1), before.data(), before.size()), 0);
  for (const char* name : {"t0", "t2"}) {
    const GgufTensorInfo& c = copy->tensor(name);
    EXPECT_EQ(c.type, GgmlType::F32);
    EXPECT_EQ(std::memcmp(copy->data(c), mapped->data(mapped->tensor(name)), c.nbytes), 0);
  }
}

TEST(GgufReadIntoMemory, ATransformsFailureOrSizeChangeIsReportedByName) {
  TempDir dir;
  auto mapped = GgufFile::open(write_model(dir.file("m.gguf"), 7));
  try {
    mapped->read_into_memory([](const GgufTensorInfo& t, uint8_t*) -> GgmlType {
      if (t.name == "t2") fail("cannot rewrite {}", t.name);
      return t.type;
    });
    FAIL() << "the transform's error was lost";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot rewrite t2"), std::string::npos) << e.what();
  }
  try {
    mapped->read_into_memory([](const GgufTensorInfo& t, uint8_t*) {
      return t.name == "t0" ? GgmlType::F16 : t.type;  // half the bytes
    });
    FAIL() << "a type of another size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'t0'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeflow
