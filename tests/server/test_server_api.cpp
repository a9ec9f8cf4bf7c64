// The OpenAI surface of the server beyond plain generation: validation answers over HTTP,
// models.retrieve, logprobs (against log-softmax of the engine's own logits), n > 1, echo,
// stream_options.include_usage, penalties and logit_bias, tools through the chat template (and a
// 400 where it renders none), strict fields, prompts refused by their bytes before tokenizing,
// and the prefix cache (a request served after a hit equals one served cold).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "chat_template/chat_template.h"
#include "runtime/prefix_cache.h"
#include "server/text_generation.h"
#include "server_fixture.h"

namespace moeflow::test {
namespace {

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { inst_ = new Instance(ServerOptions{}); }
  static void TearDownTestSuite() {
    delete inst_;
    inst_ = nullptr;
  }
  static Instance* inst_;
  static httplib::Result post(const std::string& path, const std::string& body,
                              const std::string& ct = "application/json") {
    return test::post(*inst_, path, body, ct);
  }
  static json post_ok(const std::string& path, const json& body) {
    return test::post_ok(*inst_, path, body);
  }
  static TextGenResult reference(const std::vector<int32_t>& prompt, const TextGenParams& p) {
    EngineOptions eo;
    eo.n_threads = 1;
    eo.n_ctx = 256;
    Engine eng(inst_->file, eo);
    return generate_text(eng, *inst_->tok, prompt, p);
  }
  static std::vector<int32_t> encode(const std::string& s) {
    return inst_->tok->encode(s, true, true);
  }
};
Instance* ServerApi::inst_ = nullptr;

TEST_F(ServerApi, InvalidFieldsAre400sNamingTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {R"({"prompt":"x","repeat_penalty":0})", "repeat_penalty", "must be > 0"},
      {R"({"prompt":"x","temperature":1e308})", "temperature", "[0, 100]"},
      {R"({"prompt":"x","max_tokens":1e12})", "max_tokens", "integer"},
      {R"({"prompt":"x","n":9})", "n", "[1, 8]"},
      {R"({"prompt":"x","presence_penalty":3})", "presence_penalty", "[-2, 2]"},
      {R"({"prompt":"x","logit_bias":{"99999":1}})", "logit_bias", "token id"},
  };
  for (const Case& c : cases) {
    auto r = post("/v1/completions", c.body);
    expect_error(r, 400, "");
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], c.param) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(c.says), std::string::npos) << r->body;
    EXPECT_EQ(e["type"], "invalid_request_error");
  }
  auto r =
      post("/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",)"
           R"("json_schema":{"name":"x","schema":{"type":"string","pattern":"^a"}}}})");
  expect_error(r, 400, "");
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "response_format");
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("'pattern'"),
            std::string::npos);
  auto h = inst_->client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

