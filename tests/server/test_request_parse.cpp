// Request parsing without a model: every malformed field is a 4xx naming it, every accepted
// field lands in the generation parameters, and oversized bodies are refused before objects are
// built (memory bounded by the limits, not by the body).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/request_parse.h"

namespace moeflow::test {
namespace {

using json = nlohmann::ordered_json;

RequestContext context() {
  RequestContext c;
  c.model_id = "tiny";
  c.n_vocab = 512;
  c.sampling.temperature = 0.5f;
  c.default_max_tokens = 77;
  return c;
}

GenerationRequest chat(const json& extra) {
  json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  if (!extra.is_null()) b.update(extra);
  return parse_generation_request(b.dump(), Endpoint::Chat, context());
}

GenerationRequest completion(const json& extra) {
  json b = {{"prompt", "hi"}};
  b.update(extra);
  return parse_generation_request(b.dump(), Endpoint::Completion, context());
}

// The error of a request expected to fail.
RequestError error_of(const std::string& body, Endpoint ep = Endpoint::Chat,
                      RequestContext ctx = context()) {
  try {
    parse_generation_request(body, ep, ctx);
  } catch (const RequestError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.substr(0, 200);
  return RequestError(0, "");
}

std::string with_messages(const json& extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  if (!extra.is_null()) b.update(extra);
  return b.dump();
}

TEST(RequestParse, EveryMalformedFieldIsA400NamingIt) {
  struct Case {
    std::string body;
    Endpoint ep;
    const char* param;
  };
  const Endpoint C = Endpoint::Chat, P = Endpoint::Completion;
  const std::vector<Case> cases = {
      {with_messages({{"repeat_penalty", 0}}), C, "repeat_penalty"},
      {with_messages({{"repeat_penalty", -1.5}}), C, "repeat_penalty"},
      {with_messages({{"temperature", 1e308}}), C, "temperature"},
      {with_messages({{"temperature", -0.1}}), C, "temperature"},
      {with_messages({{"temperature", "hot"}}), C, "temperature"},
      {with_messages({{"top_p", 1.5}}), C, "top_p"},
      {with_messages({{"min_p", -1}}), C, "min_p"},
      {with_messages({{"top_k", 1.5}}), C, "top_k"},
      {with_messages({{"top_k", -5}}), C, "top_k"},
      {with_messages({{"repeat_last_n", -2}}), C, "repeat_last_n"},
      {with_messages({{"presence_penalty", 2.5}}), C, "presence_penalty"},
      {with_messages({{"frequency_penalty", -9}}), C, "frequency_penalty"},
      {with_messages({{"max_tokens", 1e12}}), C, "max_tokens"},
      {with_messages({{"max_tokens", 4.5}}), C, "max_tokens"},
      {with_messages({{"max_tokens", "4"}}), C, "max_tokens"},
      {with_messages({{"max_tokens", 0}}), C, "max_tokens"},
      {with_messages({{"max_tokens", 2147483648LL}}), C, "max_tokens"},
      {with_messages({{"max_completion_tokens", -3}}), C, "max_completion_tokens"},
      {with_messages({{"seed", 0.5}}), C, "seed"},
      {with_messages({{"seed", "x"}}), C, "seed"},
      {with_messages({{"n", 0}}), C, "n"},
      {with_messages({{"n", 9}}), C, "n"},
      {with_messages({{"best_of", 3}}), C, "best_of"},
      {with_messages({{"stream", "yes"}}), C, "stream"},
      {with_messages({{"stream_options", {{"include_usage", true}}}}), C, "stream_options"},
      {with_messages({{"stream", true}, {"stream_options", 5}}), C, "stream_options"},
      {with_messages({{"stream", true}, {"stream_options", {{"include_usage", 1}}}}), C,
       "include_usage"},
      {with_messages({{"ignore_eos", 1}}), C, "ignore_eos"},
      {with_messages({{"stop", 5}}), C, "stop"},
      {with_messages({{"stop", {"a", 5}}}), C, "stop"},
      {with_messages({{"stop", std::vector<std::string>(17, "x")}}), C, "stop"},
      {with_messages({{"stop", std::string(300, 'x')}}), C, "stop"},
      {with_messages({{"logit_bias", {{"abc", 1}}}}), C, "logit_bias"},
      {with_messages({{"logit_bias", {{"512", 1}}}}), C, "logit_bias"},
      {with_messages({{"logit_bias", {{"-1", 1}}}}), C, "logit_bias"},
      {with_messages({{"logit_bias", {{"5", 101}}}}), C, "logit_bias"},
      {with_messages({{"logit_bias", {{"5", "up"}}}}), C, "logit_bias"},
      {with_messages({{"logit_bias", {1, 2}}}), C, "logit_bias"},
      {with_messages({{"logprobs", 1}}), C, "logprobs"},
      {with_messages({{"top_logprobs", 2}}), C, "top_logprobs"},
      {with_messages({{"logprobs", true}, {"top_logprobs", 21}}), C, "top_logprobs"},
      {with_messages({{"response_format", {{"type", "xml"}}}}), C, "response_format"},
      {with_messages(
           {{"response_format",
             {{"type", "json_schema"},
              {"json_schema", {{"schema", {{"type", "string"}, {"format", "email"}}}}}}}}),
       C, "response_format"},
      {with_messages(
           {{"response_format", {{"type", "json_schema"}, {"json_schema", json::object()}}}}),
       C, "response_format"},
      {with_messages({{"response_format", "text"}}), C, "response_format"},
      {with_messages({{"tools", {{"type", "function"}}}}), C, "tools"},
      {with_messages({{"tools", {1}}}), C, "tools"},
      {with_messages({{"tool_choice", "required"}}), C, "tool_choice"},
      {with_messages({{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}), C,
       "tool_choice"},
      {with_messages({{"functions", json::array()}}), C, "functions"},
      {with_messages({{"function_call", "auto"}}), C, "function_call"},
      {with_messages({{"model", 5}}), C, "model"},
      {R"({"messages": []})", C, "messages"},
      {R"({"messages": {}})", C, "messages"},
      {R"({"max_tokens": 4})", C, "messages"},
      {R"({"messages": [{"content": "no role"}]})", C, "messages"},
      {R"({"messages": [{"role": 1, "content": "x"}]})", C, "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", C, "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       C, "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", C, "messages"},
      {R"({"messages": [{"role": "user", "content": [5]}]})", C, "messages"},
      {R"({"prompt": 5})", P, "prompt"},
      {R"({"prompt": []})", P, "prompt"},
      {R"({"prompt": ["a", "b"]})", P, "prompt"},
      {R"({"prompt": [[1, 2], [3]]})", P, "prompt"},
      {R"({"prompt": [1, "a"]})", P, "prompt"},
      {R"({"prompt": [1, 512]})", P, "prompt"},
      {R"({"prompt": [1, -1]})", P, "prompt"},
      {R"({"prompt": [1, 2.5]})", P, "prompt"},
      {R"({"max_tokens": 3})", P, "prompt"},
      {R"({"prompt": "x", "suffix": "y"})", P, "suffix"},
      {R"({"prompt": "x", "echo": "yes"})", P, "echo"},
      {R"({"prompt": "x", "logprobs": 6})", P, "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", P, "logprobs"},
      {R"({"prompt": "x", "echo": true, "logprobs": 1})", P, "echo"},
  };
  for (const Case& c : cases) {
    const RequestError e = error_of(c.body, c.ep);
    EXPECT_EQ(e.status, 400) << c.body << " -> " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
    // The message names the field (the top-level one for nested problems).
    const std::string top = e.param == "include_usage" ? "include_usage" : c.param;
    EXPECT_NE(e.message.find(top == "messages" ? "messages" : top), std::string::npos) << e.message;
  }
}

TEST(RequestParse, MessagesSayWhatIsExpected) {
  EXPECT_EQ(error_of(with_messages({{"repeat_penalty", 0}})).message,
            "'repeat_penalty' must be > 0 and <= 100 (1 = off), got 0");
  EXPECT_EQ(error_of(with_messages({{"temperature", 1e308}})).message,
            "'temperature' must be in [0, 100] (0 = greedy), got 1e+308");
  const std::string mt = error_of(with_messages({{"max_tokens", 1e12}})).message;
  EXPECT_NE(mt.find("'max_tokens' must be an integer in [1, 2147483647]"), std::string::npos) << mt;
  const std::string rf =
      error_of(with_messages(
                   {{"response_format",
                     {{"type", "json_schema"},
                      {"json_schema",
                       {{"name", "n"},
                        {"schema",
                         {{"properties", {{"a", {{"type", "string"}, {"pattern", "x"}}}}}}}}}}}}))
          .message;
  EXPECT_NE(rf.find("'pattern' is not supported (at /properties/a)"), std::string::npos) << rf;
}

TEST(RequestParse, BodyLevelErrors) {
  EXPECT_EQ(error_of("").status, 400);
  EXPECT_NE(error_of("   ").message.find("empty"), std::string::npos);
  const RequestError nj = error_of("{not json");
  EXPECT_EQ(nj.status, 400);
  EXPECT_NE(nj.message.find("not valid JSON"), std::string::npos) << nj.message;
  EXPECT_NE(error_of("[1, 2]").message.find("JSON object"), std::string::npos);
  EXPECT_NE(error_of("{\"messages\": [1]} trailing").message.find("not valid JSON"),
            std::string::npos);
  const RequestError m = error_of(with_messages({{"model", "gpt-4"}}));
  EXPECT_EQ(m.status, 404);
  EXPECT_EQ(m.code, "model_not_found");
  EXPECT_EQ(m.param, "model");
  // Deep nesting is refused before the recursive descent could get near the stack's end.
  std::string deep = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"x\": ";
  for (int i = 0; i < 100000; ++i) deep += "[";
  const RequestError d = error_of(deep);
  EXPECT_EQ(d.status, 400);
  EXPECT_NE(d.message.find("deeper than 64"), std::string::npos) << d.message;
}

TEST(RequestParse, OversizedBodiesAreRefusedBeforeBuildingObjects) {
  RequestContext ctx = context();
  // 490k tiny messages (the 16.6 MB body that used to peak at 1.56 GB): over the body limit.
  std::string huge = "{\"messages\": [";
  for (int i = 0; i < 490000; ++i)
    huge += std::string(i ? "," : "") + "{\"role\":\"user\",\"content\":\"a\"}";
  huge += "]}";
  const RequestError big = error_of(huge, Endpoint::Chat, ctx);
  EXPECT_EQ(big.status, 413);
  EXPECT_NE(big.message.find("limit"), std::string::npos) << big.message;
  // Under the byte limit, over the message limit: refused by the pre-scan, counted, not built.
  ctx.limits.max_body_bytes = 32u << 20;
  const RequestError many = error_of(huge, Endpoint::Chat, ctx);
  EXPECT_EQ(many.status, 400);
  EXPECT_EQ(many.param, "messages");
  EXPECT_EQ(many.message, "'messages' has more than 4096 entries");
  // Many values of other kinds, and long strings.
  std::string values = with_messages();
  values.pop_back();
  values += ", \"x\": [";
  for (int i = 0; i < 300000; ++i) values += i ? ",1" : "1";
  values += "]}";
  EXPECT_NE(error_of(values, Endpoint::Chat, ctx).message.find("more than 262144 JSON values"),
            std::string::npos);
  const std::string text = with_messages({{"x", std::string(5u << 20, 'a')}});
  EXPECT_NE(error_of(text, Endpoint::Chat, ctx).message.find("bytes of strings"),
            std::string::npos);
  // Exactly at the message limit is fine.
  json ok = {{"messages", json::array()}};
  for (int i = 0; i < 4096; ++i) ok["messages"].push_back({{"role", "user"}, {"content", "a"}});
  EXPECT_EQ(parse_generation_request(ok.dump(), Endpoint::Chat, ctx).messages.size(), 4096u);
}

TEST(RequestParse, AcceptedFieldsReachTheGenerationParameters) {
  const GenerationRequest d = chat({});
  EXPECT_EQ(d.gen.max_tokens, 77);  // the server's default
  EXPECT_FLOAT_EQ(d.gen.sampling.temperature, 0.5f);
  EXPECT_FALSE(d.seed_given);
  EXPECT_EQ(d.n, 1);
  EXPECT_FALSE(d.stream);
  EXPECT_TRUE(d.tools.is_null());

  const GenerationRequest r =
      chat({{"temperature", 0},
            {"top_p", 0.9},
            {"top_k", 7},
            {"min_p", 0.1},
            {"repeat_penalty", 1.1},
            {"repeat_last_n", 32},
            {"presence_penalty", 0.5},
            {"frequency_penalty", -0.25},
            {"logit_bias", {{"5", -100}, {"17", 2.5}}},
            {"seed", 42},
            {"stop", {"\n", "END"}},
            {"ignore_eos", true},
            {"n", 3},
            {"max_tokens", 9},
            {"max_completion_tokens", 11},
            {"logprobs", true},
            {"top_logprobs", 4},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"user", "someone"},
            {"response_format", {{"type", "text"}}},
            {"tool_choice", "auto"},
            {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}});
  const SamplerParams& s = r.gen.sampling;
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 7);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_FLOAT_EQ(s.repeat_penalty, 1.1f);
  EXPECT_EQ(s.repeat_last_n, 32);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.25f);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0], std::make_pair(5, -100.0f));
  EXPECT_EQ(s.logit_bias[1], std::make_pair(17, 2.5f));
  EXPECT_EQ(s.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.gen.ignore_eos);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.gen.max_tokens, 11);  // max_completion_tokens wins
  EXPECT_TRUE(r.gen.logprobs);
  EXPECT_EQ(r.gen.top_logprobs, 4);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools[0]["function"]["name"], "f");

  EXPECT_TRUE(chat({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
                    {"tool_choice", "none"}})
                  .tools.is_null());
  EXPECT_FALSE(chat({{"seed", -1}}).seed_given);  // llama.cpp's "random"
  EXPECT_EQ(chat({{"seed", 18446744073709551615ULL}}).gen.sampling.seed, UINT64_MAX);
  EXPECT_EQ(chat({{"seed", -2}}).gen.sampling.seed, (uint64_t)-2);
  EXPECT_EQ(chat({{"max_tokens", 4.0}}).gen.max_tokens, 4);  // an integral float is an integer
  EXPECT_EQ(chat({{"top_k", -1}}).gen.sampling.top_k, -1);
  EXPECT_EQ(chat({{"model", "tiny"}}).n, 1);
  EXPECT_EQ(chat({{"model", ""}}).n, 1);
  EXPECT_EQ(chat({{"stop", "x"}}).gen.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(completion({{"best_of", 2}, {"n", 2}}).n, 2);
  EXPECT_EQ(chat({{"temperature", nullptr}}).gen.sampling.temperature, 0.5f);  // null: the default
}

