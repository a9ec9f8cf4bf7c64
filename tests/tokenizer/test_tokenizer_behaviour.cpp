// Round trips, special tokens, BOS handling, end-of-generation ids and the stream decoder on
// real vocabularies (GPT-2 byte-level BPE, Llama SentencePiece, Phi-3 specials); the GLM-4
// pre-tokenizer against llama.cpp's pattern for it.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/tokenizer_test_util.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_vectors.h"

namespace moeflow {
namespace {

const char* const kCorpusFiles[] = {"wikipedia_texts.txt", "github_oss_with_stack_texts.txt",
                                    "arxiv_texts.txt"};

std::string corpus_path(const char* name) {
  return std::string(MOEFLOW_SHARED_DATA) + "/corpus/" + name;
}

// The callers check with MOEFLOW_REQUIRE_PATH that every corpus file is there.
std::vector<std::string> corpus_samples() {
  std::vector<std::string> out;
  for (const char* name : kCorpusFiles) {
    std::ifstream in(corpus_path(name), std::ios::binary);
    EXPECT_TRUE(in) << "cannot read " << corpus_path(name);
    std::string chunk(6000, '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    chunk.resize(static_cast<size_t>(in.gcount()));
    // Cut at a character boundary so the sample is valid UTF-8.
    chunk.resize(unicode::complete_prefix_len(chunk));
    out.push_back(chunk);
  }
  out.push_back("Grüße, 世界! 🦙 emoji 😶‍🌫️ and tabs\t\tand\n\n newlines   end ");
  return out;
}

bool valid_utf8(const std::string& s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t st = pos;
    const uint32_t cp = unicode::decode_one(s, pos);
    if (cp == unicode::kReplacement && s.compare(st, 3, "\xEF\xBF\xBD") != 0) return false;
  }
  return true;
}

class RoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTrip, DecodeOfEncodeIsIdentityAndStreamsValidUtf8) {
  MOEFLOW_REQUIRE_PATH(test::vocab_path(GetParam()));
  for (const char* name : kCorpusFiles) MOEFLOW_REQUIRE_PATH(corpus_path(name));
  auto v = test::load_vocab(GetParam());
  for (const std::string& text : corpus_samples()) {
    const auto ids = v.tok->encode(text, false, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(v.tok->decode(ids), text);
    StreamDecoder sd(*v.tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = sd.push(id);
      EXPECT_TRUE(valid_utf8(part)) << "token " << id;
      streamed += part;
    }
    streamed += sd.flush();
    // The stream keeps SentencePiece's prefix space; decode() drops it.
    const std::string expect = v.tok->model() == "llama" ? " " + text : text;
    EXPECT_EQ(streamed, expect);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, RoundTrip,
                         ::testing::Values("gpt-2", "llama-spm", "deepseek-llm", "dbrx"));

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  MOEFLOW_REQUIRE_PATH(test::vocab_path("llama-spm"));
  auto v = test::load_vocab("llama-spm");
  // U+1F999 is not in the Llama vocabulary: it becomes four <0xXX> byte tokens.
  const auto ids = v.tok->encode("🦙", false, false);
  std::vector<int32_t> bytes;
  for (int32_t id : ids)
    if (v.tok->token_type(id) == TokenType::Byte) bytes.push_back(id);
  ASSERT_EQ(bytes.size(), 4u);
  StreamDecoder sd(*v.tok);
  EXPECT_EQ(sd.push(bytes[0]), "");
  EXPECT_EQ(sd.push(bytes[1]), "");
  EXPECT_EQ(sd.push(bytes[2]), "");
  EXPECT_EQ(sd.push(bytes[3]), "🦙");
  // An unfinished character at the end is replaced, not dropped silently or held forever.
  EXPECT_EQ(sd.push(bytes[0]), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");
  // A new character arriving before the old one finished flushes the broken bytes.
  sd.push(bytes[0]);
  EXPECT_EQ(sd.push(*v.tok->find_token("A")),
            "\xEF\xBF\xBD"
            "A");
}

TEST(Specials, ParsedOnlyWhenAsked) {
  MOEFLOW_REQUIRE_PATH(test::vocab_path("phi-3"));
  auto v = test::load_vocab("phi-3");
  const auto user = v.tok->find_token("<|user|>");
  const auto end = v.tok->find_token("<|end|>");
  ASSERT_TRUE(user && end);
  const std::string text = "<|user|>\nHello<|end|>";
  const auto parsed = v.tok->encode(text, true, true);
  ASSERT_GE(parsed.size(), 4u);
  EXPECT_EQ(parsed[0], v.tok->bos_id());
  EXPECT_EQ(parsed[1], *user);
  EXPECT_EQ(parsed.back(), *end);
  const auto spelt = v.tok->encode(text, false, false);
  for (int32_t id : spelt) EXPECT_NE(v.tok->token_type(id), TokenType::Control);
  EXPECT_EQ(v.tok->decode(spelt), text);
  EXPECT_TRUE(v.tok->is_eog(*end));
  EXPECT_TRUE(v.tok->is_eog(v.tok->eos_id()));
  EXPECT_FALSE(v.tok->is_eog(*user));
  // Control tokens print only on request.
  EXPECT_EQ(v.tok->token_to_piece(*end), "");
  EXPECT_EQ(v.tok->token_to_piece(*end, true), "<|end|>");
}

TEST(Specials, BosFollowsTheVocabulary) {
  MOEFLOW_REQUIRE_PATH(test::vocab_path("llama-spm"));
  MOEFLOW_REQUIRE_PATH(test::vocab_path("gpt-2"));
  auto spm = test::load_vocab("llama-spm");
  auto gpt2 = test::load_vocab("gpt-2");
  EXPECT_TRUE(spm.tok->add_bos_token());
  EXPECT_EQ(spm.tok->encode("Hi", true).front(), spm.tok->bos_id());
  const auto with_bos = spm.tok->encode("Hi", true);
  EXPECT_EQ(spm.tok->encode("Hi", false),
            std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()));
  // GPT-2 does not ask for a BOS token.
  EXPECT_FALSE(gpt2.tok->add_bos_token());
  EXPECT_EQ(gpt2.tok->encode("Hi", true), gpt2.tok->encode("Hi", false));
  EXPECT_TRUE(spm.tok->encode("", false).empty());
}

TEST(Robustness, InvalidUtf8AndOutOfRangeIds) {
  MOEFLOW_REQUIRE_PATH(test::vocab_path("gpt-2"));
  auto v = test::load_vocab("gpt-2");
  const std::string bad = "ok \xFF\xC3 \xE2\x82 end";
  const auto ids = v.tok->encode(bad, false, false);
  EXPECT_FALSE(ids.empty());
  EXPECT_THROW(v.tok->token_to_piece(-1), Error);
  EXPECT_THROW(v.tok->token_to_piece(v.tok->n_vocab()), Error);
  // A very long run of one class must not recurse per character.
  const std::string longword(200000, 'a');
  EXPECT_FALSE(v.tok->encode(longword, false, false).empty());
}

}  // namespace
}  // namespace moeflow

