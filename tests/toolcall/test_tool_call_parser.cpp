// The reply parser on each family's published call syntax: calls with and without text around
// them, several calls, streamed in pieces of every size (same result as at once), and malformed
// or cut-off blocks kept as content.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "support/published_template.h"
#include "toolcall/gemma4_values.h"
#include "toolcall/tool_call_parser.h"
#include "toolcall/tool_call_syntax.h"

namespace moeflow::test::tool_call_parser {
namespace {

using ojson = nlohmann::ordered_json;

ToolCallParser::Out streamed(ToolCallSyntax s, const std::string& text, size_t piece,
                             const ojson& tools = nullptr) {
  ToolCallParser p(s, tools);
  ToolCallParser::Out all;
  auto add = [&](ToolCallParser::Out o) {
    all.content += o.content;
    for (ToolCall& c : o.calls) all.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += piece) add(p.push(text.substr(i, piece)));
  add(p.finish());
  return all;
}

// The same split at once and in pieces of 1, 2, 3, 7 and 64 bytes.
ToolCallParser::Out parse_all_ways(ToolCallSyntax s, const std::string& text,
                                   const ojson& tools = nullptr) {
  const ToolCallParser::Out once = parse_tool_calls(s, text, tools);
  for (size_t piece : {1, 2, 3, 7, 64}) {
    const ToolCallParser::Out p = streamed(s, text, piece, tools);
    EXPECT_EQ(p.content, once.content) << "pieces of " << piece;
    EXPECT_EQ(p.calls.size(), once.calls.size()) << "pieces of " << piece;
    for (size_t i = 0; i < std::min(p.calls.size(), once.calls.size()); ++i) {
      EXPECT_EQ(p.calls[i].name, once.calls[i].name);
      EXPECT_EQ(p.calls[i].arguments, once.calls[i].arguments);
    }
  }
  return once;
}

TEST(ToolCallParser, HermesCallsAfterText) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
  const auto r = parse_all_ways(ToolCallSyntax::Hermes, text);
  EXPECT_EQ(r.content, "Let me check.\n\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"city":"Paris","days":3})"));
  EXPECT_EQ(r.calls[1].name, "get_time");
}

TEST(ToolCallParser, HermesArgumentsAsAJsonString) {
  const auto r = parse_all_ways(
      ToolCallSyntax::Hermes,
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1, 2]}\"}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"a":[1,2]})"));
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallParser, MalformedAndCutOffBlocksStayContent) {
  // Not JSON inside: the whole block is content, nothing lost.
  const std::string bad = "x <tool_call>{name: f}</tool_call> y";
  auto r = parse_all_ways(ToolCallSyntax::Hermes, bad);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, bad);
  // Cut off by the end of the reply (max_tokens).
  const std::string cut = "ok <tool_call>\n{\"name\": \"f\", \"argu";
  r = parse_all_ways(ToolCallSyntax::Hermes, cut);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, cut);
  // A '<' that never becomes a marker is released.
  r = parse_all_ways(ToolCallSyntax::Hermes, "a < b and <tool_c");
  EXPECT_EQ(r.content, "a < b and <tool_c");
}

TEST(ToolCallParser, GlmArgumentsTypedByTheToolsSchema) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "zip": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"}}}}}])");
  const std::string text =
      "I will look.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
      "<arg_key>zip</arg_key>\n<arg_value>75001</arg_value>\n<arg_key>days</arg_key>\n"
      "<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"metric\": true}"
      "</arg_value>\n</tool_call>";
  const auto r = parse_all_ways(ToolCallSyntax::Glm, text, tools);
  EXPECT_EQ(r.content, "I will look.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  // "75001" stays a string (declared so); 3 and the object are JSON.
  EXPECT_EQ(ojson::parse(r.calls[0].arguments),
            ojson::parse(R"({"city":"Paris","zip":"75001","days":3,"opts":{"metric":true}})"));
  // No arguments at all.
  const auto e = parse_all_ways(ToolCallSyntax::Glm, "<tool_call>now\n</tool_call>");
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.calls[0].arguments, "{}");
}