TEST(RequestParse, MessagesAreFlattenedAndExtraFieldsKept) {
  const GenerationRequest r = parse_generation_request(
      R"({"messages": [{"role": "system", "content": ""},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}]})",
      Endpoint::Chat, context());
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[0]["content"], "");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "1");
}

TEST(RequestParse, CompletionPrompts) {
  const GenerationRequest t = completion({{"prompt", "hello"}, {"logprobs", 3}});
  EXPECT_EQ(t.prompt_text, "hello");
  EXPECT_TRUE(t.prompt_is_text);
  EXPECT_FALSE(t.echo);
  EXPECT_TRUE(t.gen.logprobs);
  EXPECT_EQ(t.gen.top_logprobs, 3);
  EXPECT_EQ(completion({{"prompt", {"one"}}}).prompt_text, "one");
  const GenerationRequest ids =
      completion({{"prompt", {1, 50, 511}}, {"logprobs", 0}, {"suffix", ""}});
  EXPECT_FALSE(ids.prompt_is_text);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 50, 511}));
  EXPECT_TRUE(ids.gen.logprobs);
  EXPECT_EQ(ids.gen.top_logprobs, 0);
  EXPECT_TRUE(completion({{"echo", true}}).echo);
}

TEST(RequestParse, ResponseFormatGivesTheGrammarOnBothEndpoints) {
  EXPECT_EQ(chat({{"response_format", {{"type", "text"}}}}).gen.grammar, nullptr);
  EXPECT_NE(chat({{"response_format", {{"type", "json_object"}}}}).gen.grammar, nullptr);
  const json schema = {{"type", "json_schema"},
                       {"json_schema",
                        {{"name", "person"},
                         {"strict", true},
                         {"schema",
                          {{"type", "object"},
                           {"properties", {{"name", {{"type", "string"}}}}},
                           {"required", {"name"}},
                           {"additionalProperties", false}}}}}};
  EXPECT_NE(chat({{"response_format", schema}}).gen.grammar, nullptr);
  EXPECT_NE(completion({{"response_format", schema}}).gen.grammar, nullptr);
  const RequestError e =
      error_of(json({{"prompt", "hi"},
                     {"response_format",
                      {{"type", "json_schema"}, {"json_schema", {{"schema", {{"minimum", 1}}}}}}}})
                   .dump(),
               Endpoint::Completion);
  EXPECT_EQ(e.param, "response_format");
  EXPECT_NE(e.message.find("'minimum'"), std::string::npos) << e.message;
}

