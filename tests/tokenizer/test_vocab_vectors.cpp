// Every llama.cpp test vector (.inp/.out next to a ggml-vocab-*.gguf) must tokenize exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "support/tokenizer_test_util.h"
#include "tokenizer/vocab_vectors.h"

namespace moeflow {
namespace {

namespace fs = std::filesystem;

TEST(VocabVectors, EveryVocabWithVectorsPasses) {
  const std::string dir = test::vocab_dir();
  MOEFLOW_REQUIRE_PATH(dir);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (e.path().extension() != ".gguf") continue;
    if (!fs::exists(p + ".inp") || !fs::exists(p + ".out")) continue;
    auto f = GgufFile::open(p);
    auto tok = Tokenizer::from_gguf(*f);
    const auto vecs = load_vocab_vectors(p + ".inp", p + ".out");
    const auto r = check_vocab_vectors(*tok, vecs);
    std::printf("[ vectors  ] %-40s %zu/%zu\n", e.path().filename().c_str(), r.passed, r.total);
    EXPECT_GT(r.total, 10u) << p;
    EXPECT_EQ(r.passed, r.total) << p;
    for (size_t i : r.failed) {
      ADD_FAILURE() << p << " #" << i << " '" << vecs[i].input << "'\n expected "
                    << format_ids(vecs[i].expected) << "\n got      "
                    << format_ids(tok->encode(vecs[i].input, false, false));
    }
    ++files;
  }
  EXPECT_GE(files, 6);
}

// The DeepSeek tokenizers (deepseek-llm: DeepSeek-MoE / V2(-Lite); deepseek-coder) by name,
// so that their vectors cannot silently drop out of the loop above. Missing data skips the test,
// and fails it under CI=true.
class DeepseekVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepseekVocab, LlamaCppVectorsPass) {
  const std::string p = test::vocab_dir() + "/ggml-vocab-" + GetParam() + ".gguf";
  if (!fs::exists(p) || !fs::exists(p + ".inp") || !fs::exists(p + ".out")) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << "CI=true: missing " << p << " (+ .inp/.out)";
    GTEST_SKIP() << "no " << p;
  }
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), GetParam());
  auto tok = Tokenizer::from_gguf(*f);
  const auto vecs = load_vocab_vectors(p + ".inp", p + ".out");
  const auto r = check_vocab_vectors(*tok, vecs);
  EXPECT_GT(r.total, 40u);
  EXPECT_EQ(r.passed, r.total);
  for (size_t i : r.failed)
    ADD_FAILURE() << "#" << i << " '" << vecs[i].input << "'\n expected "
                  << format_ids(vecs[i].expected) << "\n got      "
                  << format_ids(tok->encode(vecs[i].input, false, false));
}

INSTANTIATE_TEST_SUITE_P(Vectors, DeepseekVocab,
                         ::testing::Values("deepseek-llm", "deepseek-coder"), [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(VocabVectors, LoaderRejectsCountMismatch) {
  const std::string dir = test::vocab_dir();
  MOEFLOW_REQUIRE_PATH(dir);
  // dbrx has 43 inputs, gpt-2 46 lines of ids.
  EXPECT_THROW(
      load_vocab_vectors(dir + "/ggml-vocab-dbrx.gguf.inp", dir + "/ggml-vocab-gpt-2.gguf.out"),
      Error);
  EXPECT_THROW(load_vocab_vectors(dir + "/missing.inp", dir + "/missing.out"), Error);
}

}  // namespace
}  // namespace moeflow