TEST(ToolCallParser, MistralListAndNamedForms) {
  auto r = parse_all_ways(ToolCallSyntax::Mistral,
                          "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"]}\"}}, "
                          "{\"name\": \"b\", \"arguments\": {}, \"id\": \"abcdefghi\"}]");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "a");
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"x":"]}"})"));
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.content, "");
  r = parse_all_ways(ToolCallSyntax::Mistral,
                     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]now[ARGS]{}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[1].name, "now");
}

TEST(ToolCallParser, Llama3JsonReplyIsACallOnlyAtTheStart) {
  auto r = parse_all_ways(ToolCallSyntax::Llama3,
                          "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"city":"Rome"})"));
  r = parse_all_ways(ToolCallSyntax::Llama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
  ASSERT_EQ(r.calls.size(), 1u);
  // JSON after text is content; so is JSON that is not a call.
  r = parse_all_ways(ToolCallSyntax::Llama3, "Here: {\"name\": \"f\", \"parameters\": {}}");
  EXPECT_TRUE(r.calls.empty());
  r = parse_all_ways(ToolCallSyntax::Llama3, "{\"answer\": 42}");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "{\"answer\": 42}");
}

TEST(ToolCallParser, DeepSeekV3AndV31) {
  auto r = parse_all_ways(
      ToolCallSyntax::DeepSeek,
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Lima\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_EQ(r.content, "Checking.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"city":"Lima"})"));
  EXPECT_EQ(r.calls[1].name, "now");
  r = parse_all_ways(ToolCallSyntax::DeepSeekV31,
                     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                     "{\"city\": \"Lima\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
}

// The tools of the 2026 families' tests: typed arguments of every kind.
const ojson kTypedTools = ojson::parse(R"([{"type": "function", "function": {"name": "f",
    "parameters": {"type": "object", "properties": {
      "s": {"type": "string"}, "zip": {"type": "string"}, "n": {"type": "integer"},
      "x": {"type": "number"}, "b": {"type": "boolean"}, "o": {"type": "object"},
      "a": {"type": "array"}, "u": {"enum": ["on", "off"]}, "maybe": {"type": ["integer", "null"]},
      "either": {"type": ["string", "integer"]}}}}}])");

TEST(ToolCallParser, QwenXmlArgumentsTypedByTheToolsSchema) {
  const std::string text =
      "I will look.\n\n<tool_call>\n<function=f>\n<parameter=s>\nline one\nif a < b: </p>\n"
      "</parameter>\n<parameter=zip>\n75001\n</parameter>\n<parameter=n>\n3\n</parameter>\n"
      "<parameter=x>\n2.5\n</parameter>\n<parameter=b>\nTrue\n</parameter>\n<parameter=o>\n"
      "{\"k\": [1]}\n</parameter>\n<parameter=a>\n[1, \"two\"]\n</parameter>\n<parameter=u>\n"
      "on\n</parameter>\n<parameter=maybe>\nNone\n</parameter>\n<parameter=either>\n7\n"
      "</parameter>\n<parameter=undeclared>\n[true]\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=now>\n</function>\n</tool_call>";
  const auto r = parse_all_ways(ToolCallSyntax::QwenXml, text, kTypedTools);
  EXPECT_EQ(r.content, "I will look.\n\n\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "f");
  // Strings as written (one newline each side is the template's), "75001" a string; the
  // rest JSON; True/None Python's; an undeclared argument JSON when it parses.
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"s": "line one\nif a < b: </p>",
      "zip": "75001", "n": 3, "x": 2.5, "b": true, "o": {"k": [1]}, "a": [1, "two"], "u": "on",
      "maybe": null, "either": 7, "undeclared": [true]})"));
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
}