// Strict requests: a field this server does not read is a 400 naming it (with the closest
// known name for a typo), at the top level and inside nested objects; OpenAI's fields that are
// not honoured say why; the short ignored list is accepted; roles are validated.
TEST(RequestParse, UnknownFieldsAreRefusedNamingThem) {
  const RequestError typo = error_of(with_messages({{"max_token", 3}}));
  EXPECT_EQ(typo.status, 400);
  EXPECT_EQ(typo.param, "max_token");
  EXPECT_EQ(typo.message,
            "Unrecognized request argument supplied: 'max_token'; did you mean 'max_tokens'?");
  EXPECT_EQ(error_of(with_messages({{"Temperature", 0}})).message,
            "Unrecognized request argument supplied: 'Temperature'; did you mean "
            "'temperature'?");
  EXPECT_EQ(error_of(with_messages({{"frobnicate", true}})).message,
            "Unrecognized request argument supplied: 'frobnicate'");
  // Unknown even when null; each endpoint has its own fields.
  EXPECT_EQ(error_of(with_messages({{"cache_prompt", nullptr}})).param, "cache_prompt");
  for (const char* f : {"echo", "suffix", "best_of", "prompt"})
    EXPECT_EQ(error_of(with_messages({{f, 1}})).param, f);
  for (const char* f :
       {"top_logprobs", "messages", "tools", "tool_choice", "response_format", "reasoning_effort"})
    EXPECT_EQ(error_of(json{{"prompt", "x"}, {f, 1}}.dump(), Endpoint::Completion).param, f) << f;

  // Nested objects: the param is the field's path.
  struct Nested {
    json body;
    const char* param;
  };
  const std::vector<Nested> nested = {
      {{{"stream", true}, {"stream_options", {{"include_usage", true}, {"include_usgae", true}}}},
       "stream_options.include_usgae"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}, {"nmae", "a"}}}}}, "messages[0].nmae"},
      {{{"messages",
         {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}, {"cache", 1}}}}}}}},
       "messages[0].content[0].cache"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_call_id", "1"}}}}},
       "messages[0].tool_call_id"},
      {{{"messages", {{{"role", "tool"}, {"content", "x"}, {"tool_call_id", "1"}, {"id", "1"}}}}},
       "messages[0].id"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}}}},
        {"tools",
         {{{"type", "function"}, {"function", {{"name", "f"}, {"params", json::object()}}}}}}},
       "tools[0].function.params"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}}}},
        {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}, {"x", 1}}}}},
       "tools[0].x"},
  };
  for (const Nested& n : nested) {
    json b = n.body;
    if (!b.contains("messages")) b["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    const RequestError e = error_of(b.dump());
    EXPECT_EQ(e.status, 400) << b.dump();
    EXPECT_EQ(e.param, n.param) << e.message;
    const std::string leaf = std::string(n.param).substr(std::string(n.param).rfind('.') + 1);
    EXPECT_NE(e.message.find("'" + leaf + "'"), std::string::npos) << e.message;
  }
  EXPECT_EQ(
      error_of(with_messages({{"stream", true}, {"stream_options", {{"include_usgae", true}}}}))
          .message,
      "Unrecognized request argument supplied: 'include_usgae' (in stream_options); did you mean "
      "'include_usage'?");
}

