// Tool calls through the server: for each family's call syntax (a small template that renders the
// tools and names its syntax, as the published ones do), tool_choice named and required make the
// tiny random model call tools, and the reply comes back as OpenAI tool_calls -- arguments of the
// schema's shape, finish_reason "tool_calls", streamed deltas that add up to the same calls; a
// conversation with calls and results goes back through the template; what cannot be honoured
// is a 400 naming the field. (The real templates of the families and the official openai client:
// tests/python/test_server_tools.py.)
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "chat_template/chat_template.h"
#include "server/server_fixture.h"
#include "support/published_template.h"
#include "toolcall/tool_call_parser.h"
#include "toolcall/tool_call_syntax.h"

namespace moeflow::test::server_tools {
namespace {

const char* const kTurns =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}[call {{ c.function.name }} "
    "{{ c.function.arguments }}]{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

struct Family {
  const char* name;
  std::string marker;  // what the template shows of the call syntax
};

const std::vector<Family> kFamilies = {
    {"hermes", "<tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>"},
    {"glm", "<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>"},
    {"mistral", "[TOOL_CALLS][{\"name\": ..., \"arguments\": ...}]"},
    {"llama3", "ipython {\"name\": ..., \"parameters\": ...}"},
    {"deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json"},
    {"deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>"},
    {"qwen_xml", "<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>"},
    {"gemma4", "<|tool_call>call:NAME{K:V}<tool_call|>"},
    {"minimax", "<minimax:tool_call><invoke name=NAME><parameter name=K>V</parameter>"},
};

std::string family_template(const Family& f) {
  return "{% if tools %}TOOLS {{ tools | tojson }} (" + f.marker + ")\n{% endif %}" + kTurns;
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 6},
      "unit": {"enum": ["c", "f"]},
      "days": {"type": "integer"}},
    "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
    "properties": {"tz": {"enum": ["utc", "cet"]}}, "required": ["tz"]}}}])");

json request(const json& extra) {
  json r = {{"messages", {{{"role", "user"}, {"content", "weather in Oslo?"}}}},
            {"tools", kTools},
            {"max_tokens", 400},
            {"seed", 3}};
  for (auto it = extra.begin(); it != extra.end(); ++it) r[it.key()] = it.value();
  return r;
}

// A call's arguments have its tool's shape.
void expect_valid_call(const json& c, const std::string& family) {
  ASSERT_EQ(c["type"], "function");
  const std::string id = c["id"].get<std::string>();
  if (family == "mistral") {
    EXPECT_TRUE(std::regex_match(id, std::regex("[A-Za-z0-9]{9}"))) << id;
  } else {
    EXPECT_TRUE(std::regex_match(id, std::regex("call_[A-Za-z0-9]{24}"))) << id;
  }
  const std::string name = c["function"]["name"].get<std::string>();
  const json a = json::parse(c["function"]["arguments"].get<std::string>());
  ASSERT_TRUE(a.is_object());
  if (name == "get_weather") {
    ASSERT_TRUE(a.contains("city") && a["city"].is_string()) << a;
    EXPECT_TRUE(a.contains("days") && a["days"].is_number_integer()) << a;
    if (a.contains("unit")) {
      EXPECT_TRUE(a["unit"] == "c" || a["unit"] == "f") << a;
    }
  } else {
    ASSERT_EQ(name, "now");
    EXPECT_TRUE(a["tz"] == "utc" || a["tz"] == "cet") << a;
  }
}

