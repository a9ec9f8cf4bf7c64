// Forced tool calls: every sentence of the grammar, in every family's syntax, parses back into
// calls of the allowed tools whose arguments have the schema's shape. Sentences are drawn by
// random walks over the grammar's automaton (the way a constrained model writes them), and the
// canonical text of each family is accepted.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "toolcall/tool_call_grammar.h"
#include "toolcall/tool_call_parser.h"

namespace moeflow::test::tool_call_grammar {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12},
                   "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"},
                   "where": {"type": "object", "properties": {"lat": {"type": "number"}},
                             "required": ["lat"]}},
    "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "now"}}])");

// A random sentence: random allowed bytes, leaning towards closing bytes so that it ends.
std::string random_sentence(const std::shared_ptr<const Grammar>& g, std::mt19937& rng) {
  GrammarMatcher m(g);
  GrammarMatcher::State st = m.start();
  std::string out;
  for (int step = 0; step < 20000; ++step) {
    if (m.accepting(st) && (!m.can_continue(st) || rng() % 2 == 0)) return out;
    std::vector<uint8_t> allowed, closing;
    for (int b = 0; b < 256; ++b)
      if (m.step(st, (uint8_t)b) != GrammarMatcher::kDead) {
        allowed.push_back((uint8_t)b);
        if (std::string_view("\"}]<\n`").find((char)b) != std::string_view::npos)
          closing.push_back((uint8_t)b);
      }
    if (allowed.empty()) break;
    const auto& from = !closing.empty() && rng() % 3 == 0 ? closing : allowed;
    const uint8_t b = from[rng() % from.size()];
    out.push_back((char)b);
    st = m.step(st, b);
  }
  ADD_FAILURE() << "no sentence within 20000 bytes: " << out.substr(0, 200);
  return out;
}

void check_calls(const ToolCallParser::Out& r, const std::string& only, size_t max_calls,
                 const std::string& text) {
  ASSERT_GE(r.calls.size(), 1u) << text;
  EXPECT_LE(r.calls.size(), max_calls) << text;
  EXPECT_EQ(r.content.find_first_not_of(" \n"), std::string::npos) << text;
  for (const ToolCall& c : r.calls) {
    if (!only.empty()) {
      EXPECT_EQ(c.name, only);
    }
    const ojson a = ojson::parse(c.arguments);
    ASSERT_TRUE(a.is_object()) << text;
    if (c.name == "get_weather") {
      ASSERT_TRUE(a.contains("city") && a["city"].is_string()) << text;
      EXPECT_LE(a["city"].get<std::string>().size(), 12u * 4) << text;  // 12 characters
      ASSERT_TRUE(a.contains("days") && a["days"].is_number_integer()) << text;
      if (a.contains("unit")) {
        EXPECT_TRUE(a["unit"] == "celsius" || a["unit"] == "fahrenheit");
      }
      if (a.contains("where")) {
        EXPECT_TRUE(a["where"]["lat"].is_number()) << text;
      }
      const std::set<std::string> known = {"city", "unit", "days", "where"};
      for (auto it = a.begin(); it != a.end(); ++it) EXPECT_TRUE(known.count(it.key())) << it.key();
    } else {
      EXPECT_EQ(c.name, "now");
    }
  }
}

class ForcedToolCallGrammar : public ::testing::TestWithParam<ToolCallSyntax> {};

