// The grammar constraint over real vocabularies (../shared/data): at every byte of a sample
// output, the mask equals the brute-force reference (a token is allowed exactly when its whole
// byte string continues the grammar, an end-of-generation token exactly when the output is
// complete), allows() agrees with it, and a sampler under the constraint writes valid JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "grammar/grammar_constraint.h"
#include "grammar/json_grammar.h"
#include "grammar/json_schema.h"
#include "sampling/sampler.h"
#include "support/tokenizer_test_util.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "tags": {"type": "array", "items": {"enum": ["a", "bé", "☃"]}, "maxItems": 4},
    "size": {"type": "number"},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "tags", "ok"]})";

// A valid output with multi-byte characters inside strings and whitespace between tokens.
const char* kSample = R"({"name": "Zoë ☃ 𝄞\"x", "tags": ["bé","☃"], "size": -1.5e3, "ok": true})";

// Puts a constraint at `prefix` by accepting, at each position, the longest token whose bytes
// come next (single bytes exist in both vocabularies: byte fallback / byte-level BPE).
using ByBytes = std::unordered_map<std::string, int32_t>;

ByBytes tokens_by_bytes(const TokenVocab& v) {
  ByBytes by_bytes;
  for (size_t id = 0; id < v.size(); ++id)
    if (!v.bytes((int32_t)id).empty() && !v.is_eog((int32_t)id))
      by_bytes.emplace(v.bytes((int32_t)id), (int32_t)id);
  return by_bytes;
}

void feed(GrammarConstraint& c, const TokenVocab& v, const ByBytes& by_bytes,
          const std::string& prefix) {
  for (size_t p = 0; p < prefix.size();) {
    size_t len = std::min(prefix.size() - p, v.max_depth());
    for (; len > 0; --len) {
      auto it = by_bytes.find(prefix.substr(p, len));
      if (it != by_bytes.end() && c.allows(it->second)) {
        c.accept(it->second);
        break;
      }
    }
    ASSERT_GT(len, 0u) << "no token continues at byte " << p;
    p += len;
  }
}

void check_masks(const std::string& vocab_name) {
  MOEFLOW_REQUIRE_PATH(test::vocab_path(vocab_name));
  auto loaded = test::load_vocab(vocab_name);
  auto vocab = TokenVocab::from_tokenizer(*loaded.tok);
  ASSERT_FALSE(vocab->eog().empty());
  auto g = json_schema_grammar(ojson::parse(kSchema));
  const std::string sample = kSample;
  const ByBytes by_bytes = tokens_by_bytes(*vocab);
  size_t n_checked = 0;
  for (size_t len = 0; len <= sample.size(); len += 1) {
    GrammarConstraint c(g, vocab);
    feed(c, *vocab, by_bytes, sample.substr(0, len));
    if (testing::Test::HasFatalFailure()) return;
    // The reference: a separate matcher fed the same bytes, every token walked on its own.
    GrammarMatcher ref(g);
    const auto at = ref.walk(ref.start(), sample.substr(0, len));
    ASSERT_NE(at, GrammarMatcher::kDead);
    const std::vector<uint64_t> bits = c.allowed_bits();
    std::vector<float> logits(vocab->size() + 3, 0.0f);  // a model may have padding rows
    const size_t n_allowed = c.mask(logits);
    size_t n_ref = 0;
    for (size_t id = 0; id < vocab->size(); ++id) {
      const std::string& b = vocab->bytes((int32_t)id);
      const bool want = vocab->is_eog((int32_t)id)
                            ? ref.accepting(at)
                            : !b.empty() && ref.walk(at, b) != GrammarMatcher::kDead;
      const bool got = (bits[id / 64] >> (id % 64)) & 1;
      n_ref += want;
      ASSERT_EQ(got, want) << vocab_name << " token " << id << " '" << b << "' after '"
                           << sample.substr(0, len) << "'";
      ASSERT_EQ(c.allows((int32_t)id), want) << "allows() disagrees for token " << id;
      ASSERT_EQ(std::isinf(logits[id]), !want) << "masked logit of token " << id;
    }
    for (size_t id = vocab->size(); id < logits.size(); ++id) EXPECT_TRUE(std::isinf(logits[id]));
    EXPECT_EQ(n_allowed, n_ref);
    EXPECT_GT(n_ref, 0u);
    ++n_checked;
  }
  EXPECT_EQ(n_checked, sample.size() + 1);
}

TEST(TokenMask, EqualsBruteForceOnSentencePieceWithByteFallback) { check_masks("llama-spm"); }
TEST(TokenMask, EqualsBruteForceOnByteLevelBpe) { check_masks("gpt-2"); }

TEST(TokenMask, TrieHoldsEveryTokenOnceInPreorder) {
  TokenVocab v({"ab", "a", "", "b", "abc", "a", "x"}, {2});
  ASSERT_EQ(v.trie_tokens().size(), 6u);  // "" (2) is the end-of-generation token, not in the trie
  std::vector<std::string> path;
  std::vector<std::string> seen(7);
  for (const auto& n : v.trie()) {
    path.resize(n.depth - 1);
    std::string s;
    for (const std::string& p : path) s += p;
    s += (char)n.byte;
    path.push_back(std::string(1, (char)n.byte));
    for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) seen[v.trie_tokens()[k]] = s;
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"ab", "a", "", "b", "abc", "a", "x"}));
  EXPECT_EQ(v.trie().size(), 5u);  // a, ab, abc, b, x
  EXPECT_EQ(v.trie()[0].end, 3u);  // "a" spans a, ab, abc
}

// Sampling from random logits under a schema whose outputs are bounded: every run ends with the
// grammar complete, and the text parses as JSON with the schema's shape.
TEST(TokenMask, SamplerUnderTheConstraintWritesValidJson) {
  MOEFLOW_REQUIRE_PATH(test::vocab_path("llama-spm"));
  auto loaded = test::load_vocab("llama-spm");
  auto vocab = TokenVocab::from_tokenizer(*loaded.tok);
  auto g = json_schema_grammar(ojson::parse(R"({
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"},
                   "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
                   "inner": {"type": "object", "properties": {"z": {"type": "null"}},
                             "required": ["z"]}},
    "required": ["color", "n", "flags", "inner"], "additionalProperties": false})"));
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> logits(vocab->size());
  for (uint64_t seed = 0; seed < 6; ++seed) {
    SamplerParams sp;
    sp.seed = seed;
    sp.temperature = seed % 2 ? 1.0f : 0.0f;  // greedy and sampled
    sp.top_k = seed % 3 ? 0 : 40;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    Sampler sampler(sp);
    GrammarConstraint c(g, vocab);
    sampler.set_constraint(&c);
    std::string out;
    std::vector<int32_t> history;
    for (int i = 0; i < 2000 && !c.done(); ++i) {
      for (float& l : logits) l = noise(rng);
      const int32_t id = sampler.sample(logits, history);
      history.push_back(id);
      if (vocab->is_eog(id)) break;
      out += vocab->bytes(id);
    }
    ASSERT_TRUE(c.complete()) << "seed " << seed << ": " << out;
    const ojson j = ojson::parse(out);
    EXPECT_TRUE(j["color"] == "red" || j["color"] == "green" || j["color"] == "blue") << out;
    EXPECT_TRUE(j["n"].is_number_integer()) << out;
    EXPECT_LE(j["flags"].size(), 3u) << out;
    EXPECT_TRUE(j["inner"]["z"].is_null()) << out;
    EXPECT_EQ(j.size(), 4u) << out;
  }
}

}  // namespace
}  // namespace moeflow
