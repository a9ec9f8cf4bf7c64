#pragma once
// The JSON body of POST /v1/chat/completions and /v1/completions turned into what generation
// needs, validated: every malformed field is a RequestError (4xx) whose message names it. Pure
// (no engine, tokenizer or socket), so it is unit tested and fuzzed on its own
// (tests/fuzz/fuzz_server_request.cpp). Sizes are bounded before any object is built: a SAX
// pre-scan counts values, nesting, string bytes and chat messages, so a body of 490k tiny
// messages is refused at the cost of reading it, not of building it.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/sampler.h"
#include "server/text_generation.h"

namespace moeflow {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct RequestError : std::exception {
  int status = 400;
  std::string message;
  std::string param;  // the field at fault ("" when the body as a whole is)
  std::string code;   // "" or a machine-readable code (model_not_found, ...)
  std::string type = "invalid_request_error";
  RequestError(int s, std::string m, std::string p = "", std::string c = "")
      : status(s), message(std::move(m)), param(std::move(p)), code(std::move(c)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

struct RequestLimits {
  size_t max_body_bytes = 8u << 20;    // 8 MiB
  size_t max_values = 1u << 18;        // JSON values of every kind (262144)
  size_t max_depth = 64;               // nesting of arrays and objects
  size_t max_string_bytes = 4u << 20;  // all keys and strings together
  size_t max_messages = 4096;
  size_t max_stop = 16, max_stop_bytes = 256;
  int max_n = 8;
  size_t max_logit_bias = 1024;
  int max_top_logprobs = 20;        // chat top_logprobs (OpenAI's limit)
  int max_completion_logprobs = 5;  // completions logprobs (OpenAI's limit)
};

enum class Endpoint { Chat, Completion };

// What the server contributes: its name, defaults and vocabulary size.
struct RequestContext {
  std::string model_id;
  SamplerParams sampling;         // defaults for the fields a request leaves out
  int default_max_tokens = -1;    // -1: up to the end of the context
  int64_t n_vocab = 0;            // token ids (prompt, logit_bias) must be below it
  bool reasoning_effort = false;  // the chat template reads reasoning_effort (harmony)
  RequestLimits limits;
};

// OpenAI's tool_choice. None leaves the tools out of the prompt; Required and Named are
// enforced by a grammar of the family's call syntax (toolcall/tool_call_grammar.h).
enum class ToolChoice { None, Auto, Required, Named };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Chat;
  // Chat: the messages, each content flattened to a string; tools for the template (null: none).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_name;            // Named: the function
  bool parallel_tool_calls = true;  // Required: the model may call several tools in one reply
  std::string reasoning_effort;     // OpenAI's field, for harmony (gpt-oss): low | medium | high
  // Completion: text (tokenized with BOS and special tokens) or token ids.
  bool prompt_is_text = true;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  TextGenParams gen;        // gen.max_tokens -1: up to the context
  bool seed_given = false;  // false: the server draws a seed (gen.sampling.seed is the default)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;                   // choices
  bool echo = false;           // completions: the prompt text starts the returned text
};

// Throws RequestError (400, or 404 for an unknown model, 413 for an oversized body); nothing else.
GenerationRequest parse_generation_request(std::string_view body, Endpoint endpoint,
                                           const RequestContext& ctx);

}  // namespace moeflow