// Strict requests over HTTP: a typo is a 400 naming the field (not 983 tokens of a default),
// on both endpoints; roles are checked; tools the template cannot render are refused, not
// dropped; "developer" is the system message of a template that has no such role.
TEST_F(ServerApi, UnknownFieldsRolesAndUnrenderableToolsAre400s) {
  auto r =
      post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_token":3})");
  expect_error(r, 400, "");
  json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["param"], "max_token");
  EXPECT_EQ(e["message"],
            "Unrecognized request argument supplied: 'max_token'; did you mean 'max_tokens'?");
  r = post("/v1/completions", R"({"prompt":"x","stream_options":{"include_usage":true}})");
  expect_error(r, 400, "");  // stream_options without stream
  r = post("/v1/completions", R"({"prompt":"x","messages":[]})");
  expect_error(r, 400, "");
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "messages");
  for (const char* role : {"wizard", ""}) {
    r = post("/v1/chat/completions",
             json{{"messages", {{{"role", role}, {"content", "x"}}}}}.dump());
    expect_error(r, 400, "");
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "messages[0].role") << r->body;
  }
  // The tiny model's template (ChatML) renders no tools.
  const json tools = {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}};
  const json msgs = {{{"role", "user"}, {"content", "weather?"}}};
  r = post("/v1/chat/completions", json{{"messages", msgs}, {"tools", tools}}.dump());
  expect_error(r, 400, "tools_not_supported");
  e = json::parse(r->body)["error"];
  EXPECT_EQ(e["param"], "tools");
  EXPECT_NE(e["message"].get<std::string>().find("tool calling is not supported"),
            std::string::npos);
  EXPECT_NO_THROW(
      post_ok("/v1/chat/completions",
              {{"messages", msgs}, {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 1}}));
  // developer -> system: the same prompt and the same greedy answer.
  auto ask = [&](const char* role) {
    return post_ok("/v1/chat/completions",
                   {{"messages", {{{"role", role}, {"content", "Be brief."}}, msgs[0]}},
                    {"max_tokens", 4},
                    {"temperature", 0}});
  };
  const json dev = ask("developer"), sys = ask("system");
  EXPECT_EQ(dev["usage"]["prompt_tokens"], sys["usage"]["prompt_tokens"]);
  EXPECT_EQ(dev["choices"][0]["message"], sys["choices"][0]["message"]);
}

// A prompt whose bytes alone prove it cannot fit the context is refused before it is tokenized
// (or rendered): the message gives the bound, and the time is that of reading the body.
TEST_F(ServerApi, PromptsTooLongByTheirBytesAreRefusedBeforeTokenizing) {
  const std::string big(3u << 20, 'a');  // 3 MiB; the context is 256 tokens
  for (const bool chat : {false, true}) {
    const json body =
        chat ? json{{"messages", {{{"role", "user"}, {"content", big}}}}} : json{{"prompt", big}};
    const auto t0 = std::chrono::steady_clock::now();
    auto r = post(chat ? "/v1/chat/completions" : "/v1/completions", body.dump());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    expect_error(r, 400, "context_length_exceeded");
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], chat ? "messages" : "prompt");
    EXPECT_NE(e["message"].get<std::string>().find("at least"), std::string::npos) << r->body;
    RecordProperty(chat ? "chat_3mb_refused_ms" : "completion_3mb_refused_ms",
                   std::to_string((int)ms));
  }
  // Whitespace does not count (a template may trim it); a prompt just over the context by
  // tokens, not provably by bytes, is still refused after tokenizing.
  auto r = post("/v1/completions", json{{"prompt", std::string(64u << 10, ' ')}}.dump());
  ASSERT_TRUE(r);
  if (r->status == 400) {
    EXPECT_EQ(json::parse(r->body)["error"]["message"].get<std::string>().find("at least"),
              std::string::npos);
  }
  std::string words;
  for (int i = 0; i < 300; ++i) words += "w" + std::to_string(i) + " ";
  r = post("/v1/completions", json{{"prompt", words}}.dump());
  expect_error(r, 400, "context_length_exceeded");
  EXPECT_EQ(json::parse(r->body)["error"]["message"].get<std::string>().find("at least"),
            std::string::npos);
}

TEST_F(ServerApi, ModelsRetrieveAndTheChatTemplateText) {
  auto c = inst_->client();
  auto m = c.Get("/v1/models/tiny");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  const json j = json::parse(m->body);
  EXPECT_EQ(j["id"], "tiny");
  EXPECT_EQ(j["object"], "model");
  EXPECT_EQ(j["meta"]["chat_template"], std::string(kChatMlTemplate));
  EXPECT_NE(j["meta"]["chat_template_origin"].get<std::string>().find("ChatML"), std::string::npos);
  EXPECT_EQ(json::parse(c.Get("/v1/models")->body)["data"][0]["meta"]["chat_template"],
            std::string(kChatMlTemplate));
  expect_error(c.Get("/v1/models/gpt-4"), 404, "model_not_found");
}

