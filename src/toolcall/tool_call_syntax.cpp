#include "toolcall/tool_call_syntax.h"

#include <string>

namespace moeflow {

ToolCallSyntax detect_tool_call_syntax(std::string_view t, bool harmony) {
  if (harmony) return ToolCallSyntax::Harmony;
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  // Order matters: GLM's template also writes <tool_call>, and DeepSeek's markers are unique.
  if (has("<｜tool▁calls▁begin｜>") || has("<｜tool▁call▁begin｜>"))
    // V3/R1 write "function<｜tool▁sep｜>NAME" and the arguments in a ```json fence; V3.1 writes
    // the name before the separator and bare JSON after it.
    return has("```json") ? ToolCallSyntax::DeepSeek : ToolCallSyntax::DeepSeekV31;
  if (has("<arg_key>")) return ToolCallSyntax::Glm;
  if (has("<minimax:tool_call>")) return ToolCallSyntax::MiniMax;
  if (has("<|tool_call>call:")) return ToolCallSyntax::Gemma4;
  // Qwen3.5's XML calls sit inside the same <tool_call> as Hermes' JSON ones: the <function=
  // and <parameter= tags tell them apart, so they are never read as JSON.
  if (has("<tool_call>") && has("<function=") && has("<parameter=")) return ToolCallSyntax::QwenXml;
  if (has("<tool_call>")) return ToolCallSyntax::Hermes;
  if (has("[TOOL_CALLS]")) return ToolCallSyntax::Mistral;
  // Llama 3.x renders calls as {"name": ..., "parameters": ...} and tool results as ipython.
  if (has("ipython") && has("\"parameters\"")) return ToolCallSyntax::Llama3;
  return ToolCallSyntax::None;
}

const char* tool_call_syntax_name(ToolCallSyntax s) {
  switch (s) {
    case ToolCallSyntax::None: return "none";
    case ToolCallSyntax::Hermes: return "hermes";
    case ToolCallSyntax::Glm: return "glm";
    case ToolCallSyntax::Mistral: return "mistral";
    case ToolCallSyntax::Llama3: return "llama3";
    case ToolCallSyntax::DeepSeek: return "deepseek";
    case ToolCallSyntax::DeepSeekV31: return "deepseek-v3.1";
    case ToolCallSyntax::Harmony: return "harmony";
    case ToolCallSyntax::QwenXml: return "qwen-xml";
    case ToolCallSyntax::Gemma4: return "gemma4";
    case ToolCallSyntax::MiniMax: return "minimax";
  }
  return "?";
}

}  // namespace moeflow
