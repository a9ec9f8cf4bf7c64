#pragma once
// The harmony chat format of gpt-oss (o200k_harmony vocabularies), written natively: the
// model's Jinja template needs macros, and the format is fixed. Rendering follows OpenAI's
// openai-harmony (render_conversation_for_completion with its default system content):
//
//   <|start|>system<|message|>You are ChatGPT, ... Reasoning: medium ... <|end|>
//   <|start|>developer<|message|># Instructions\n\n{system messages}\n\n# Tools ...<|end|>
//   <|start|>user<|message|>{text}<|end|>
//   <|start|>assistant<|channel|>final<|message|>{earlier answers}<|end|>
//   <|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>
//       {arguments}<|call|>                   (an earlier tool call)
//   <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>{result}<|end|>
//   <|start|>assistant                          (the generation prompt)
//
// The model answers in channels: "<|channel|>analysis<|message|>...<|end|><|start|>assistant
// <|channel|>final<|message|>...<|return|>", or calls a tool: "<|channel|>commentary
// to=functions.NAME <|constrain|>json<|message|>{...}<|call|>". HarmonyStream splits generated
// tokens into the final answer, the rest (analysis, commentary) and the tool calls, the way an
// OpenAI-style server reports content, reasoning_content and tool_calls.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace moeflow {

// Whether the vocabulary is a harmony one (the control tokens <|start|>, <|message|>,
// <|channel|>, <|end|>, <|return|>, <|call|>).
bool uses_harmony(const Tokenizer& tok);

struct HarmonyOptions {
  std::string reasoning_effort = "medium";  // low | medium | high
  // OpenAI's chat `tools`: [{"type": "function", "function": {"name", "description",
  // "parameters"}}, ...]; null or [] for none.
  nlohmann::ordered_json tools = nullptr;
};

// messages: OpenAI chat messages, rendered as openai-harmony renders the conversation
// (render_conversation_for_completion, auto_drop_analysis):
//   * system and developer: the developer message's instructions (joined by blank lines);
//   * user: a user message;
//   * assistant: "reasoning_content" an analysis message, "content" the answer on the final
//     channel; with "tool_calls" ([{"id", "type": "function", "function": {"name",
//     "arguments"}}]) a non-empty content is a preamble on the commentary channel instead, and
//     each call a message to=functions.NAME on the commentary channel (<|constrain|>json,
//     ending <|call|>). Analysis messages before the first answer are dropped when the last
//     assistant message is an answer (openai-harmony's rule: reasoning is kept while a turn is
//     still calling tools);
//   * tool ({"tool_call_id", "content"}): a message from functions.NAME to the assistant on the
//     commentary channel, NAME that of the earlier call with that id.
// With tools, the system message says that calls go to the commentary channel and the developer
// message gets harmony_tools_section(tools). Throws moeflow::Error("chat template: ...") for
// other roles, malformed tools or calls, a tool_call_id no earlier call has, or a bad reasoning
// effort.
std::string render_harmony(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                           const HarmonyOptions& options = {});

// The "# Tools" section of the developer message for OpenAI `tools` (null or [] gives ""): the
// "functions" namespace, each function's parameters (a JSON schema) written as a TypeScript type
// the way openai-harmony writes them.
std::string harmony_tools_section(const nlohmann::ordered_json& tools);

// A tool call the model wrote: a message to=functions.NAME.
struct HarmonyToolCall {
  std::string name;       // NAME
  std::string arguments;  // the message's text as generated (JSON when the model keeps to it)
};

class HarmonyStream {
 public:
  explicit HarmonyStream(const Tokenizer& tok);

  struct Delta {
    std::string answer;  // text of the final channel
    // text of any other channel (analysis, commentary), or of a message to a built-in tool
    // (to=browser.*, to=python)
    std::string reasoning;
    std::vector<HarmonyToolCall> calls;  // tool calls whose message ended with this token
  };
  // The printable text this generated token adds (UTF-8 complete). A message to
  // functions.NAME is a tool call: its text is neither answer nor reasoning, and the call comes
  // out whole when the message ends (<|call|>, <|end|>, <|start|>, ... or flush()).
  Delta push(int32_t id);
  // What is still held back at the end, with a call cut off in its arguments.
  Delta flush();

 private:
  enum class State { Header, Content };
  enum class Kind { Answer, Reasoning, Call };
  void begin_content();
  void end_content(Delta& d);

  const Tokenizer& tok_;
  int32_t start_, channel_, message_, end_, constrain_;
  State state_ = State::Header;  // generation starts right after "<|start|>assistant"
  std::string header_;           // the header's text so far, <|channel|> and <|constrain|> kept
  Kind kind_ = Kind::Answer;     // what the current message's content is
  std::string call_name_, call_args_;
  StreamDecoder dec_;
};

}  // namespace moeflow