TEST(ServerTools, NamedAndRequiredCallsInEveryFamilysSyntax) {
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    ServerOptions so;
    so.chat_template = family_template(f);
    Instance inst(so, false, 1024);
    const json named = post_ok(
        inst, "/v1/chat/completions",
        request(
            {{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}));
    const json& m = named["choices"][0]["message"];
    EXPECT_EQ(named["choices"][0]["finish_reason"], "tool_calls") << named;
    ASSERT_EQ(m["tool_calls"].size(), 1u) << named;
    EXPECT_TRUE(m["content"].is_null()) << named;
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    expect_valid_call(m["tool_calls"][0], f.name);

    const json req = post_ok(inst, "/v1/chat/completions", request({{"tool_choice", "required"}}));
    const json& calls = req["choices"][0]["message"]["tool_calls"];
    ASSERT_GE(calls.size(), 1u) << req;
    EXPECT_LE(calls.size(), std::string(f.name) == "llama3" ? 1u : 4u);
    std::set<std::string> ids;
    for (const json& c : calls) {
      expect_valid_call(c, f.name);
      ids.insert(c["id"].get<std::string>());
    }
    EXPECT_EQ(ids.size(), calls.size()) << "ids are unique";
    // parallel_tool_calls false: one call.
    const json one =
        post_ok(inst, "/v1/chat/completions",
                request({{"tool_choice", "required"}, {"parallel_tool_calls", false}}));
    EXPECT_EQ(one["choices"][0]["message"]["tool_calls"].size(), 1u) << one;
  }
}

TEST(ServerTools, StreamedCallsAddUpToTheSameCalls) {
  ServerOptions so;
  so.chat_template = family_template(kFamilies[0]);
  Instance inst(so, false, 1024);
  const json body = request({{"tool_choice", "required"}, {"n", 2}});
  const json plain = post_ok(inst, "/v1/chat/completions", body);
  json sbody = body;
  sbody["stream"] = true;
  auto r = post(inst, "/v1/chat/completions", sbody.dump());
  ASSERT_TRUE(r && r->status == 200);
  bool done = false;
  const std::vector<json> chunks = parse_sse(r->body, &done);
  ASSERT_TRUE(done);
  // Per choice: calls by index; the finish_reason.
  std::map<int, std::map<int, json>> calls;
  std::map<int, std::string> finish;
  for (const json& c : chunks) {
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    const int i = ch["index"];
    if (ch["finish_reason"].is_string()) finish[i] = ch["finish_reason"];
    if (!ch["delta"].contains("tool_calls")) continue;
    for (const json& d : ch["delta"]["tool_calls"]) {
      json& acc = calls[i][d["index"].get<int>()];
      if (d.contains("id")) acc["id"] = d["id"];
      if (d["function"].contains("name")) acc["name"] = d["function"]["name"];
      acc["arguments"] =
          acc.value("arguments", std::string()) + d["function"].value("arguments", std::string());
    }
  }
  for (int i = 0; i < 2; ++i) {
    const json& want = plain["choices"][i]["message"]["tool_calls"];
    ASSERT_EQ(calls[i].size(), want.size()) << i;
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(calls[i][(int)k]["name"], want[k]["function"]["name"]);
      EXPECT_EQ(json::parse(calls[i][(int)k]["arguments"].get<std::string>()),
                json::parse(want[k]["function"]["arguments"].get<std::string>()));
    }
    EXPECT_EQ(finish[i], "tool_calls");
  }
}

