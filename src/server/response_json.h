#pragma once
// The OpenAI response objects the server sends: completions and chat completions, whole or as
// stream chunks, with usage and logprobs in OpenAI's two layouts (chat: logprobs.content[];
// completions: tokens / token_logprobs / top_logprobs / text_offset). Pure functions of their
// arguments, so the shapes are tested without a model.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/text_generation.h"

namespace moeflow {

class Tokenizer;

using ojson = nlohmann::ordered_json;

// Invalid UTF-8 (a token that is part of a character) becomes U+FFFD instead of throwing.
std::string dump_json(const ojson& j);

struct ResponseHead {
  std::string id;  // chatcmpl-N / cmpl-N
  std::string model;
  int64_t created = 0;
  bool chat = true;
};

// {"id", "object", "created", "model"}; object is chat.completion(.chunk) or text_completion.
ojson response_base(const ResponseHead& h, bool chunk);

// usage of a request: the prompt is counted once, completion tokens over every choice;
// prompt_tokens_details.cached_tokens counts prompt tokens served from the prefix cache.
ojson usage_json(int n_prompt, int n_cached, int n_completion);

// logprobs of one choice (or of a stream chunk's tokens); offset_base shifts text_offset (echo).
ojson chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);
ojson completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps,
                               size_t offset_base, bool with_top);

// finish_reason as OpenAI names it ("cancelled" only happens when nobody is listening: "stop").
std::string finish_reason_json(const std::string& r);

// message.tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}, ...]
// (a stream's delta.tool_calls adds each call's "index" within its choice).
ojson tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace moeflow
