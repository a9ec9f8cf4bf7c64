#pragma once
// The harmony chat format of gpt-oss (o200k_harmony vocabularies), written natively: the
// model's Jinja template needs macros, and the format is fixed. Rendering follows OpenAI's
// openai-harmony (render_conversation_for_completion with its default system content):
//
//   <|start|>system<|message|>You are ChatGPT, ... Reasoning: medium ... <|end|>
//   <|start|>developer<|message|># Instructions\n\n{system messages}<|end|>
//   <|start|>user<|message|>{text}<|end|>
//   <|start|>assistant<|channel|>final<|message|>{earlier answers}<|end|>
//   <|start|>assistant                          (the generation prompt)
//
// The model answers in channels: "<|channel|>analysis<|message|>...<|end|><|start|>assistant
// <|channel|>final<|message|>...<|return|>". HarmonyStream splits generated tokens into the
// final answer and the rest (analysis, commentary), the way an OpenAI-style server reports
// content and reasoning_content.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace moeflow {

// Whether the vocabulary is a harmony one (the control tokens <|start|>, <|message|>,
// <|channel|>, <|end|>, <|return|>, <|call|>).
bool uses_harmony(const Tokenizer& tok);

struct HarmonyOptions {
  std::string reasoning_effort = "medium";  // low | medium | high
};

// messages: [{"role": system|developer|user|assistant, "content": text}, ...]. System and
// developer messages become the developer message's instructions (joined by blank lines),
// assistant messages earlier answers on the final channel (their reasoning is not replayed, as
// harmony drops it once a turn has an answer). Throws moeflow::Error("chat template: ...") for
// other roles or a bad reasoning effort.
std::string render_harmony(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                           const HarmonyOptions& options = {});

class HarmonyStream {
 public:
  explicit HarmonyStream(const Tokenizer& tok);

  struct Delta {
    std::string answer;     // text of the final channel
    std::string reasoning;  // text of any other channel (analysis, commentary)
  };
  // The printable text this generated token adds (UTF-8 complete).
  Delta push(int32_t id);
  // What is still held back at the end.
  Delta flush();

 private:
  enum class State { Header, Channel, Content };
  void end_content(Delta& d);

  const Tokenizer& tok_;
  int32_t start_, channel_, message_, end_, constrain_;
  State state_ = State::Header;  // generation starts right after "<|start|>assistant"
  std::string channel_name_;
  bool answer_ = false;  // the current message is on the final channel
  StreamDecoder dec_;
};

}  // namespace moeflow
