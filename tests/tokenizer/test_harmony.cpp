// The harmony chat format (gpt-oss): detection, end-of-generation ids, rendering, and the split
// of generated tokens into the answer (final channel) and reasoning. The rendering is checked
// against OpenAI's openai-harmony in tests/python/test_harmony_format.py; here on a byte-level
// vocabulary with the harmony control tokens, so multi-byte characters arrive byte by byte.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <ostream>

#include "chat_template/chat_template.h"
#include "gguf/gguf_writer.h"
#include "support/harmony_vocab.h"
#include "support/run_binary.h"
#include "support/tokenizer_test_util.h"
#include "tokenizer/harmony.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_vectors.h"

namespace moeflow {
namespace {

// 256 byte tokens (no merges: one token per byte) + the harmony control tokens.
std::string write_byte_vocab(bool harmony) {
  GgufWriter w;
  w.set_string("general.architecture", "gpt-oss");
  test::set_harmony_byte_vocab(w, harmony);
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("moeflow_harmony_" + std::to_string(harmony) + "_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  w.write(path);
  return path;
}

struct Vocab {
  explicit Vocab(bool harmony) : path(write_byte_vocab(harmony)) {
    file = GgufFile::open(path);
    tok = Tokenizer::from_gguf(*file);
  }
  ~Vocab() { std::filesystem::remove(path); }
  int32_t id(const char* s) const { return *tok->find_token(s); }
  std::string path;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

void append(HarmonyStream::Delta& all, const HarmonyStream::Delta& d) {
  all.answer += d.answer;
  all.reasoning += d.reasoning;
  all.calls.insert(all.calls.end(), d.calls.begin(), d.calls.end());
}

HarmonyStream::Delta run(const Tokenizer& tok, const std::string& generated) {
  HarmonyStream hs(tok);
  HarmonyStream::Delta all;
  for (int32_t id : tok.encode(generated, false, true)) append(all, hs.push(id));
  append(all, hs.flush());
  return all;
}

using Calls = std::vector<HarmonyToolCall>;

}  // namespace

bool operator==(const HarmonyToolCall& a, const HarmonyToolCall& b) {
  return a.name == b.name && a.arguments == b.arguments;
}
void PrintTo(const HarmonyToolCall& c, std::ostream* os) {
  *os << c.name << "(" << c.arguments << ")";
}

namespace {

TEST(Harmony, DetectedAndTheTurnEndsAtReturnOrCallNotAtEnd) {
  Vocab v(true);
  EXPECT_TRUE(uses_harmony(*v.tok));
  EXPECT_TRUE(v.tok->is_eog(v.id("<|return|>")));
  EXPECT_TRUE(v.tok->is_eog(v.id("<|call|>")));
  EXPECT_FALSE(v.tok->is_eog(v.id("<|end|>")));  // it only ends the reasoning message
  EXPECT_TRUE(model_chat_template(*v.tok).harmony);
  EXPECT_FALSE(model_chat_template(*v.tok, "{{ messages[0].content }}").harmony);

  Vocab plain(false);  // no <|call|>: not harmony, <|end|> ends the turn (Phi-3 style)
  EXPECT_FALSE(uses_harmony(*plain.tok));
  EXPECT_TRUE(plain.tok->is_eog(plain.id("<|end|>")));
  EXPECT_FALSE(model_chat_template(*plain.tok).harmony);
}

TEST(Harmony, AnswerIsTheFinalChannelAndReasoningTheRest) {
  Vocab v(true);
  const auto d =
      run(*v.tok,
          "<|channel|>analysis<|message|>Think: é→ü 🎉.<|end|><|start|>assistant<|channel|>"
          "final<|message|>Answer: 4 ✓<|return|>");
  EXPECT_EQ(d.answer, "Answer: 4 ✓");
  EXPECT_EQ(d.reasoning, "Think: é→ü 🎉.");
  // A message to a built-in tool (not functions.*) is reasoning, whatever its channel.
  const auto c = run(*v.tok,
                     "<|channel|>analysis to=browser.search <|constrain|>json<|message|>{\"q\":1}"
                     "<|call|>");
  EXPECT_EQ(c.answer, "");
  EXPECT_EQ(c.reasoning, "{\"q\":1}");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(run(*v.tok, " to=python<|message|>print(1)<|call|>").reasoning, "print(1)");
  // No channel at all: taken as the answer; header text (role, recipient) never leaks.
  EXPECT_EQ(run(*v.tok, "<|message|>plain").answer, "plain");
  EXPECT_EQ(run(*v.tok, "stray header<|channel|>final<|message|>ok").answer, "ok");
}

TEST(Harmony, RendersSystemAsDeveloperInstructionsAndAnswersOnTheFinalChannel) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "More"}])");
  const std::string sys =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\n\nReasoning: low\n\n# Valid channels: analysis, commentary, "
      "final. Channel must be included for every message.<|end|>";
  EXPECT_EQ(render_harmony(msgs, true, {"low"}),
            sys +
                "<|start|>developer<|message|># Instructions\n\nBe brief.<|end|>"
                "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>"
                "Hello!<|end|><|start|>user<|message|>More<|end|><|start|>assistant");
  EXPECT_THROW(render_harmony(msgs, true, {"extreme"}), Error);
  EXPECT_THROW(
      render_harmony(nlohmann::ordered_json::parse(R"([{"role": "tool", "content": "x"}])"), true),
      Error);
}

