// What the coverage-guided GGUF fuzzer (tests/fuzz/fuzz_gguf.cpp, docs/fuzzing.md) found: files
// whose header made moeflow allocate far more than the file holds. Each is now refused with one
// moeflow::Error naming the file, before the allocation. Also replays every committed
// reproducer of tests/fuzz/regressions/gguf through the same steps as the fuzz target.
#include <filesystem>
#include <string>

#include "core/error.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf_test_util.h"
#include "tokenizer/tokenizer.h"

namespace moeflow {
namespace {

using test::Bytes;
using test::kF32;

template <typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::unique_ptr<GgufFile> open(const Bytes& b, const char* name = "mem.gguf") {
  return GgufFile::open_bytes(name, b.b.data(), b.b.size());
}

// n_layers MoE layers whose gate/up/down tensors ([1, 1, n_expert] F32) all point at the same
// 4 * n_expert data bytes.
Bytes shared_expert_data(int n_layers, int n_expert) {
  Bytes b;
  b.header(3, 3 * static_cast<uint64_t>(n_layers), 1);
  b.kv_str("general.architecture", "llama");
  for (int l = 0; l < n_layers; ++l)
    for (const char* p : {"gate", "up", "down"})
      b.tensor("blk." + std::to_string(l) + ".ffn_" + p + "_exps.weight",
               {1, 1, uint64_t(n_expert)}, kF32, 0);
  b.pad(32);
  b.fill(4 * static_cast<uint64_t>(n_expert), 0);
  return b;
}

// Found by fuzz_gguf (heap bound): tensors may point at the same bytes, so a 49 KB file with
// 200 layers of 1024 experts over one 4 KB block made build_expert_index allocate 30 MB, and
// the index grows with the square of the file size (a 1 MB file: ~100 GB).
TEST(GgufFuzzRegressions, TensorsSharingBytesAreRefused) {
  const Bytes b = shared_expert_data(200, 1024);
  expect_error([&] { open(b, "shared.gguf"); },
               "shared.gguf: tensors 'blk.0.ffn_gate_exps.weight' (bytes ");
  expect_error([&] { open(b, "shared.gguf"); }, ") overlap");

  // Any overlap is refused; back to back is fine.
  for (uint64_t off_b : {uint64_t{0}, uint64_t{32}, uint64_t{64}}) {
    Bytes t;
    t.header(3, 2, 0);
    t.tensor("a", {16}, kF32, 0);  // 64 bytes: 0..64
    t.tensor("b", {8}, kF32, off_b);
    t.pad(32);
    t.fill(128, 1);
    if (off_b < 64) {
      expect_error([&] { open(t); }, "tensors 'a' (bytes ");
    } else {
      auto f = open(t);
      EXPECT_EQ(f->tensor("b").file_offset, f->tensor("a").file_offset + 64);
    }
  }
}

// Found by fuzz_gguf (heap bound): its 2144-byte input with llama.block_count = 655363 made the
// expert index allocate 26 MB of empty layers (tests/fuzz/regressions/gguf/
// block_count_655363.gguf); 1000000 in a 128-byte file gave 40 MB, and a tensor named
// blk.999999.x did the same.
TEST(GgufFuzzRegressions, LayerCountIsBounded) {
  const std::string found = test::read_bytes(
      std::string(MOEFLOW_SOURCE_DIR) + "/tests/fuzz/regressions/gguf/block_count_655363.gguf");
  ASSERT_EQ(found.size(), 2144u);
  auto fz = GgufFile::open_bytes("block_count_655363.gguf", found.data(), found.size());
  expect_error([&] { build_expert_index(*fz); },
               "block_count_655363.gguf: metadata key 'llama.block_count' = 655363 is out of range "
               "0..65536");

  Bytes b;
  b.header(3, 0, 2);
  b.kv_str("general.architecture", "llama");
  b.kv_u32("llama.block_count", 1000000);
  b.pad(32);
  auto f = open(b, "layers.gguf");
  expect_error([&] { build_expert_index(*f); },
               "layers.gguf: metadata key 'llama.block_count' = 1000000 is out of range 0..65536");

  Bytes t;
  t.header(3, 1, 0);
  t.tensor("blk.999999.attn_norm.weight", {8}, kF32, 0);
  t.pad(32);
  t.fill(32, 0);
  auto g = open(t, "name.gguf");
  expect_error([&] { build_expert_index(*g); },
               "name.gguf: a tensor of layer 999999 (a model has at most 65536 layers)");

  // Real layer counts (and vocabulary-only files that declare one) are unaffected.
  Bytes ok;
  ok.header(3, 0, 2);
  ok.kv_str("general.architecture", "llama");
  ok.kv_u32("llama.block_count", 160);
  ok.pad(32);
  EXPECT_EQ(build_expert_index(*open(ok)).layers.size(), 160u);
}

// Every committed reproducer: the same steps as fuzz_gguf, and only moeflow::Error may come out.
TEST(GgufFuzzRegressions, CommittedReproducersGiveErrorsOnly) {
  const std::filesystem::path dir =
      std::filesystem::path(MOEFLOW_SOURCE_DIR) / "tests/fuzz/regressions/gguf";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string bytes = test::read_bytes(e.path().string());
    ++n;
    try {
      auto f = GgufFile::open_bytes(e.path().filename().string(), bytes.data(), bytes.size());
      for (const char* suffix : {"weight", "low"}) {
        try {
          build_expert_index(*f, suffix);
        } catch (const Error&) {}
      }
      if (f->has("tokenizer.ggml.model")) Tokenizer::from_gguf(*f)->encode("Hello <s>", true, true);
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(e.path().filename().string()), std::string::npos)
          << err.what();
    }
  }
  EXPECT_GE(n, 1) << "no reproducers in " << dir;
}

}  // namespace
}  // namespace moeflow
