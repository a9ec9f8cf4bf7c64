// The regex engine and Unicode tables behind the pre-tokenizers.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace moeflow {
namespace {

using unicode::GeneralCategory;

TEST(Unicode, Categories) {
  EXPECT_EQ(unicode::category('A'), GeneralCategory::Lu);
  EXPECT_EQ(unicode::category(0x0439), GeneralCategory::Ll);   // й
  EXPECT_EQ(unicode::category(0x4E16), GeneralCategory::Lo);   // 世
  EXPECT_EQ(unicode::category(0x00BD), GeneralCategory::No);   // ½
  EXPECT_EQ(unicode::category(0x0663), GeneralCategory::Nd);   // Arabic-Indic 3
  EXPECT_EQ(unicode::category(0x3002), GeneralCategory::Po);   // 。
  EXPECT_EQ(unicode::category(0x1F999), GeneralCategory::So);  // 🦙
  EXPECT_EQ(unicode::category(0x200D), GeneralCategory::Cf);   // ZWJ
  EXPECT_EQ(unicode::category(0x0301), GeneralCategory::Mn);
  EXPECT_EQ(unicode::category(0x110000), GeneralCategory::Cn);
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_TRUE(unicode::is_whitespace(0x85));
  EXPECT_FALSE(unicode::is_whitespace(0x1C));  // Python's isspace says yes; Unicode does not
  EXPECT_FALSE(unicode::is_whitespace(0x200B));
}

TEST(Unicode, Utf8DecodeRejectsMalformed) {
  // overlong '/', surrogate, truncated 3-byte, stray continuation
  const auto cps = unicode::decode(
      "\xC0\xAF"
      "\xED\xA0\x80"
      "a\xE2\x82"
      "b");
  ASSERT_EQ(cps.size(), 9u);
  for (size_t i : {0u, 1u, 2u, 3u, 4u, 6u, 7u}) EXPECT_EQ(cps[i], unicode::kReplacement) << i;
  EXPECT_EQ(cps[5], uint32_t('a'));
  EXPECT_EQ(unicode::encode(unicode::decode("h\xC3\xA9 \xF0\x9F\xA6\x99")),
            "h\xC3\xA9 \xF0\x9F\xA6\x99");
  EXPECT_EQ(unicode::complete_prefix_len("ab\xF0\x9F\xA6"), 2u);
  EXPECT_EQ(unicode::complete_prefix_len("ab\xF0\x9F\xA6\x99"), 6u);
  EXPECT_EQ(unicode::complete_prefix_len("ab\xC3"), 2u);
}

TEST(Unicode, ByteLevelAlphabetIsABijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = unicode::byte_to_cp(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(unicode::cp_to_byte(cp), b);
  }
  EXPECT_EQ(unicode::byte_to_cp(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(unicode::byte_to_cp('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(unicode::byte_to_cp('a'), uint32_t('a'));
}

std::vector<std::string> split(const Regex& re, const std::string& s) {
  const auto cps = unicode::decode(s);
  std::vector<std::pair<size_t, size_t>> parts;
  re.split(cps.data(), 0, cps.size(), parts);
  std::vector<std::string> out;
  for (auto [b, e] : parts)
    out.push_back(unicode::encode(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e)));
  return out;
}

TEST(Regex, BacktrackingLookaheadAndOrderedAlternation) {
  // \s+(?!\S) leaves the last space for the following word: "a   b" -> "a","  "," b"
  Regex gpt2(PreTokenizer::patterns_for("gpt-2")[0]);
  EXPECT_EQ(split(gpt2, "a   b"), (std::vector<std::string>{"a", "  ", " b"}));
  EXPECT_EQ(split(gpt2, "I'll 12x"), (std::vector<std::string>{"I", "'ll", " 12", "x"}));
  Regex alt("ab|abc");
  const auto cps = unicode::decode("abc");
  EXPECT_EQ(alt.match_at(cps.data(), cps.size(), 0), 2);  // first alternative wins, not longest
  Regex rep("\\p{N}{1,3}");
  EXPECT_EQ(split(rep, "1234567"), (std::vector<std::string>{"123", "456", "7"}));
  Regex icase("(?i:'s)");
  EXPECT_EQ(split(icase, "IT'S"), (std::vector<std::string>{"IT", "'S"}));
  Regex cls("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+");
  EXPECT_EQ(split(cls, "(héllo"), (std::vector<std::string>{"(héllo"}));
  Regex end("\\s+$");
  EXPECT_EQ(split(end, "a  b  "), (std::vector<std::string>{"a  b", "  "}));
}

TEST(Regex, MalformedPatternsThrow) {
  for (const char* p : {"(ab", "ab)", "[abc", "\\p{Nope}", "a{3,1}", "*a", "a+?", "\\q"}) {
    EXPECT_THROW(Regex{p}, Error) << p;
  }
}

TEST(PreTokenizer, UnknownNameFallsBackOrThrows) {
  EXPECT_THROW(PreTokenizer("no-such-pre", true), Error);
  PreTokenizer p("no-such-pre");
  EXPECT_FALSE(p.known());
  EXPECT_EQ(p.split("Hello world"), (std::vector<std::string>{"Hello", " world"}));
  PreTokenizer q("qwen2");
  EXPECT_EQ(q.split("x 2024"), (std::vector<std::string>{"x", " ", "2", "0", "2", "4"}));
}

}  // namespace
}  // namespace moeflow