TEST(RequestParse, OpenAiFieldsNotHonouredSayWhy) {
  struct Case {
    const char* field;
    json value;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"reasoning_effort", "low", "harmony"},
      {"modalities", {"text", "audio"}, "text only"},
      {"audio", {{"voice", "alloy"}, {"format", "wav"}}, "audio output"},
      {"prediction", {{"type", "content"}, {"content", "x"}}, "predicted outputs"},
      {"web_search_options", json::object(), "web search"},
      {"verbosity", "low", "verbosity"},
      {"functions", json::array(), "deprecated"},
      {"function_call", "auto", "deprecated"},
  };
  for (const Case& c : cases) {
    const RequestError e = error_of(with_messages({{c.field, c.value}}));
    EXPECT_EQ(e.status, 400) << c.field;
    EXPECT_EQ(e.param, c.field);
    EXPECT_NE(e.message.find(c.field), std::string::npos) << e.message;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << e.message;
    EXPECT_EQ(chat({{c.field, nullptr}}).n, 1) << c.field << ": null is as if left out";
  }
  EXPECT_EQ(chat({{"modalities", {"text"}}}).n, 1);
  // reasoning_effort where the template reads it (harmony).
  RequestContext h = context();
  h.reasoning_effort = true;
  EXPECT_EQ(
      parse_generation_request(with_messages({{"reasoning_effort", "high"}}), Endpoint::Chat, h)
          .reasoning_effort,
      "high");
  EXPECT_EQ(error_of(with_messages({{"reasoning_effort", "max"}}), Endpoint::Chat, h).param,
            "reasoning_effort");
}