TEST_P(ForcedToolCallGrammar, EverySentenceParsesIntoValidCalls) {
  const ToolCallSyntax s = GetParam();
  std::mt19937 rng(7);
  for (const bool named : {true, false}) {
    ForcedToolCalls choice;
    if (named) choice.name = "get_weather";
    choice.parallel = !named;
    const auto g = forced_tool_call_grammar(s, kTools, choice);
    const size_t max_calls =
        named || s == ToolCallSyntax::Llama3 ? 1 : ForcedToolCalls::kMaxParallel;
    for (int i = 0; i < 40; ++i) {
      const std::string text = random_sentence(g, rng);
      check_calls(parse_tool_calls(s, text, kTools), choice.name, max_calls, text);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ForcedToolCallGrammar,
                         ::testing::Values(ToolCallSyntax::Hermes, ToolCallSyntax::Glm,
                                           ToolCallSyntax::Mistral, ToolCallSyntax::Llama3,
                                           ToolCallSyntax::DeepSeek, ToolCallSyntax::DeepSeekV31,
                                           ToolCallSyntax::QwenXml, ToolCallSyntax::Gemma4,
                                           ToolCallSyntax::MiniMax),
                         [](const auto& info) {
                           std::string n = tool_call_syntax_name(info.param);
                           for (char& c : n)
                             if (c == '-' || c == '.') c = '_';
                           return n;
                         });

bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  const auto st = m.walk(m.start(), s);
  return st != GrammarMatcher::kDead && m.accepting(st);
}

TEST(ForcedToolCallGrammar, AcceptsEachFamilysCanonicalText) {
  const ForcedToolCalls named{"get_weather", false};
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::Hermes, kTools, named),
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Oslo\", \"days\": 2}}\n</tool_call>"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::Glm, kTools, named),
                      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo"
                      "</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n"
                      "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::Mistral, kTools, {"", true}),
                      "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": "
                      "\"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}]"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::Llama3, kTools, named),
                      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", "
                      "\"days\": 2}}"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::DeepSeek, kTools, named),
                      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                      "get_weather\n```json\n{\"city\": \"Oslo\", \"days\": 2}\n```"
                      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::QwenXml, kTools, named),
                      "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                      "<parameter=days>\n2\n</parameter>\n<parameter=where>\n{\"lat\": 59.9}\n"
                      "</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::QwenXml, kTools, {"", true}),
                      "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n"
                      "<function=now>\n</function>\n</tool_call>"));
  // Gemma 4: the arguments in the template's (sorted) order, strings in <|"|> quotes.
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::Gemma4, kTools, named),
                      "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:2,"
                      "unit:<|\"|>celsius<|\"|>,where:{lat:59.9}}<tool_call|>"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::Gemma4, kTools, {"", true}),
                      "<|tool_call>call:now{}<tool_call|><|tool_call>call:now{}<tool_call|>"));
  EXPECT_TRUE(accepts(forced_tool_call_grammar(ToolCallSyntax::MiniMax, kTools, named),
                      "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter "
                      "name=\"city\">Oslo</parameter>\n<parameter name=\"days\">2</parameter>\n"
                      "</invoke>\n</minimax:tool_call>"));
  // A raw string holds '<' and newlines, never the closing tag.
  const ojson code = ojson::parse(R"([{"type": "function", "function": {"name": "run",
      "parameters": {"type": "object", "properties": {"src": {"type": "string"}},
      "required": ["src"]}}}])");
  const auto q = forced_tool_call_grammar(ToolCallSyntax::QwenXml, code, {});
  EXPECT_TRUE(accepts(q,
                      "<tool_call>\n<function=run>\n<parameter=src>\nif a < b:\n  x = \"</p>\"\n"
                      "</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(q,
                       "<tool_call>\n<function=run>\n<parameter=src>\na</parameter>b\n"
                       "</parameter>\n</function>\n</tool_call>"));
  const auto g = forced_tool_call_grammar(ToolCallSyntax::Gemma4, code, {});
  EXPECT_TRUE(accepts(g, "<|tool_call>call:run{src:<|\"|>a <| b \"|> <|\"\n<|\"|>}<tool_call|>"));
  EXPECT_FALSE(accepts(g, "<|tool_call>call:run{src:<|\"|>a<|\"|>b<|\"|>}<tool_call|>"));
  const auto mm = forced_tool_call_grammar(ToolCallSyntax::MiniMax, code, {});
  EXPECT_TRUE(accepts(mm,
                      "<minimax:tool_call>\n<invoke name=\"run\">\n<parameter name=\"src\"><</p>"
                      "</paramete</parameter>\n</invoke>\n</minimax:tool_call>"));
  // The named tool only; the required days argument; a string longer than maxLength.
  const auto h = forced_tool_call_grammar(ToolCallSyntax::Hermes, kTools, named);
  EXPECT_FALSE(accepts(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(h,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(h,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Oslo Oslo Oslo\", \"days\": 1}}\n</tool_call>"));
}

TEST(ForcedToolCallGrammar, RefusesWhatItCannotForce) {
  EXPECT_THROW(forced_tool_call_grammar(ToolCallSyntax::Hermes, kTools, {"nope", false}), Error);
  EXPECT_THROW(forced_tool_call_grammar(ToolCallSyntax::None, kTools, {}), Error);
  // Raw-text families: a value that may be a string or a number cannot be told apart when read
  // back; Gemma 4's notation has no place for keywords outside its subset.
  const ojson mixed = ojson::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"p": {"type": ["string", "integer"]}}}}}])");
  for (ToolCallSyntax s : {ToolCallSyntax::QwenXml, ToolCallSyntax::MiniMax}) {
    try {
      forced_tool_call_grammar(s, mixed, {});
      ADD_FAILURE() << "no error";
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword, "type") << e.what();
      EXPECT_NE(std::string(e.what()).find("tools[0] ('f')"), std::string::npos) << e.what();
    }
  }
  const ojson minimum = ojson::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"p": {"type": "string", "format": "date"}}}}}])");
  for (ToolCallSyntax s :
       {ToolCallSyntax::QwenXml, ToolCallSyntax::Gemma4, ToolCallSyntax::MiniMax}) {
    try {
      forced_tool_call_grammar(s, minimum, {});
      ADD_FAILURE() << "no error";
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword, "format") << e.what();
    }
  }
  const ojson bad = ojson::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"p": {"type": "string", "pattern": "a+"}}}}}])");
  try {
    forced_tool_call_grammar(ToolCallSyntax::Hermes, bad, {});
    ADD_FAILURE() << "no error";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("tools[0] ('f')"), std::string::npos) << e.what();
    EXPECT_EQ(e.keyword, "pattern");
  }
}

}  // namespace
}  // namespace moeflow::test::tool_call_grammar