TEST(ServerTools, CallsAndResultsGoBackThroughTheTemplate) {
  ServerOptions so;
  so.chat_template = family_template(kFamilies[0]);
  Instance inst(so, false, 1024);
  const json first =
      post_ok(inst, "/v1/chat/completions",
              request({{"tool_choice", {{"type", "function"}, {"function", {{"name", "now"}}}}}}));
  const json& msg = first["choices"][0]["message"];
  const json call = msg["tool_calls"][0];
  json body = request({{"max_tokens", 4}});
  body["messages"].push_back(msg);
  body["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "12:00 UTC"}});
  const json second = post_ok(inst, "/v1/chat/completions", body);
  // The call and the result are in the prompt: it grew by more than the result's text.
  EXPECT_GT(second["usage"]["prompt_tokens"].get<int>(),
            first["usage"]["prompt_tokens"].get<int>() +
                (int)call["function"]["arguments"].get<std::string>().size());
}

// OpenAI clients send a call's arguments as a JSON string: a template that writes them with
// tojson gets the object (or it would write a quoted string), one that writes them as they are
// gets the string (or it would write a Python dict).
TEST(ServerTools, ArgumentsGoToTheTemplateInTheFormItReads) {
  for (const bool tojson : {true, false}) {
    SCOPED_TRACE(tojson ? "tojson" : "as is");
    ServerOptions so;
    so.chat_template =
        std::string(
            "{% if tools %}TOOLS <tool_call>\n{% endif %}"
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
            "{% for c in m.tool_calls or [] %}[") +
        (tojson ? "{{ c.function.arguments | tojson }}" : "{{ c.function.arguments }}") +
        "{% if c.function.arguments is string %} (a string, not an object){% endif %}]{% endfor "
        "%}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    Instance inst(so, false, 1024);
    const std::string args = R"({"city": "Oslo", "days": 2})";
    json msgs = {{{"role", "user"}, {"content", "weather?"}},
                 {{"role", "assistant"},
                  {"content", nullptr},
                  {"tool_calls",
                   {{{"id", "call_1"},
                     {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", args}}}}}}},
                 {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}};
    const json r = post_ok(inst, "/v1/chat/completions",
                           {{"messages", msgs}, {"tools", kTools}, {"max_tokens", 1}});
    const ModelChatTemplate t = model_chat_template(*inst.tok, so.chat_template);
    auto prompt_tokens = [&](const json& arguments) {
      json m = msgs;
      m[1]["content"] = "";
      m[1]["tool_calls"][0]["function"]["arguments"] = arguments;
      return t.tokenize(*inst.tok, t.format(m, true, {{"tools", kTools}})).size();
    };
    const size_t as_object = prompt_tokens(json::parse(args)), as_string = prompt_tokens(args);
    ASSERT_NE(as_object, as_string);
    EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), tojson ? as_object : as_string);
  }
}

// The vendors' templates are the reference for how each 2026 family writes a call: two calls
// rendered by the published template (arguments of every type, a string with '<', quotes and a
// newline) are read back by the parser as the same calls -- Qwen3.5's `| string` booleans
// (True) and newlines around values, MiniMax's tojson values, Gemma 4's notation in dictsort
// order. Rendered without tools, whose preambles show example calls.
TEST(ServerTools, PublishedTemplatesCallsReadBackAsTheSameCalls) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "run",
      "parameters": {"type": "object", "properties": {"src": {"type": "string"},
      "n": {"type": "integer"}, "ok": {"type": "boolean"}, "x": {"type": "number"},
      "opts": {"type": "object"}, "list": {"type": "array"}, "zip": {"type": "string"}}}}}])");
  const json a1 = json::parse(R"js({"src": "if a < b:\n  print(\"<p>\")", "n": 3, "ok": true,
      "x": 2.5, "opts": {"k": [1, "two"]}, "list": ["a", 2], "zip": "75001"})js");
  const json a2 = json::parse(R"({"ok": false})");
  json msgs = {{{"role", "user"}, {"content", "go"}},
               {{"role", "assistant"},
                {"content", ""},
                {"tool_calls",
                 {{{"id", "call_1"},
                   {"type", "function"},
                   {"function", {{"name", "run"}, {"arguments", a1}}}},
                  {{"id", "call_2"},
                   {"type", "function"},
                   {"function", {{"name", "run"}, {"arguments", a2}}}}}}},
               {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "done"}},
               {{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "done"}}};
  for (const char* name : {"qwen35", "minimax_m2", "gemma4", "gemma4_interleaved"}) {
    SCOPED_TRACE(name);
    const std::string source = published_template(name);
    const ToolCallSyntax syntax = detect_tool_call_syntax(source, false);
    const std::string text = ChatTemplate(source).apply(msgs, false, "<s>", "</s>");
    const ToolCallParser::Out r = parse_tool_calls(syntax, text, tools);
    ASSERT_EQ(r.calls.size(), 2u) << text;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(r.calls[i].name, "run");
      // Compared as unordered objects: Gemma 4 writes the keys sorted.
      EXPECT_EQ(nlohmann::json::parse(r.calls[i].arguments),
                nlohmann::json::parse((i == 0 ? a1 : a2).dump()))
          << text;
    }
  }
}