TEST(Harmony, AToolCallIsReadInEitherHeaderOrder) {
  Vocab v(true);
  const Calls paris = {{"get_weather", "{\"city\":\"Paris\"}"}};
  // As the model writes it: the recipient after the channel (with or without a space before
  // <|constrain|>) ...
  for (const char* g :
       {"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        "{\"city\":\"Paris\"}<|call|>",
        "<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>"
        "{\"city\":\"Paris\"}<|call|>",
        // ... or right after the generation prompt's role, as openai-harmony renders calls.
        " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
        "{\"city\":\"Paris\"}<|call|>",
        // No content type at all.
        "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Paris\"}<|call|>"}) {
    const auto d = run(*v.tok, g);
    EXPECT_EQ(d.calls, paris) << g;
    EXPECT_EQ(d.answer, "") << g;
    EXPECT_EQ(d.reasoning, "") << g;
  }
}

TEST(Harmony, ACallComesOutWholeWhenItsMessageEnds) {
  Vocab v(true);
  HarmonyStream hs(*v.tok);
  const auto ids = v.tok->encode(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Zürich 🎉\"}",
      false, true);
  HarmonyStream::Delta all;
  for (int32_t id : ids) {
    const auto d = hs.push(id);
    EXPECT_TRUE(d.calls.empty());
    EXPECT_EQ(d.answer, "");
    append(all, d);
  }
  EXPECT_EQ(all.reasoning, "Need the weather.");
  const auto d = hs.push(v.id("<|call|>"));
  EXPECT_EQ(d.calls, (Calls{{"get_weather", "{\"city\":\"Zürich 🎉\"}"}}));
  EXPECT_EQ(d.answer + d.reasoning, "");
  EXPECT_TRUE(hs.flush().calls.empty());  // emitted once
}

TEST(Harmony, CallsAmongOtherMessages) {
  Vocab v(true);
  // Two calls in a row (the second without <|constrain|>), then, after the results, an answer.
  const auto d =
      run(*v.tok,
          "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{}<|call|>"
          "<|start|>assistant to=functions.b<|channel|>commentary json<|message|>{\"k\": [1, 2]}"
          "<|call|><|start|>functions.b to=assistant<|channel|>commentary<|message|>ok<|end|>"
          "<|start|>assistant<|channel|>final<|message|>Done.<|return|>");
  EXPECT_EQ(d.calls, (Calls{{"a", "{}"}, {"b", "{\"k\": [1, 2]}"}}));
  EXPECT_EQ(d.answer, "Done.");
  // The tool's own message (from functions.b, to the assistant) is not a call; not an answer.
  EXPECT_EQ(d.reasoning, "ok");
  // A preamble on the commentary channel, then a call ended by <|end|> (not <|call|>), then
  // text after the call.
  const auto p = run(*v.tok,
                     "<|channel|>commentary<|message|>Looking it up.<|end|><|start|>assistant"
                     "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\":1}"
                     "<|end|><|start|>assistant<|channel|>final<|message|>x is 1");
  EXPECT_EQ(p.calls, (Calls{{"f", "{\"x\":1}"}}));
  EXPECT_EQ(p.reasoning, "Looking it up.");
  EXPECT_EQ(p.answer, "x is 1");
  // "functions." without a name is no call.
  const auto n = run(*v.tok, "<|channel|>commentary to=functions.<|message|>{}<|call|>");
  EXPECT_TRUE(n.calls.empty());
  EXPECT_EQ(n.reasoning, "{}");
}

TEST(Harmony, FlushEmitsACallCutOff) {
  Vocab v(true);
  // The engine stops at <|call|> (an end-of-generation token) without pushing it.
  EXPECT_EQ(
      run(*v.tok, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\":2}")
          .calls,
      (Calls{{"f", "{\"x\":2}"}}));
  // Cut off by the token limit, in the middle of a character: U+FFFD, as for text.
  std::string g = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"s\": \"é";
  g.pop_back();
  EXPECT_EQ(run(*v.tok, g).calls, (Calls{{"f", "{\"s\": \"\xEF\xBF\xBD"}}));
  // Cut off in the header: no call yet.
  EXPECT_TRUE(run(*v.tok, "<|channel|>commentary to=functions.f").calls.empty());
}

TEST(Harmony, RendersToolsCallsAndResults) {
  const std::string sys =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, "
      "final. Channel must be included for every message.\nCalls to these tools must go to the "
      "commentary channel: 'functions'.<|end|>";
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}}}])");
  const auto msgs = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "Paris?"},
    {"role": "assistant", "content": null, "reasoning_content": "Need it.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])");
  HarmonyOptions o;
  o.tools = tools;
  // Without instructions the developer message is the tools section alone; the turn is still
  // calling tools, so its reasoning is kept.
  EXPECT_EQ(render_harmony(msgs, true, o),
            sys +
                "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
                "// Weather.\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n"
                "} // namespace functions<|end|><|start|>user<|message|>Paris?<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>Need it.<|end|>"
                "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
                "<|message|>{\"city\":\"Paris\"}<|call|><|start|>functions.get_weather "
                "to=assistant<|channel|>commentary<|message|>sunny<|end|><|start|>assistant");
  // Answered: the reasoning before the first answer goes.
  auto answered = msgs;
  answered.push_back({{"role", "assistant"}, {"content", "Sunny."}});
  const std::string a = render_harmony(answered, false, o);
  EXPECT_EQ(a.find("Need it."), std::string::npos);
  EXPECT_NE(a.find("<|call|><|start|>functions.get_weather"), std::string::npos);
  // No tools (null or []): the system message does not mention them.
  EXPECT_EQ(render_harmony(msgs, false, {}).find("Calls to these tools"), std::string::npos);
  // A reply to a call no earlier message made, or without an id; tools not an array.
  auto unknown = msgs;
  unknown[2]["tool_call_id"] = "c9";
  try {
    render_harmony(unknown, true, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'c9'"), std::string::npos) << e.what();
  }
  unknown[2].erase("tool_call_id");
  EXPECT_THROW(render_harmony(unknown, true, o), Error);
  o.tools = nlohmann::ordered_json::object();
  EXPECT_THROW(render_harmony(msgs, true, o), Error);
}