TEST_F(ServerApi, BodiesAreJsonWhateverTheContentType) {
  // curl -d sends application/x-www-form-urlencoded; bodies over 8 KiB used to get a bare 413.
  const json body = {{"prompt", "hi"}, {"max_tokens", 2}, {"user", std::string(20000, 'u')}};
  for (const char* ct : {"application/x-www-form-urlencoded", "text/plain", ""}) {
    auto r = post("/v1/completions", body.dump(), ct);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << ct << ": " << r->body;
  }
  auto mp = post("/v1/completions", "--x--", "multipart/form-data; boundary=x");
  expect_error(mp, 415, "");
}

TEST_F(ServerApi, OversizedBodiesGetAJson413NamingTheLimit) {
  const std::string big(9u << 20, ' ');
  auto r = post("/v1/chat/completions", big);
  expect_error(r, 413, "");
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("limit is 8388608"),
            std::string::npos)
      << r->body;
}

// log-softmax of the engine's logits for the prompt, in double.
std::vector<double> reference_logprobs(const Instance& inst, const std::vector<int32_t>& prompt) {
  EngineOptions eo;
  eo.n_threads = 1;
  eo.n_ctx = 256;
  Engine eng(inst.file, eo);
  std::vector<float> l;
  eng.prefill(prompt, false, &l);
  double mx = -INFINITY, sum = 0;
  for (float v : l) mx = std::max(mx, (double)v);
  for (float v : l) sum += std::exp(v - mx);
  std::vector<double> out;
  for (float v : l) out.push_back(v - mx - std::log(sum));
  return out;
}

