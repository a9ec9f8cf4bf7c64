// Inputs that the libFuzzer targets (tests/fuzz, docs/fuzzing.md) found to crash the tokenizer
// or the chat template: the committed reproducers of tests/fuzz/regressions/ and hand-made
// cases of the same bugs. Each must now give one moeflow::Error naming what is wrong.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace moeflow {
namespace {

std::string reproducer(const std::string& name) {
  const std::string path = std::string(MOEFLOW_SOURCE_DIR) + "/tests/fuzz/regressions/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "missing reproducer " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs f, which must throw moeflow::Error (nothing else) whose message contains `part`.
template <typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// A SentencePiece vocabulary whose token 3 is typed BYTE with the given text.
std::unique_ptr<GgufFile> spm_vocab_with_byte_token(const std::string& byte_token) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens",
        GgufValue::make_string_array({"<unk>", "<s>", "</s>", byte_token, "a"}));
  w.set("tokenizer.ggml.scores", GgufValue::make_f32_array({0, 0, 0, 0, -1}));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array({2, 3, 3, 6, 1}));
  const std::string path =
      ::testing::TempDir() + "/byte_token_" + std::to_string(::getpid()) + ".gguf";
  w.write(path);
  auto f = GgufFile::open(path);
  std::remove(path.c_str());
  return f;
}

// fuzz_gguf: a BYTE token "<0xK5>" made std::stoi throw std::invalid_argument out of
// Tokenizer::from_gguf (an uncaught exception, not a moeflow::Error).
TEST(TokenizerFuzzRegressions, ByteTokenThatIsNotHexIsRefused) {
  const std::string bytes = reproducer("gguf/byte_token_not_hex.gguf");
  auto f = GgufFile::open_bytes("byte_token_not_hex.gguf", bytes.data(), bytes.size());
  expect_error([&] { Tokenizer::from_gguf(*f); },
               "byte_token_not_hex.gguf: tokenizer.ggml.tokens[248] = '<0xK5>' has token type BYTE "
               "but is not of the form <0xHH>");
}

// The same code read "<0x-1>" as byte -1 and wrote byte_ids_[-1] (outside the 256-entry
// table); "<0x+A>" was accepted as 0x0A.
TEST(TokenizerFuzzRegressions, ByteTokenWithASignIsRefused) {
  for (const char* t : {"<0x-1>", "<0x+A>", "<0x 1>", "<0xA>", "<0x0AB>"}) {
    auto f = spm_vocab_with_byte_token(t);
    expect_error([&] { Tokenizer::from_gguf(*f); },
                 std::string("tokenizer.ggml.tokens[3] = '") + t + "' has token type BYTE");
  }
  // Well-formed byte tokens in either case still load and decode to their byte.
  for (const char* t : {"<0x0A>", "<0x0a>"}) {
    auto f = spm_vocab_with_byte_token(t);
    auto tok = Tokenizer::from_gguf(*f);
    EXPECT_EQ(tok->token_to_piece(3), "\n") << t;
    EXPECT_EQ(tok->encode("\n", false), std::vector<int32_t>({3})) << t;
  }
}

// fuzz_chat_template: an integer literal longer than int64 made std::stoll throw
// std::out_of_range out of the ChatTemplate constructor.
TEST(ChatTemplateFuzzRegressions, IntegerLiteralOutOfRangeIsAnError) {
  const std::string input = reproducer("chat_template/int_literal_out_of_range");
  const std::string source = input.substr(0, input.find('\0'));
  expect_error([&] { ChatTemplate t(source); }, "chat template: integer literal 7777777777");
  expect_error([&] { ChatTemplate t("{{ 9223372036854775808 }}"); },
               "chat template: integer literal 9223372036854775808 is out of range");
  EXPECT_EQ(ChatTemplate("{{ 9223372036854775807 }}").render(nlohmann::ordered_json::object()),
            "9223372036854775807");
  // A float literal too large for a double is inf, as in Python, not an exception.
  EXPECT_EQ(ChatTemplate("{{ " + std::string(400, '9') + ".5 }}")
                .render(nlohmann::ordered_json::object()),
            "inf");
}

}  // namespace
}  // namespace moeflow
