// The byte grammars through their text form: what they accept and refuse, UTF-8 classes,
// repetition bounds, and the errors for grammars the matcher could not run.
#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/utf8_ranges.h"
#include "grammar_test_util.h"

namespace moeflow {
namespace {

using test::is_prefix;
using test::matches;

TEST(Gbnf, SequencesAlternativesAndRepetition) {
  auto g = parse_gbnf(R"(
    root ::= greeting ("," ws greeting)*   # one or more greetings
    greeting ::= "hi" | "hello" [!?]?
    ws ::= " "*
  )");
  for (const char* s : {"hi", "hello!", "hi,hello?", "hi,   hi", "hello, hello!,hi"})
    EXPECT_TRUE(matches(g, s)) << s;
  for (const char* s : {"", "h", "hi,", "hey", "hi!", "hello!!", " hi", "hi ,hi"})
    EXPECT_FALSE(matches(g, s)) << s;
  EXPECT_TRUE(is_prefix(g, "hi, hel"));
  EXPECT_FALSE(is_prefix(g, "hi, x"));
}

TEST(Gbnf, BoundedRepetition) {
  auto g = parse_gbnf(R"(root ::= [0-9]{2,4} "-" [a-c]{3} "." "x"{0,2} "y"{1,})");
  EXPECT_TRUE(matches(g, "12-abc.y"));
  EXPECT_TRUE(matches(g, "1234-cba.xxyyy"));
  EXPECT_FALSE(matches(g, "1-abc.y"));
  EXPECT_FALSE(matches(g, "12345-abc.y"));
  EXPECT_FALSE(matches(g, "12-ab.y"));
  EXPECT_FALSE(matches(g, "12-abc.xxxy"));
  EXPECT_FALSE(matches(g, "12-abc."));
}

TEST(Gbnf, Utf8ClassesMatchWholeCharactersOnly) {
  auto g = parse_gbnf(R"(root ::= [^a-z"]+)");
  EXPECT_TRUE(matches(g, "ÀÉ☃𝄞 1"));
  EXPECT_FALSE(matches(g, "abc"));
  EXPECT_FALSE(matches(g, "\""));
  EXPECT_TRUE(is_prefix(g, "\xE2\x98"));           // the first two bytes of ☃
  EXPECT_FALSE(matches(g, "\xE2\x98"));            // but not a whole character
  EXPECT_FALSE(is_prefix(g, "\xC0\xAF"));          // an overlong '/'
  EXPECT_FALSE(is_prefix(g, "\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(is_prefix(g, "\xF4\x90\x80\x80"));  // above U+10FFFF
  auto greek = parse_gbnf(R"(root ::= [α-ω]{2} "\u00e9" "\x41")");
  EXPECT_TRUE(matches(greek, "αωéA"));
  EXPECT_FALSE(matches(greek, "αAéA"));
}

TEST(Utf8Ranges, EveryCodePointOfARangeAndNoOther) {
  // [U+07F0, U+0801] crosses the 2/3-byte boundary; check each code point around it.
  GrammarBuilder b;
  b.define("root", utf8_class({{0x7F0, 0x801}, {0xFFF0, 0x10005}}));
  auto g = b.build("root");
  for (uint32_t cp : {0x7EFu, 0x7F0u, 0x7FFu, 0x800u, 0x801u, 0x802u, 0xFFEFu, 0xFFF0u, 0xFFFFu,
                      0x10000u, 0x10005u, 0x10006u}) {
    const bool in = (cp >= 0x7F0 && cp <= 0x801) || (cp >= 0xFFF0 && cp <= 0x10005);
    EXPECT_EQ(test::matches(g, utf8_encode(cp)), in) << std::hex << cp;
  }
  EXPECT_EQ(complement({{0, 0x10}, {0x20, 0x10FFFF}}), (CodepointRanges{{0x11, 0x1F}}));
}

TEST(Gbnf, RecursionRightAndNested) {
  auto g = parse_gbnf(R"(
    root ::= list
    list ::= "[" (item ("," item)*)? "]"
    item ::= list | [0-9]
  )");
  EXPECT_TRUE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[1,[2,[[]]],3]"));
  EXPECT_FALSE(matches(g, "[1,[2]"));
  EXPECT_FALSE(matches(g, "[1,]"));
  // Deep nesting is one stack frame per level, not a blow-up.
  std::string deep = std::string(500, '[') + std::string(500, ']');
  EXPECT_TRUE(matches(g, deep));
}

TEST(Gbnf, ErrorsSayWhereAndWhat) {
  auto msg = [](const char* text) {
    try {
      parse_gbnf(text);
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(msg("root ::= missing").find("'missing'"), std::string::npos);
  EXPECT_NE(msg("start ::= \"a\"").find("'root'"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a").find("unterminated"), std::string::npos);
  EXPECT_NE(msg("root ::= [a-").find("line 1"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\"{3,1}").find("bounds"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\"\nroot ::= \"b\"").find("twice"), std::string::npos);
  EXPECT_NE(msg("root ::= \"\\q\"").find("escape"), std::string::npos);
}

}  // namespace
}  // namespace moeflow
