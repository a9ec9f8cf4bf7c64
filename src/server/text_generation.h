#pragma once
// Text generation on top of Engine::generate, shared by `moeflow serve` and `moeflow chat`:
// text deltas streamed as they become final (UTF-8 complete, and held back while they could be
// the start of a stop string), end-of-generation tokens and stop strings end the text, a
// callback can cancel.
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace moeflow {

class Engine;
class Tokenizer;

struct TextGenParams {
  int max_tokens = 128;
  SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings (not included in the text)
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  // Harmony (gpt-oss): the text is the final channel; the other channels go to
  // TextGenResult::reasoning (stop strings apply to the text).
  bool harmony = false;
};

struct TextGenResult {
  std::string text;
  std::string reasoning;      // harmony: analysis / commentary text
  int n_prompt = 0;
  int n_generated = 0;        // tokens sampled (an end-of-generation token included)
  std::string finish_reason;  // "stop" (EOG token or stop string), "length" or "cancelled"
  double prefill_s = 0, decode_s = 0, ttft_s = 0;
};

// Resets the engine's context, then generates from `prompt`. on_delta (optional) gets each
// piece of final text; returning false cancels (finish_reason "cancelled"), and so does
// *cancel becoming true (checked at every token). The pieces concatenate to result.text.
// on_reasoning (optional, harmony) gets the pieces of result.reasoning as they come.
TextGenResult generate_text(Engine& engine, const Tokenizer& tok, std::span<const int32_t> prompt,
                            const TextGenParams& params,
                            const std::function<bool(const std::string&)>& on_delta = nullptr,
                            const std::atomic<bool>* cancel = nullptr,
                            const std::function<void(const std::string&)>& on_reasoning = nullptr);

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`.
size_t stop_prefix_overlap(const std::string& text, const std::vector<std::string>& stops);

}  // namespace moeflow
