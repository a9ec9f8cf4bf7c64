// Tool calls with the harmony format (gpt-oss) through the server: a tiny generated gpt-oss whose
// vocabulary is bytes plus harmony's control tokens (so the server speaks harmony), a named
// tool_choice forced by the call's header in the prompt and its arguments' schema, the call
// read back from the commentary message to=functions.NAME, and the conversation with the call
// and its result rendered back (openai-harmony's layout: tests/python/test_harmony_format.py);
// "required" with several tools: the name chosen under a grammar of the names, then its call.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "gguf/gguf_writer.h"
#include "server/server_fixture.h"
#include "support/harmony_vocab.h"

namespace moeflow::test::server_harmony_tools {
namespace {

// The tiny gpt-oss of gen-model with its vocabulary replaced: 256 byte tokens + the harmony
// control tokens (264 = its --vocab).
struct HarmonyModelFile {
  std::string path;
  HarmonyModelFile() {
    const std::string base = (std::filesystem::temp_directory_path() /
                              ("moeflow_harmony_base_" + std::to_string(::getpid()) + ".gguf"))
                                 .string();
    path = base + ".harmony.gguf";
    Cmd c = run_cmd("gen-model --arch gpt-oss --preset tiny --vocab 264 -q -o " + shell_quote(base),
                    true);
    if (c.rc != 0) throw std::runtime_error("gen-model failed: " + c.out);
    auto src = GgufFile::open(base);
    GgufWriter w;
    for (const GgufKV& kv : src->metadata())
      if (kv.key.rfind("tokenizer.", 0) != 0) w.set(kv.key, kv.value);
    set_harmony_byte_vocab(w);
    for (const GgufTensorInfo& t : src->tensors())
      w.add_tensor(t.name, t.type, t.dims, src->data(t), t.nbytes);
    w.write(path);
    std::filesystem::remove(base);
  }
  ~HarmonyModelFile() { std::filesystem::remove(path); }
};

struct HarmonyServer {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Server> server;
  explicit HarmonyServer(const std::string& path) {
    file = GgufFile::open(path);
    EngineOptions eo;
    eo.n_threads = 1;
    eo.n_ctx = 2048;
    engine = std::make_unique<Engine>(file, eo);
    tok = Tokenizer::from_gguf(*file);
    ServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    server = std::make_unique<Server>(*engine, *tok, so);
    server->start();
  }
  ~HarmonyServer() { server->stop(); }
  json post_ok(const json& body) const {
    auto r = post(body);
    if (!r || r->status != 200)
      throw std::runtime_error("HTTP " + (r ? std::to_string(r->status) + ": " + r->body : "-"));
    return json::parse(r->body);
  }
  httplib::Result post(const json& body) const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(120, 0);
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }
};

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 6},
      "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])");

TEST(ServerHarmonyTools, NamedCallForcedAndReadBack) {
  HarmonyModelFile model;
  HarmonyServer s(model.path);
  json body = {{"messages", {{{"role", "user"}, {"content", "weather in Oslo?"}}}},
               {"tools", kTools},
               {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
               {"max_tokens", 200},
               {"seed", 5}};
  const json r = s.post_ok(body);
  const json& m = r["choices"][0]["message"];
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r;
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r;
  const json& call = m["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << args;
  if (args.contains("unit")) {
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
  }
  EXPECT_TRUE(m["content"].is_null()) << r;

  // Streamed: the same call in one tool_calls delta.
  json sbody = body;
  sbody["stream"] = true;
  auto sr = s.post(sbody);
  ASSERT_TRUE(sr && sr->status == 200);
  bool done = false;
  json streamed;
  std::string finish;
  for (const json& c : parse_sse(sr->body, &done)) {
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    if (ch["delta"].contains("tool_calls")) streamed = ch["delta"]["tool_calls"][0];
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(streamed["index"], 0);
  EXPECT_EQ(streamed["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(streamed["function"]["arguments"].get<std::string>()), args);

  // The call and its result go back: the prompt grows by more than the result.
  json back = body;
  back.erase("tool_choice");
  back["max_tokens"] = 4;
  back["messages"].push_back(m);
  back["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny, 21 C"}});
  const json second = s.post_ok(back);
  EXPECT_GT(second["usage"]["prompt_tokens"].get<int>(),
            r["usage"]["prompt_tokens"].get<int>() + 11);

  // "required" with one tool is that tool; with several the model writes the name first (a
  // grammar of the names), then the arguments of the one it chose.
  json one = body;
  one["tools"] = json::array({kTools[1]});
  one["tool_choice"] = "required";
  const json o = s.post_ok(one);
  EXPECT_EQ(o["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "now") << o;
  json several = body;
  several["tool_choice"] = "required";
  several["n"] = 6;
  std::set<std::string> chosen;
  const json sv = s.post_ok(several);
  for (const json& ch : sv["choices"]) {
    EXPECT_EQ(ch["finish_reason"], "tool_calls") << sv;
    ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u) << sv;
    const json& c = ch["message"]["tool_calls"][0]["function"];
    chosen.insert(c["name"].get<std::string>());
    const json a = json::parse(c["arguments"].get<std::string>());
    ASSERT_TRUE(a.is_object()) << sv;
    if (c["name"] == "get_weather") {
      EXPECT_TRUE(a.contains("city") && a["city"].is_string()) << a;
    } else {
      EXPECT_EQ(c["name"], "now") << sv;
    }
  }
  EXPECT_FALSE(chosen.empty());
  // A tool reply naming no earlier call: 400 naming the id.
  json orphan = back;
  orphan["messages"][2]["tool_call_id"] = "call_nope";
  auto oe = s.post(orphan);
  expect_error(oe, 400, "");
  EXPECT_NE(oe->body.find("call_nope"), std::string::npos) << oe->body;
}

}  // namespace
}  // namespace moeflow::test::server_harmony_tools
