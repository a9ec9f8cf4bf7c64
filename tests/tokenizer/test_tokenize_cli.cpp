// `moeflow tokenize` end to end: vector check exit codes and prompt printing.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/tokenizer_test_util.h"

namespace moeflow {
namespace {

int run(const std::string& args, std::string* out = nullptr) {
  const std::string cmd = std::string(MOEFLOW_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::string o;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.append(buf, n);
  const int st = pclose(p);
  if (out) *out = o;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(TokenizeCli, VectorsPassAndMismatchesFail) {
  const std::string d = test::vocab_dir();
  MOEFLOW_REQUIRE_PATH(test::vocab_path("phi-3"));
  MOEFLOW_REQUIRE_PATH(test::vocab_path("gpt-2"));
  std::string out;
  EXPECT_EQ(run("tokenize -m " + d + "/ggml-vocab-phi-3.gguf --vectors " + d +
                    "/ggml-vocab-phi-3.gguf.inp " + d + "/ggml-vocab-phi-3.gguf.out",
                &out),
            0)
      << out;
  EXPECT_NE(out.find("46/46"), std::string::npos) << out;
  // Right inputs, wrong vocabulary: must report mismatches and fail.
  EXPECT_NE(run("tokenize -m " + d + "/ggml-vocab-gpt-2.gguf --vectors " + d +
                    "/ggml-vocab-phi-3.gguf.inp " + d + "/ggml-vocab-phi-3.gguf.out",
                &out),
            0);
  EXPECT_NE(out.find("MISMATCH"), std::string::npos) << out;
}

TEST(TokenizeCli, PromptIdsAndErrors) {
  const std::string d = test::vocab_dir();
  MOEFLOW_REQUIRE_PATH(test::vocab_path("gpt-2"));
  std::string out;
  ASSERT_EQ(run("tokenize -m " + d + "/ggml-vocab-gpt-2.gguf -p 'Hello world'", &out), 0) << out;
  auto v = test::load_vocab("gpt-2");
  EXPECT_EQ(out, std::to_string(v.tok->encode("Hello world")[0]) + " " +
                     std::to_string(v.tok->encode("Hello world")[1]) + "\n");
  EXPECT_NE(run("tokenize -m /nonexistent.gguf -p x", &out), 0);
  EXPECT_NE(out.find("nonexistent"), std::string::npos) << out;
}

}  // namespace
}  // namespace moeflow