TEST(RequestParse, IgnoredFieldsAreAcceptedAndTypeChecked) {
  const GenerationRequest r = chat({{"user", "u-1"},
                                    {"metadata", {{"k", "v"}}},
                                    {"store", false},
                                    {"service_tier", "auto"},
                                    {"safety_identifier", "s"},
                                    {"prompt_cache_key", "k"},
                                    {"parallel_tool_calls", true},
                                    {"stream", true},
                                    {"stream_options", {{"include_obfuscation", false}}}});
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(completion({{"user", "u"}}).n, 1);
  EXPECT_EQ(error_of(with_messages({{"user", 5}})).param, "user");
  EXPECT_EQ(error_of(with_messages({{"metadata", {{"k", 1}}}})).param, "metadata");
  EXPECT_EQ(error_of(with_messages({{"store", "yes"}})).param, "store");
  EXPECT_EQ(error_of(with_messages({{"parallel_tool_calls", 1}})).param, "parallel_tool_calls");
  // Chat-only ignored fields are unknown to completions.
  EXPECT_EQ(
      error_of(json{{"prompt", "x"}, {"metadata", json::object()}}.dump(), Endpoint::Completion)
          .param,
      "metadata");
}

TEST(RequestParse, RolesAndTheirFieldsAreValidated) {
  auto msgs = [](const json& m) { return json{{"messages", m}}.dump(); };
  for (const char* role : {"wizard", "", "USER", "model"}) {
    const RequestError e = error_of(msgs({{{"role", role}, {"content", "x"}}}));
    EXPECT_EQ(e.status, 400) << role;
    EXPECT_EQ(e.param, "messages[0].role");
    EXPECT_NE(e.message.find(std::string("\"") + role + "\""), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("\"developer\""), std::string::npos) << e.message;
  }
  EXPECT_NE(error_of(msgs({{{"role", "function"}, {"content", "x"}, {"name", "f"}}}))
                .message.find("deprecated"),
            std::string::npos);
  // tool messages answer a call by id; content is required except for an assistant's calls.
  EXPECT_EQ(error_of(msgs({{{"role", "tool"}, {"content", "x"}}})).param,
            "messages[0].tool_call_id");
  EXPECT_EQ(error_of(msgs({{{"role", "user"}}})).param, "messages");
  EXPECT_EQ(error_of(msgs({{{"role", "system"}, {"content", nullptr}}})).param, "messages");
  EXPECT_EQ(error_of(msgs({{{"role", "assistant"}}})).param, "messages");
  EXPECT_EQ(error_of(msgs({{{"role", "user"}, {"content", "x"}, {"name", 5}}})).param,
            "messages[0].name");
  EXPECT_EQ(error_of(msgs({{{"role", "assistant"}, {"content", "x"}, {"tool_calls", "f"}}})).param,
            "messages[0].tool_calls");
  EXPECT_EQ(
      error_of(msgs({{{"role", "assistant"}, {"content", "x"}, {"audio", {{"id", "a"}}}}})).param,
      "messages[0].audio");
  const GenerationRequest r =
      parse_generation_request(msgs({{{"role", "developer"}, {"content", "be brief"}},
                                     {{"role", "system"}, {"content", "s"}, {"name", "sys"}},
                                     {{"role", "user"}, {"content", "call f"}, {"name", "ann"}},
                                     {{"role", "assistant"},
                                      {"content", nullptr},
                                      {"tool_calls", {{{"id", "c1"}, {"type", "function"}}}}},
                                     {{"role", "tool"}, {"content", "42"}, {"tool_call_id", "c1"}},
                                     {{"role", "assistant"},
                                      {"content", "it is 42"},
                                      {"reasoning_content", "r"},
                                      {"refusal", nullptr}}}),
                               Endpoint::Chat, context());
  ASSERT_EQ(r.messages.size(), 6u);
  EXPECT_EQ(r.messages[0]["role"], "developer");
  EXPECT_EQ(r.messages[4]["tool_call_id"], "c1");
  EXPECT_EQ(r.messages[5]["reasoning_content"], "r");
}

}  // namespace
}  // namespace moeflow::test