TEST_F(ServerApi, ChatLogprobsAreLogSoftmaxOfTheModel) {
  const json msgs = {{{"role", "user"}, {"content", "Tell me"}}};
  const json j = post_ok("/v1/chat/completions", {{"messages", msgs},
                                                  {"max_tokens", 6},
                                                  {"temperature", 0},
                                                  {"ignore_eos", true},
                                                  {"logprobs", true},
                                                  {"top_logprobs", 3}});
  const json& lp = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 6u) << j.dump();
  for (const json& t : lp) {
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
    EXPECT_FLOAT_EQ(t["top_logprobs"][0]["logprob"].get<float>(), t["logprob"].get<float>());
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(),
              t["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
  }
  // The first token's logprob against the model's logits.
  const ModelChatTemplate t = model_chat_template(*inst_->tok);
  const std::vector<int32_t> prompt = t.tokenize(*inst_->tok, t.format(msgs, true));
  const std::vector<double> ref = reference_logprobs(*inst_, prompt);
  const int32_t first = (int32_t)(std::max_element(ref.begin(), ref.end()) - ref.begin());
  EXPECT_NEAR(lp[0]["logprob"].get<double>(), ref[(size_t)first], 1e-5);
  std::vector<double> sorted = ref;
  std::sort(sorted.rbegin(), sorted.rend());
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(lp[0]["top_logprobs"][k]["logprob"].get<double>(), sorted[(size_t)k], 1e-5);
  // Logprobs are the model's, before the logit bias: forcing a token with +100 reports its raw
  // logprob, and the alternatives stay the model's.
  int32_t forced = -1;
  for (int32_t id = 256; id < inst_->tok->n_vocab() && forced < 0; ++id) {
    const std::string p = inst_->tok->token_to_piece(id);
    if (p.size() >= 2 &&
        std::all_of(p.begin(), p.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
      forced = id;
  }
  ASSERT_GE(forced, 0);
  const json b = post_ok("/v1/chat/completions", {{"messages", msgs},
                                                  {"max_tokens", 3},
                                                  {"temperature", 0},
                                                  {"ignore_eos", true},
                                                  {"logprobs", true},
                                                  {"top_logprobs", 1},
                                                  {"logit_bias", {{std::to_string(forced), 100}}}});
  const json& blp = b["choices"][0]["logprobs"]["content"];
  const std::string piece = inst_->tok->token_to_piece(forced);
  EXPECT_EQ(b["choices"][0]["message"]["content"], piece + piece + piece);
  ASSERT_EQ(blp.size(), 3u);
  std::string joined;
  for (const json& t : blp) {
    EXPECT_EQ(t["token"], piece);
    for (const json& x : t["bytes"]) joined += (char)x.get<int>();
  }
  EXPECT_EQ(joined, piece + piece + piece);
  EXPECT_NEAR(blp[0]["logprob"].get<double>(), ref[(size_t)forced], 1e-5);
  EXPECT_NEAR(blp[0]["top_logprobs"][0]["logprob"].get<double>(), sorted[0], 1e-5);
  // No logprobs unless asked.
  EXPECT_TRUE(post_ok("/v1/chat/completions",
                      {{"messages", msgs}, {"max_tokens", 2}})["choices"][0]["logprobs"]
                  .is_null());
}

TEST_F(ServerApi, CompletionLogprobsLegacyLayoutAndStreaming) {
  const json req = {{"prompt", "Once upon"},
                    {"max_tokens", 8},
                    {"temperature", 0},
                    {"ignore_eos", true},
                    {"logprobs", 2}};
  const json j = post_ok("/v1/completions", req);
  const json& lp = j["choices"][0]["logprobs"];
  const std::string text = j["choices"][0]["text"];
  ASSERT_EQ(lp["tokens"].size(), 8u);
  // Offsets start at 0 and never go back or past the text (a token that is part of a character
  // starts where the character does).
  size_t prev = 0;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    const size_t off = lp["text_offset"][i].get<size_t>();
    if (i == 0) {
      EXPECT_EQ(off, 0u);
    }
    EXPECT_GE(off, prev);
    EXPECT_LT(off, text.size());
    prev = off;
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
  }
  json sreq = req;
  sreq["stream"] = true;
  auto r = post("/v1/completions", sreq.dump());
  ASSERT_TRUE(r);
  bool done = false;
  json tokens = json::array(), lps = json::array();
  for (const json& c : parse_sse(r->body, &done)) {
    const json& l = c["choices"][0]["logprobs"];
    if (l.is_null()) continue;
    for (const json& t : l["tokens"]) tokens.push_back(t);
    for (const json& t : l["token_logprobs"]) lps.push_back(t);
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(lps, lp["token_logprobs"]);
}

// Logprob entries follow the text: a stop string keeps the entries of the tokens before it.
TEST_F(ServerApi, LogprobsStopWhereTheTextStops) {
  const json base = {{"prompt", "Once upon a time"},
                     {"max_tokens", 30},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"logprobs", 1}};
  const json full = post_ok("/v1/completions", base)["choices"][0];
  const std::string text = full["text"];
  size_t i = text.size() / 2;
  while (!utf8_boundary(text, i)) ++i;
  size_t e = i + 1;
  while (!utf8_boundary(text, e)) ++e;
  ASSERT_LT(e, text.size());
  const std::string stop = text.substr(i, e - i);
  json req = base;
  req["stop"] = stop;
  const json cut = post_ok("/v1/completions", req)["choices"][0];
  const std::string got = cut["text"];
  ASSERT_EQ(got, text.substr(0, text.find(stop)));
  const json& a = full["logprobs"];
  const json& b = cut["logprobs"];
  ASSERT_LE(b["tokens"].size(), a["tokens"].size());
  for (size_t k = 0; k < b["tokens"].size(); ++k) {
    EXPECT_EQ(b["tokens"][k], a["tokens"][k]);
    EXPECT_EQ(b["token_logprobs"][k], a["token_logprobs"][k]);
    EXPECT_LT(b["text_offset"][k].get<size_t>(), std::max<size_t>(got.size(), 1));
  }
  // Every token whose text starts before the stop string is there.
  size_t expected = 0;
  while (expected < a["tokens"].size() && a["text_offset"][expected].get<size_t>() < got.size())
    ++expected;
  EXPECT_EQ(b["tokens"].size(), expected);
}

TEST_F(ServerApi, SeveralChoicesEachEqualASingleRequestWithTheNextSeed) {
  const json base = {{"prompt", "Count"}, {"max_tokens", 10}, {"temperature", 1.0}, {"top_k", 0},
                     {"top_p", 1.0},      {"min_p", 0},       {"ignore_eos", true}, {"seed", 500}};
  json req = base;
  req["n"] = 3;
  const json j = post_ok("/v1/completions", req);
  ASSERT_EQ(j["choices"].size(), 3u);
  int completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    json one = base;
    one["seed"] = 500 + i;
    const json s = post_ok("/v1/completions", one);
    EXPECT_EQ(j["choices"][i]["text"], s["choices"][0]["text"]) << i;
    completion += s["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], completion);
  EXPECT_EQ(j["usage"]["prompt_tokens"], encode("Count").size());
  // Streamed: pieces carry their index and reassemble per choice.
  req["stream"] = true;
  auto r = post("/v1/completions", req.dump());
  ASSERT_TRUE(r);
  bool done = false;
  std::vector<std::string> texts(3);
  std::vector<int> finishes(3, 0);
  for (const json& c : parse_sse(r->body, &done)) {
    const json& ch = c["choices"][0];
    texts[ch["index"].get<size_t>()] += ch["text"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finishes[ch["index"].get<size_t>()]++;
  }
  EXPECT_TRUE(done);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(texts[(size_t)i], j["choices"][i]["text"]) << i;
    EXPECT_EQ(finishes[(size_t)i], 1) << i;
  }
}

TEST_F(ServerApi, EchoPutsThePromptFirst) {
  const json req = {
      {"prompt", "The quick brown"}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string plain = post_ok("/v1/completions", req)["choices"][0]["text"];
  json e = req;
  e["echo"] = true;
  EXPECT_EQ(post_ok("/v1/completions", e)["choices"][0]["text"], "The quick brown" + plain);
  e["stream"] = true;
  auto r = post("/v1/completions", e.dump());
  ASSERT_TRUE(r);
  bool done = false;
  json last;
  EXPECT_EQ(reassemble(parse_sse(r->body, &done), false, &last), "The quick brown" + plain);
}

TEST_F(ServerApi, IncludeUsageAddsAFinalUsageChunk) {
  const json req = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                    {"max_tokens", 5},
                    {"temperature", 0},
                    {"ignore_eos", true},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
  auto r = post("/v1/chat/completions", req.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  bool done = false;
  const auto chunks = parse_sse(r->body, &done);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_TRUE(done);
  const json& last = chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 5);
  for (size_t i = 0; i + 1 < chunks.size(); ++i)
    EXPECT_TRUE(chunks[i]["usage"].is_null()) << chunks[i].dump();
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerApi, PenaltiesAndLogitBiasMatchTheEngineReference) {
  const std::vector<int32_t> prompt = encode("A story about a cat and a dog");
  TextGenParams p;
  p.max_tokens = 16;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.sampling.frequency_penalty = 1.5f;
  p.sampling.presence_penalty = 0.5f;
  const json req = {{"prompt", prompt},   {"max_tokens", 16},         {"temperature", 0},
                    {"ignore_eos", true}, {"frequency_penalty", 1.5}, {"presence_penalty", 0.5}};
  const json j = post_ok("/v1/completions", req);
  EXPECT_EQ(j["choices"][0]["text"], reference(prompt, p).text);
  // Penalties change greedy text here (else the test above proves nothing).
  TextGenParams plain = p;
  plain.sampling.frequency_penalty = plain.sampling.presence_penalty = 0;
  EXPECT_NE(reference(prompt, plain).text, j["choices"][0]["text"]);
  // A +100 bias makes a token the only greedy choice; -100 bans the greedy one.
  const int32_t forced = 300;
  const json f = post_ok("/v1/completions", {{"prompt", prompt},
                                             {"max_tokens", 4},
                                             {"temperature", 0},
                                             {"ignore_eos", true},
                                             {"logit_bias", {{"300", 100}}},
                                             {"logprobs", 0}});
  for (const json& t : f["choices"][0]["logprobs"]["tokens"])
    EXPECT_EQ(t, inst_->tok->token_to_piece(forced)) << f.dump();
  const json g =
      post_ok("/v1/completions",
              {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 0}});
  const std::string greedy_first = g["choices"][0]["logprobs"]["tokens"][0];
  int32_t greedy_id = -1;
  for (int32_t id = 0; id < inst_->tok->n_vocab() && greedy_id < 0; ++id)
    if (inst_->tok->token_to_piece(id) == greedy_first) greedy_id = id;
  ASSERT_GE(greedy_id, 0);
  const json b = post_ok("/v1/completions", {{"prompt", prompt},
                                             {"max_tokens", 1},
                                             {"temperature", 0},
                                             {"logprobs", 0},
                                             {"logit_bias", {{std::to_string(greedy_id), -100}}}});
  EXPECT_NE(b["choices"][0]["logprobs"]["tokens"][0], greedy_first);
}

TEST(ServerTemplate, ToolsArePassedToTheChatTemplate) {
  ServerOptions so;
  so.chat_template =
      "{% if tools %}TOOLS {{ tools | tojson }} (call one as <tool_call>{...}</tool_call>)\n"
      "{% endif %}"
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  Instance inst(so);
  const json msgs = {{{"role", "user"}, {"content", "weather?"}}};
  const json tools = {{{"type", "function"},
                       {"function", {{"name", "get_weather"}, {"parameters", json::object()}}}}};
  const json with = post_ok(inst, "/v1/chat/completions",
                            {{"messages", msgs}, {"tools", tools}, {"max_tokens", 1}});
  const json without =
      post_ok(inst, "/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 1}});
  const json none =
      post_ok(inst, "/v1/chat/completions",
              {{"messages", msgs}, {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 1}});
  const ModelChatTemplate t = model_chat_template(*inst.tok, so.chat_template);
  json ctx = {{"messages", msgs},
              {"add_generation_prompt", true},
              {"bos_token", t.bos_token},
              {"eos_token", t.eos_token},
              {"tools", tools}};
  const std::string rendered = t.tmpl.render(ctx);
  ASSERT_NE(rendered.find("get_weather"), std::string::npos);
  EXPECT_EQ(with["usage"]["prompt_tokens"], t.tokenize(*inst.tok, rendered).size());
  EXPECT_GT(with["usage"]["prompt_tokens"].get<int>(),
            without["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(none["usage"]["prompt_tokens"], without["usage"]["prompt_tokens"]);
}

// A multi-turn chat on a server with the prefix cache and on one without: the same text and
// logprobs (bit-identical logits), the later turns served mostly from the cache.
TEST(ServerPrefixCache, TurnsAfterAHitEqualColdTurns) {
  ServerOptions cold_opt;
  cold_opt.prefix_cache = false;
  Instance warm(ServerOptions{}, false, 1024), cold(cold_opt, false, 1024);
  json msgs = json::array({{{"role", "system"}, {"content", "Be brief."}}});
  int previous_prompt = 0;
  for (int turn = 0; turn < 4; ++turn) {
    msgs.push_back({{"role", "user"}, {"content", "question number " + std::to_string(turn)}});
    const json req = {{"messages", msgs},   {"max_tokens", 8},  {"temperature", 0},
                      {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 2}};
    const json w = post_ok(warm, "/v1/chat/completions", req);
    const json c = post_ok(cold, "/v1/chat/completions", req);
    EXPECT_EQ(w["choices"][0]["message"], c["choices"][0]["message"]) << turn;
    EXPECT_EQ(w["choices"][0]["logprobs"], c["choices"][0]["logprobs"]) << turn;
    EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    if (turn > 0) {
      EXPECT_GE(w["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), previous_prompt)
          << turn;
    }
    previous_prompt = w["usage"]["prompt_tokens"];
    msgs.push_back({{"role", "assistant"}, {"content", w["choices"][0]["message"]["content"]}});
  }
  const uint64_t cached = metric(warm.server->metrics(), "moeflow_prompt_tokens_cached_total");
  EXPECT_GT(cached, 0u);
  EXPECT_EQ(metric(cold.server->metrics(), "moeflow_prompt_tokens_cached_total"), 0u);
}

// The same chat on a hybrid model (qwen35moe: gated DeltaNet layers): with state snapshots the
// next turn goes back to the previous prompt's snapshot even where the reply's tokens differ
// from its re-rendered text, with the bits of a server without a prefix cache; without snapshots
// (the behaviour before them) a turn whose prompt diverges inside the held tokens starts over.
TEST(ServerPrefixCache, HybridTurnsGoBackToAStateSnapshotAndEqualColdTurns) {
  const std::string path =
      ::testing::TempDir() + "/server_tiny_qwen35moe_" + std::to_string(getpid()) + ".gguf";
  const Cmd g =
      run_cmd("gen-model --arch qwen35moe --preset tiny -q -o " + shell_quote(path), true);
  ASSERT_EQ(g.rc, 0) << g.out;
  ServerOptions cold_opt;
  cold_opt.prefix_cache = false;
  Instance snap(ServerOptions{}, false, 1024, path, 8), plain(ServerOptions{}, false, 1024, path),
      cold(cold_opt, false, 1024, path);
  json msgs = json::array({{{"role", "system"}, {"content", "Be brief."}}});
  int previous_prompt = 0, reused_snap = 0, reused_plain = 0, prompts = 0;
  for (int turn = 0; turn < 3; ++turn) {
    msgs.push_back({{"role", "user"}, {"content", "question number " + std::to_string(turn)}});
    const json req = {{"messages", msgs},   {"max_tokens", 8},  {"temperature", 0},
                      {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 2}};
    const json s = post_ok(snap, "/v1/chat/completions", req);
    const json p = post_ok(plain, "/v1/chat/completions", req);
    const json c = post_ok(cold, "/v1/chat/completions", req);
    EXPECT_EQ(s["choices"][0]["message"], c["choices"][0]["message"]) << turn;
    EXPECT_EQ(s["choices"][0]["logprobs"], c["choices"][0]["logprobs"]) << turn;
    EXPECT_EQ(p["choices"][0]["logprobs"], c["choices"][0]["logprobs"]) << turn;
    const int cached = s["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (turn > 0) {  // back to the snapshot before the previous prompt's last token, at least
      EXPECT_GE(cached, previous_prompt - 1) << turn;
    }
    reused_snap += cached;
    reused_plain += p["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    previous_prompt = s["usage"]["prompt_tokens"];
    prompts += previous_prompt;
    msgs.push_back({{"role", "assistant"}, {"content", s["choices"][0]["message"]["content"]}});
  }
  EXPECT_GT(reused_snap, reused_plain);
  // A regenerated reply (the last prompt again, after its reply diverged from it): everything
  // but the prompt's last token comes from the snapshot taken before it, with the same bits.
  msgs.erase(msgs.end() - 1);
  const json again = {{"messages", msgs},
                      {"max_tokens", 8},
                      {"temperature", 0},
                      {"ignore_eos", true},
                      {"logprobs", true}};
  const json s = post_ok(snap, "/v1/chat/completions", again);
  const json c = post_ok(cold, "/v1/chat/completions", again);
  EXPECT_EQ(s["choices"][0]["logprobs"], c["choices"][0]["logprobs"]);
  EXPECT_EQ(s["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            s["usage"]["prompt_tokens"].get<int>() - 1);
  std::printf(
      "hybrid chat, 3 turns, %d prompt tokens: %d reused with state snapshots, %d without\n",
      prompts, reused_snap, reused_plain);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moeflow::test
