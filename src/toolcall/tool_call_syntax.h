#pragma once
// How a model family writes tool calls in its reply, told from its chat template: the template
// renders earlier calls the way the model was trained to write them, so its text names the
// family. One syntax per family moeflow runs:
//   Hermes      (Qwen2.5/3, Hermes, Qwen-MoE):
//               <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//   Glm         (GLM-4.5/4.6):
//               <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>
//   Mistral     (Mixtral-8x22B, Mistral v0.3, Nemo):
//               [TOOL_CALLS][{"name": ..., "arguments": {...}}] (2025: [TOOL_CALLS]NAME[ARGS]{...})
//   Llama3      (Llama 3.1-3.3, JSON tool calling):
//               {"name": ..., "parameters": {...}}, the whole reply
//   DeepSeek    (V3, R1): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//               \n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   DeepSeekV31 (V3.1): <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
//   Harmony     (gpt-oss): a commentary-channel message to=functions.NAME (tokenizer/harmony.h)
//   QwenXml     (Qwen3.5/3.6, Qwen3-Coder):
//               <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>
//               \n</tool_call>, V raw text typed by the tool's schema (tool_call_arguments.h)
//   Gemma4      (Gemma 4): <|tool_call>call:NAME{K:V,...}<tool_call|>, strings between <|"|>
//               quotes (gemma4_values.h)
//   MiniMax     (MiniMax-M2): <minimax:tool_call>\n<invoke name="NAME">\n
//               <parameter name="K">V</parameter>\n</invoke>\n</minimax:tool_call>, V as QwenXml's
#include <string>
#include <string_view>

namespace moeflow {

enum class ToolCallSyntax {
  None,
  Hermes,
  Glm,
  Mistral,
  Llama3,
  DeepSeek,
  DeepSeekV31,
  Harmony,
  QwenXml,
  Gemma4,
  MiniMax
};

// The syntax a chat template's model writes; None when the template shows no tool calls (its
// tools, if it renders them, could still be read by the model, but its calls not parsed).
ToolCallSyntax detect_tool_call_syntax(std::string_view template_source, bool harmony);

const char* tool_call_syntax_name(ToolCallSyntax s);

}  // namespace moeflow