TEST(ToolCallParser, TextArgumentsThatDoNotParseStayStrings) {
  // Declared integer / object, written as words: the text is kept (a string), not dropped;
  // a string-or-integer that is not a number is the string.
  const auto r = parse_all_ways(
      ToolCallSyntax::QwenXml,
      "<tool_call>\n<function=f>\n<parameter=n>\nthree\n</parameter>\n<parameter=o>\n{oops\n"
      "</parameter>\n<parameter=either>\n007x\n</parameter>\n</function>\n</tool_call>",
      kTypedTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(ojson::parse(r.calls[0].arguments),
            ojson::parse(R"({"n": "three", "o": "{oops", "either": "007x"})"));
  // Without tools, JSON when it parses.
  const auto bare = parse_all_ways(ToolCallSyntax::QwenXml,
                                   "<tool_call>\n<function=g>\n<parameter=k>\n42\n</parameter>\n"
                                   "<parameter=t>\nhi\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(ojson::parse(bare.calls[0].arguments), ojson::parse(R"({"k": 42, "t": "hi"})"));
}

TEST(ToolCallParser, MiniMaxInvokesTypedByTheToolsSchema) {
  // As the template renders a call (whitespace between the tags included).
  const std::string text =
      "<think>\nplan\n</think>\n\nSure.\n<minimax:tool_call>\n<invoke name=\"f\">\n"
      "<parameter name=\"s\"> padded </parameter>\n                \n<parameter name=\"n\">4"
      "</parameter>\n<parameter name=\"o\">{\"city\": \"Nice\"}</parameter>\n</invoke>\n"
      "<invoke name=\"now\">\n</invoke>\n</minimax:tool_call>";
  const auto r = parse_all_ways(ToolCallSyntax::MiniMax, text, kTypedTools);
  EXPECT_EQ(r.content, "<think>\nplan\n</think>\n\nSure.\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(ojson::parse(r.calls[0].arguments),
            ojson::parse(R"({"s": " padded ", "n": 4, "o": {"city": "Nice"}})"));
  EXPECT_EQ(r.calls[1].name, "now");
}

TEST(ToolCallParser, Gemma4CallsInItsNotation) {
  const std::string text =
      "<|channel>thought\nplan<channel|>Checking.<|tool_call>call:book_trip{class:<|\"|>economy"
      "<|\"|>,to:{city:<|\"|>Nice, \"FR\"<|\"|>,<|\"|>zip code<|\"|>:6000},days:[1,2.5,-3e2],"
      "ok:true,none:null}<tool_call|><|tool_call>call:now{}<tool_call|>";
  const auto r = parse_all_ways(ToolCallSyntax::Gemma4, text);
  EXPECT_EQ(r.content, "<|channel>thought\nplan<channel|>Checking.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "book_trip");
  EXPECT_EQ(ojson::parse(r.calls[0].arguments),
            ojson::parse(R"({"class": "economy", "to": {"city": "Nice, \"FR\"", "zip code": 6000},
                             "days": [1, 2.5, -300.0], "ok": true, "none": null})"));
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // The notation written back reads the same.
  const ojson v = ojson::parse(r.calls[0].arguments);
  size_t pos = 0;
  ojson back;
  ASSERT_EQ(read_gemma4_value(write_gemma4_value(v), pos, back), Gemma4Read::Done);
  EXPECT_EQ(back, v);
}

// Every cut-off prefix of a reply with calls is content and no call (the end came first), never
// a crash; broken blocks are content; the text after a broken block is still read.
TEST(ToolCallParser, CutOffAndMalformed2026BlocksStayContent) {
  const std::pair<ToolCallSyntax, std::string> whole[] = {
      {ToolCallSyntax::QwenXml,
       "<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>"},
      {ToolCallSyntax::Gemma4, "<|tool_call>call:f{n:3,s:<|\"|>a<|\"|>,l:[{}]}<tool_call|>"},
      {ToolCallSyntax::MiniMax,
       "<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"n\">3</parameter>\n"
       "</invoke>\n</minimax:tool_call>"}};
  for (const auto& [syntax, text] : whole) {
    SCOPED_TRACE(tool_call_syntax_name(syntax));
    ASSERT_EQ(parse_tool_calls(syntax, text, kTypedTools).calls.size(), 1u);
    for (size_t n = 0; n < text.size(); ++n) {
      const auto r = parse_tool_calls(syntax, text.substr(0, n), kTypedTools);
      EXPECT_TRUE(r.calls.empty()) << n;
      EXPECT_EQ(r.content, text.substr(0, n));
    }
  }
  const std::pair<ToolCallSyntax, std::string> broken[] = {
      {ToolCallSyntax::QwenXml, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>"},  // Hermes' JSON
      {ToolCallSyntax::QwenXml, "<tool_call>\n<function=f>\n<arg>1</arg>\n</function></tool_call>"},
      {ToolCallSyntax::QwenXml, "<tool_call>\n<function=>\n</function>\n</tool_call>"},
      {ToolCallSyntax::Gemma4, "<|tool_call>call:f{city:Paris}<tool_call|>"},  // a bare word
      {ToolCallSyntax::Gemma4, "<|tool_call>call:f{n:3]<tool_call|>"},
      {ToolCallSyntax::Gemma4, "<|tool_call>call:f{n:3}}<tool_call|>"},
      {ToolCallSyntax::Gemma4, "<|tool_call>call:f" + std::string(100, '[') + "<tool_call|>"},
      {ToolCallSyntax::MiniMax, "<minimax:tool_call>\n</minimax:tool_call>"},  // no call
      {ToolCallSyntax::MiniMax, "<minimax:tool_call><invoke name=\"f\"><x/></invoke>"}};
  for (const auto& [syntax, text] : broken) {
    SCOPED_TRACE(text);
    const std::string reply = text + " then <tool_call>";
    const auto r = parse_all_ways(syntax, reply, kTypedTools);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, reply);
  }
  // Deep nesting is refused (depth 64), not recursed into without end.
  std::string deep =
      "<|tool_call>call:f{a:" + std::string(5000, '[') + std::string(5000, ']') + "}<tool_call|>";
  EXPECT_TRUE(parse_tool_calls(ToolCallSyntax::Gemma4, deep).calls.empty());
  // A good call after a broken one is read.
  const auto r =
      parse_all_ways(ToolCallSyntax::Gemma4,
                     "<|tool_call>call:f{x:y}<tool_call|> <|tool_call>call:g{}<tool_call|>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "g");
}

// Replies damaged at random (bytes deleted, markers' characters inserted, pieces repeated): the
// parser never crashes, streamed and whole give the same split, and a reply it finds no call in
// comes back as content byte for byte.
TEST(ToolCallParser, DamagedRepliesOfThe2026FamiliesLoseNoText) {
  const std::pair<ToolCallSyntax, std::string> whole[] = {
      {ToolCallSyntax::QwenXml,
       "a<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=s>\nx\n"
       "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n"
       "</tool_call>"},
      {ToolCallSyntax::Gemma4,
       "a<|tool_call>call:f{n:3,s:<|\"|>a<|\"|>,l:[{k:true},null]}<tool_call|><|tool_call>call:g{}"
       "<tool_call|>"},
      {ToolCallSyntax::MiniMax,
       "a<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"n\">3</parameter>\n"
       "</invoke>\n<invoke name=\"g\">\n</invoke>\n</minimax:tool_call>"}};
  std::mt19937 rng(11);
  const std::string alphabet = "<>/|\"{}[],:=\n tpcf3";
  for (const auto& [syntax, text] : whole) {
    SCOPED_TRACE(tool_call_syntax_name(syntax));
    for (int k = 0; k < 150; ++k) {
      std::string t = text;
      for (int edits = 1 + (int)(rng() % 3); edits > 0; --edits) {
        const size_t at = rng() % t.size();
        switch (rng() % 3) {
          case 0: t.erase(at, 1 + rng() % 4); break;
          case 1: t.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          default: t.insert(at, t.substr(at, 1 + rng() % 12)); break;
        }
        if (t.empty()) t = "x";
      }
      const auto r = parse_all_ways(syntax, t, kTypedTools);
      if (r.calls.empty()) {
        EXPECT_EQ(r.content, t);
      }
      for (const ToolCall& c : r.calls) {
        EXPECT_TRUE(ojson::parse(c.arguments).is_object()) << t;
      }
    }
  }
}

TEST(ToolCallParser, NoneAndHarmonyPassTextThrough) {
  for (ToolCallSyntax s : {ToolCallSyntax::None, ToolCallSyntax::Harmony}) {
    const auto r = parse_all_ways(s, "<tool_call>{\"name\": \"f\"}</tool_call>");
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, "<tool_call>{\"name\": \"f\"}</tool_call>");
  }
}

TEST(ToolCallParser, ContainerEnd) {
  EXPECT_EQ(json_container_end(R"({"a": "}"} x)", 0), 10u);
  EXPECT_EQ(json_container_end(R"([1, [2], "\"]"])", 0), 15u);
  EXPECT_EQ(json_container_end(R"({"a": 1)", 0), std::string_view::npos);
  EXPECT_EQ(json_container_end("x", 0), std::string_view::npos);
}

TEST(ToolCallSyntax, DetectedFromTheTemplate) {
  EXPECT_EQ(detect_tool_call_syntax("{{ '<tool_call>\\n' }}", false), ToolCallSyntax::Hermes);
  EXPECT_EQ(detect_tool_call_syntax("<tool_call>{{ n }}<arg_key>", false), ToolCallSyntax::Glm);
  EXPECT_EQ(detect_tool_call_syntax("[AVAILABLE_TOOLS] [TOOL_CALLS]", false),
            ToolCallSyntax::Mistral);
  EXPECT_EQ(detect_tool_call_syntax("ipython {\"parameters\": ", false), ToolCallSyntax::Llama3);
  EXPECT_EQ(detect_tool_call_syntax("<｜tool▁calls▁begin｜> ```json", false),
            ToolCallSyntax::DeepSeek);
  EXPECT_EQ(detect_tool_call_syntax("<｜tool▁call▁begin｜>", false), ToolCallSyntax::DeepSeekV31);
  EXPECT_EQ(detect_tool_call_syntax("<tool_call>\n<function={{ n }}>\n<parameter={{ k }}>", false),
            ToolCallSyntax::QwenXml);
  EXPECT_EQ(detect_tool_call_syntax("{{ '<|tool_call>call:' + name }}", false),
            ToolCallSyntax::Gemma4);
  EXPECT_EQ(detect_tool_call_syntax("'<minimax:tool_call>' <invoke name=", false),
            ToolCallSyntax::MiniMax);
  EXPECT_EQ(detect_tool_call_syntax("{{ messages }}", false), ToolCallSyntax::None);
  EXPECT_EQ(detect_tool_call_syntax("", true), ToolCallSyntax::Harmony);
}

// The published templates (tests/chat_template/templates/): each tool-calling family's syntax,
// the 2026 families' included (Qwen3.5's XML calls sit inside <tool_call> like Hermes' JSON ones
// and are never taken for them); none is left unread.
TEST(ToolCallSyntax, PublishedTemplatesOfEachFamily) {
  const std::pair<const char*, ToolCallSyntax> read[] = {
      {"qwen3", ToolCallSyntax::Hermes},   {"hermes3_tool_use", ToolCallSyntax::Hermes},
      {"glm46", ToolCallSyntax::Glm},      {"mistral_nemo", ToolCallSyntax::Mistral},
      {"llama31", ToolCallSyntax::Llama3}, {"deepseek_v31", ToolCallSyntax::DeepSeekV31},
      {"qwen2", ToolCallSyntax::None},     {"mixtral_v01", ToolCallSyntax::None},
      {"qwen35", ToolCallSyntax::QwenXml}, {"minimax_m2", ToolCallSyntax::MiniMax},
      {"gemma4", ToolCallSyntax::Gemma4},  {"gemma4_interleaved", ToolCallSyntax::Gemma4}};
  for (const auto& [name, syntax] : read) {
    const std::string t = published_template(name);
    EXPECT_EQ(detect_tool_call_syntax(t, false), syntax) << name;
  }
}

}  // namespace
}  // namespace moeflow::test::tool_call_parser