// Gemma 4's template writes an object in its own notation and a string as it is (no JSON to
// probe for): its arguments go in as the object, so the earlier call reads call:NAME{city:...}.
TEST(ServerTools, Gemma4GetsItsArgumentsAsAnObject) {
  ServerOptions so;
  so.chat_template = published_template("gemma4");
  Instance inst(so, false, 4096);
  const std::string args = R"({"city": "Oslo", "days": 2})";
  json msgs = {{{"role", "user"}, {"content", "weather?"}},
               {{"role", "assistant"},
                {"content", nullptr},
                {"tool_calls",
                 {{{"id", "call_1"},
                   {"type", "function"},
                   {"function", {{"name", "get_weather"}, {"arguments", args}}}}}}},
               {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}};
  const json r = post_ok(inst, "/v1/chat/completions",
                         {{"messages", msgs}, {"tools", kTools}, {"max_tokens", 1}});
  const ModelChatTemplate t = model_chat_template(*inst.tok, so.chat_template);
  auto prompt = [&](const json& arguments) {
    json m = msgs;
    m[1]["content"] = "";
    m[1]["tool_calls"][0]["function"]["arguments"] = arguments;
    return t.format(m, true, {{"tools", kTools}});
  };
  const std::string as_object = prompt(json::parse(args));
  EXPECT_NE(as_object.find("<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:2}"),
            std::string::npos)
      << as_object;
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), t.tokenize(*inst.tok, as_object).size());
  EXPECT_NE(t.tokenize(*inst.tok, as_object).size(), t.tokenize(*inst.tok, prompt(args)).size());
}

TEST(ServerTools, WhatCannotBeHonouredIsA400NamingTheField) {
  ServerOptions so;
  so.chat_template = family_template(kFamilies[0]);
  Instance inst(so, false, 1024);
  auto param_of = [&](const json& body, const std::string& code = "") {
    auto r = post(inst, "/v1/chat/completions", body.dump());
    expect_error(r, 400, code);
    return json::parse(r->body)["error"];
  };
  json e = param_of(
      request({{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_wether"}}}}}}));
  EXPECT_EQ(e["param"], "tool_choice");
  EXPECT_NE(e["message"].get<std::string>().find("get_wether"), std::string::npos) << e;
  json no_tools = request({{"tool_choice", "required"}});
  no_tools.erase("tools");
  EXPECT_EQ(param_of(no_tools)["param"], "tool_choice");
  EXPECT_EQ(param_of(request({{"tool_choice", "sometimes"}}))["param"], "tool_choice");
  EXPECT_EQ(
      param_of(request(
          {{"tool_choice",
            {{"type", "function"}, {"function", {{"name", "now"}}}, {"extra", 1}}}}))["param"],
      "tool_choice.extra");
  EXPECT_EQ(param_of(request({{"tool_choice", "required"},
                              {"response_format", {{"type", "json_object"}}}}))["param"],
            "response_format");
  json bad = request({{"tool_choice", "required"}});
  bad["tools"][1]["function"]["parameters"]["properties"]["tz"] = {{"type", "string"},
                                                                   {"pattern", "^[A-Z]+$"}};
  e = param_of(bad, "invalid_tool_parameters");
  EXPECT_NE(e["message"].get<std::string>().find("'now'"), std::string::npos) << e;
  EXPECT_NE(e["message"].get<std::string>().find("pattern"), std::string::npos) << e;
  // A template that shows the tools but no call syntax: the calls could not be read.
  ServerOptions plain;
  plain.chat_template =
      std::string("{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}") + kTurns;
  Instance other(plain, false, 1024);
  auto r = post(other, "/v1/chat/completions", request({}).dump());
  expect_error(r, 400, "tools_not_supported");
  // tool_choice none: no tools, no 400.
  post_ok(other, "/v1/chat/completions", request({{"tool_choice", "none"}, {"max_tokens", 2}}));
  // The 2026 families' published templates: tools are accepted (no tools_not_supported), and a
  // named call comes back in each one's syntax.
  for (const char* name : {"qwen35", "minimax_m2", "gemma4"}) {
    SCOPED_TRACE(name);
    ServerOptions o;
    o.chat_template = published_template(name);
    Instance inst2(o, false, 4096);  // their long tool preambles
    const json r2 = post_ok(
        inst2, "/v1/chat/completions",
        request({{"tool_choice", {{"type", "function"}, {"function", {{"name", "now"}}}}}}));
    ASSERT_EQ(r2["choices"][0]["message"]["tool_calls"].size(), 1u) << r2;
    expect_valid_call(r2["choices"][0]["message"]["tool_calls"][0], name);
  }
}

}  // namespace
}  // namespace moeflow::test::server_tools