namespace moeflow {
namespace {

// GLM-4 / GLM-4.5 files name their pre-tokenizer "glm4" (older ones "chatglm-bpe"); llama.cpp
// splits them with its CHATGLM4 pattern, written below as llama.cpp spells it (contractions'
// case in character classes). There are no glm4 vectors in the shared data, so the check is that
// moeflow's "glm4" splits exactly as that pattern does on llama.cpp's test inputs and real text.
TEST(PreTokenizerGlm, SplitsAsLlamaCppsChatGlm4Pattern) {
  const PreTokenizer glm("glm4", /*strict=*/true);
  EXPECT_TRUE(glm.known());
  EXPECT_TRUE(glm.ignore_merges());
  EXPECT_FALSE(PreTokenizer("chatglm-bpe", true).ignore_merges());
  const Regex chatglm4(
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
      "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  std::vector<std::string> inputs = corpus_samples();
  const std::string inp = test::vocab_dir() + "/ggml-vocab-llama-bpe.gguf.inp";
  if (std::filesystem::exists(inp))
    for (const auto& v :
         load_vocab_vectors(inp, test::vocab_dir() + "/ggml-vocab-llama-bpe.gguf.out"))
      inputs.push_back(v.input);
  inputs.push_back("IT'S ALL CAPS'LL 'RE 12345 don'T");
  ASSERT_GT(inputs.size(), 10u);
  for (const std::string& text : inputs) {
    const std::vector<uint32_t> cps = unicode::decode(text);
    std::vector<std::pair<size_t, size_t>> pieces;
    chatglm4.split(cps.data(), 0, cps.size(), pieces);
    std::vector<std::string> want;
    for (auto [b, e] : pieces)
      want.push_back(unicode::encode(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e)));
    EXPECT_EQ(glm.split(text), want) << text;
  }
}

}  // namespace
}  // namespace moeflow
