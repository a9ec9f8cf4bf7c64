// The tokenizers of the 2026 families against llama.cpp's test vectors: Qwen3.5/3.6 (byte-level
// BPE, pre-tokenizer "qwen35") and Gemma 4 (tokenizer model "gemma4": BPE over characters with
// "▁" spaces and <0xXX> byte fallback). The vocabularies and vectors are llama.cpp's
// models/ggml-vocab-{qwen35,gemma-4}.gguf{,.inp,.out}, which scripts/setup-deps.sh extracts from
// the llama-cpp-python sdist into .deps/llamacpp_vocab (missing: skipped, and failed under CI).
// Every input must encode to llama.cpp's ids, and llama.cpp's ids must decode back to the input
// (so decoding is checked on ids our encoder did not produce), token by token too.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <ostream>

#include "support/tokenizer_test_util.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_vectors.h"

namespace moeflow {
namespace {

struct Vectors2026 {
  const char* name;   // ggml-vocab-NAME.gguf
  const char* model;  // its tokenizer.ggml.model
  const char* pre;    // the pre-tokenizer moeflow reports
};

// gtest prints the parameter by its vocabulary name (not as 24 raw bytes).
void PrintTo(const Vectors2026& v, std::ostream* os) { *os << v.name; }

class Vocab2026 : public ::testing::TestWithParam<Vectors2026> {};

// Each vocabulary is read once for the tests below (Gemma 4's: 262k tokens, 515k merges).
const Tokenizer& vocab2026_tokenizer(const std::string& name) {
  static std::map<std::string, test::LoadedVocab> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    test::LoadedVocab v;
    v.file = GgufFile::open(test::deps_vocab_path(name));
    v.tok = Tokenizer::from_gguf(*v.file);
    it = loaded.emplace(name, std::move(v)).first;
  }
  return *it->second.tok;
}

std::string vocab2026_text_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder sd(tok);
  std::string s;
  for (int32_t id : ids) s += sd.push(id);
  return s + sd.flush();
}

TEST_P(Vocab2026, LlamaCppVectorsEncodeAndDecode) {
  const std::string p = test::deps_vocab_path(GetParam().name);
  MOEFLOW_REQUIRE_PATH(p);
  MOEFLOW_REQUIRE_PATH(p + ".inp");
  MOEFLOW_REQUIRE_PATH(p + ".out");
  const Tokenizer* tok = &vocab2026_tokenizer(GetParam().name);
  EXPECT_EQ(tok->model(), GetParam().model);
  EXPECT_EQ(tok->pre(), GetParam().pre);
  EXPECT_EQ(tok->warning(), "");
  const auto vecs = load_vocab_vectors(p + ".inp", p + ".out");
  EXPECT_GT(vecs.size(), 40u);
  const auto r = check_vocab_vectors(*tok, vecs);
  EXPECT_EQ(r.passed, r.total);
  for (size_t i : r.failed)
    ADD_FAILURE() << "#" << i << " '" << vecs[i].input << "'\n expected "
                  << format_ids(vecs[i].expected) << "\n got      "
                  << format_ids(tok->encode(vecs[i].input, false, false));
  for (size_t i = 0; i < vecs.size(); ++i) {
    EXPECT_EQ(tok->decode(vecs[i].expected), vecs[i].input) << "#" << i;
    EXPECT_EQ(vocab2026_text_of(*tok, vecs[i].expected), vecs[i].input) << "#" << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, Vocab2026,
                         ::testing::Values(Vectors2026{"qwen35", "gpt2", "qwen35"},
                                           Vectors2026{"gemma-4", "gemma4", "gemma4"}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// llama.cpp's vectors do not tell qwen35 from Qwen2's pattern (all 50 give the same ids under
// both); combining marks after a precomposed letter do. The ids are llama.cpp's
// (llama-cpp-python 0.3.36, vocab_only, on this file; on a copy relabelled tokenizer.ggml.pre =
// qwen2 it gives 45351 5498 53839 968 11401 5498 136 96 83).
TEST(Vocab2026Qwen35, CombiningMarksStayInTheWord) {
  const std::string p = test::deps_vocab_path("qwen35");
  MOEFLOW_REQUIRE_PATH(p);
  const Tokenizer& tok = vocab2026_tokenizer("qwen35");
  const std::string text = "Ti\u00ea\u0301ng Vi\u00ea\u0323t";
  EXPECT_EQ(tok.encode(text, false, false),
            (std::vector<int32_t>{45351, 132515, 968, 11401, 132840, 83}));
  EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text);
}

// Round trips on real text (the shared corpus), special tokens and the end-of-turn ids.
TEST(Vocab2026Gemma4, CorpusRoundTripsSpecialsAndEndOfTurn) {
  const std::string p = test::deps_vocab_path("gemma-4");
  MOEFLOW_REQUIRE_PATH(p);
  const std::string corpus = std::string(MOEFLOW_SHARED_DATA) + "/corpus/wikipedia_texts.txt";
  MOEFLOW_REQUIRE_PATH(corpus);
  const Tokenizer* tok = &vocab2026_tokenizer("gemma-4");
  std::ifstream in(corpus, std::ios::binary);
  std::string text(20000, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(unicode::complete_prefix_len(text.substr(0, static_cast<size_t>(in.gcount()))));
  text += " Grüße, 世界! 🦙\t\tand\n\n\n newlines   end ";
  const auto ids = tok->encode(text, false, false);
  EXPECT_LT(ids.size(), text.size() / 3);  // merged, not spelt out byte by byte
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(vocab2026_text_of(*tok, ids), text);
  // A character outside the vocabulary goes through byte fallback and comes back whole;
  // invalid UTF-8 comes back byte for byte.
  for (const std::string& s : {std::string("\xF0\x9F\x9B\xB8 x"), std::string("a\xFF b\xE2")}) {
    const auto e = tok->encode(s, false, false);
    EXPECT_EQ(tok->decode(e), s);
  }
  // BOS always (Gemma 4), control tokens only when asked, the turn's end stops generation.
  const auto turn = tok->encode("<|turn>user\nHi<turn|>", true, true);
  ASSERT_GE(turn.size(), 4u);
  EXPECT_EQ(turn.front(), tok->bos_id());
  EXPECT_EQ(tok->token_text(turn[1]), "<|turn>");
  EXPECT_EQ(tok->token_text(turn.back()), "<turn|>");
  EXPECT_TRUE(tok->is_eog(turn.back()));
  EXPECT_TRUE(tok->is_eog(*tok->find_token("<|tool_response>")));
  EXPECT_TRUE(tok->is_eog(tok->eos_id()));
  EXPECT_FALSE(tok->is_eog(turn[1]));
  const auto plain = tok->encode("<|turn>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok->decode(plain), "<|turn>");
}

}  // namespace
}  // namespace moeflow