TEST(Harmony, ToolParametersAsOpenaiHarmonyWritesThem) {
  // openai-harmony 0.0.8's text for these (tests/python/test_harmony_format.py checks more):
  // the nested object's description twice and its body indented, oneOf's first variant without
  // the description it shares with the property, anyOf and numeric enums not read.
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "plan", "description": "Plans a trip.\nTwo lines.",
     "parameters": {"type": "object", "properties": {
       "city": {"type": "string", "description": "Where"},
       "mode": {"type": "string", "enum": ["car", "train"], "default": "train"},
       "days": {"type": "integer", "default": 3},
       "stops": {"type": "array", "items": {"type": "string"}},
       "hotel": {"type": "object", "description": "Stay", "properties": {
         "stars": {"type": "integer", "enum": [3, 4]}, "name": {"type": ["string", "null"]}},
         "required": ["stars"]},
       "budget": {"oneOf": [{"type": "number", "description": "EUR"},
                            {"type": "string", "default": "any"}], "description": "Money"},
       "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
      "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])");
  EXPECT_EQ(harmony_tools_section(tools),
            "# Tools\n\n## functions\n\nnamespace functions {\n\n// Plans a trip.\n// Two lines.\n"
            "type plan = (_: {\n// Where\ncity: string,\nmode?: \"car\" | \"train\", // default: "
            "train\ndays?: number, // default: 3\nstops?: string[],\n// Stay\nhotel?:     // "
            "Stay\n{\n    stars: number,\n    name?: string | null,\n    },\n// Money\nbudget?:\n"
            " | number\n | string // default: \"any\"\n,\nnote?: any,\n}) => any;\n\ntype now = () "
            "=> any;\n\n} // namespace functions");
  EXPECT_EQ(harmony_tools_section(nullptr), "");
  EXPECT_EQ(harmony_tools_section(nlohmann::ordered_json::array()), "");
  EXPECT_THROW(harmony_tools_section(nlohmann::ordered_json::parse(R"([{"type": "function"}])")),
               Error);
}

TEST(Harmony, TheChatTemplatePassesToolsToHarmony) {
  Vocab v(true);
  const ModelChatTemplate t = model_chat_template(*v.tok);
  const auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  const auto tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "now", "description": "Time"}}])");
  const std::string r = t.format(msgs, true, {{"tools", tools}});
  EXPECT_NE(r.find("// Time\ntype now = () => any;"), std::string::npos) << r;
  EXPECT_EQ(t.format(msgs, true, {{"tools", nullptr}}), t.format(msgs, true));
  EXPECT_THROW(t.format(msgs, true, {{"documents", tools}}), Error);
}

TEST(Harmony, TokenizeCliReadsToolsFromTheChatFile) {
  Vocab v(true);
  const auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  const auto tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "now", "description": "Time"}}])");
  const std::string path = v.path + ".chat.json";
  auto tokenize = [&](const nlohmann::ordered_json& chat) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    const std::string text = chat.dump();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    return test::run_moeflow("tokenize -m '" + v.path + "' --chat '" + path + "'");
  };
  HarmonyOptions o;
  o.tools = tools;
  const test::Cmd with = tokenize({{"messages", msgs}, {"tools", tools}});
  ASSERT_EQ(with.rc, 0) << with.out;
  EXPECT_EQ(with.out, format_ids(v.tok->encode(render_harmony(msgs, true, o), false, true)) + "\n");
  const test::Cmd bare = tokenize(msgs);  // a bare array of messages, as before
  ASSERT_EQ(bare.rc, 0) << bare.out;
  EXPECT_EQ(bare.out, format_ids(v.tok->encode(render_harmony(msgs, true), false, true)) + "\n");
  const test::Cmd bad = tokenize({{"messages", msgs}, {"tool_choice", "auto"}});
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("tool_choice"), std::string::npos) << bad.out;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moeflow
