#pragma once
// Text generation on an Engine, shared by `moeflow serve` and `moeflow chat`: text deltas
// streamed as they become final (UTF-8 complete, and held back while they could be the start of
// a stop string), end-of-generation tokens and stop strings end the text, a callback or a flag
// can cancel, optional per-token log-probabilities, and an optional prompt (prefix) cache.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "toolcall/tool_call_parser.h"

namespace moeflow {

class Engine;
class Grammar;
class PrefixCache;
class Tokenizer;
class TokenVocab;

struct TextGenParams {
  int max_tokens = 128;
  SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings (not included in the text)
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  // Harmony (gpt-oss): the text is the final channel; the other channels go to
  // TextGenResult::reasoning (stop strings apply to the text).
  bool harmony = false;
  bool logprobs = false;  // per-token log-probabilities (sampling/logprobs.h)
  int top_logprobs = 0;   // alternatives per token with logprobs
  // Constrained output (response_format): every token must continue this grammar, and the
  // generation stops ("stop") once the grammar is complete and nothing more can follow. The
  // vocabulary's bytes are built from the tokenizer when token_vocab is null (the server builds
  // them once).
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenVocab> token_vocab;
  // Tool calls: the reply is split into content and calls in this syntax (None: all content);
  // `tools` types GLM's bare arguments. Control tokens are written into the text first, since
  // some families mark calls with one (Mistral's [TOOL_CALLS]).
  ToolCallSyntax tool_syntax = ToolCallSyntax::None;
  nlohmann::ordered_json tools;
  // Harmony: tokens at the end of the prompt that open the reply's first message (a forced
  // call's " to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>"), read by the
  // channel split before the generated ones.
  std::vector<int32_t> harmony_header;
};

// One sampled token with its log-probabilities, delivered with the text it belongs to.
struct TokenLogprob {
  int32_t id = 0;
  std::string piece;       // the token's bytes (may be part of a UTF-8 character)
  size_t text_offset = 0;  // where its text starts in TextGenResult::text
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

struct TextDelta {
  std::string text;
  std::vector<ToolCall> tool_calls;    // calls completed in this piece (TextGenParams::tool_syntax)
  std::string reasoning;               // harmony: analysis / commentary text, handed out at once
  std::vector<TokenLogprob> logprobs;  // the tokens whose text starts in this piece (or before)
};

struct TextGenResult {
  std::string text;                    // with tool calls parsed: the content around them
  std::vector<ToolCall> tool_calls;    // in the order written
  std::string reasoning;               // harmony: analysis / commentary text
  std::vector<TokenLogprob> logprobs;  // with params.logprobs: one per token of `text`
  int n_prompt = 0;
  int n_cached = 0;             // prompt tokens served from the prefix cache
  int n_generated = 0;          // tokens sampled (an end-of-generation token included)
  std::vector<int32_t> tokens;  // the sampled ids, in order
  // "stop" (EOG token or stop string), "tool_calls" (it stopped after calling tools), "length"
  // or "cancelled"
  std::string finish_reason;
  double prefill_s = 0, decode_s = 0, ttft_s = 0;
  double tpot_s() const { return n_generated > 1 ? decode_s / (n_generated - 1) : 0; }
};

// Generates from `prompt` (which with max_tokens must fit the context). Without a cache the
// engine's context is reset first; with one, the common prefix with what the engine holds is
// kept. on_delta (optional) gets each piece of final text; returning false cancels
// (finish_reason "cancelled"), and so does *cancel becoming true (checked at every token). The
// pieces concatenate to result.text; with harmony, pieces of result.reasoning come in
// TextDelta::reasoning as they are generated.
TextGenResult generate_text(Engine& engine, const Tokenizer& tok, std::span<const int32_t> prompt,
                            const TextGenParams& params,
                            const std::function<bool(const TextDelta&)>& on_delta = nullptr,
                            const std::atomic<bool>* cancel = nullptr,
                            PrefixCache* cache = nullptr);

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`.
size_t stop_prefix_overlap(const std::string& text, const std::vector<std::string>& stops);

}  // namespace moeflow
