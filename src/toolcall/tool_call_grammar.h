#pragma once
// tool_choice "required" or a named function, enforced: a grammar whose sentences are a reply
// of tool calls only, written in the family's syntax (tool_call_syntax.h) exactly as
// ToolCallParser reads it, each call's arguments valid against its tool's `parameters` schema
// (grammar/json_schema.h). The sampler's grammar constraint then makes every token continue it.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "toolcall/tool_call_syntax.h"

namespace moeflow {

struct ForcedToolCalls {
  std::string name;       // "" (required): any of the tools; else this one (named)
  bool parallel = false;  // required: one call, or up to kMaxParallel of them
  static constexpr int kMaxParallel = 4;
};

// The JSON schema of a call's arguments: `function`'s (an OpenAI tools[i].function) `parameters`,
// or any object when it has none.
const nlohmann::ordered_json& tool_parameters(const nlohmann::ordered_json& function);

// Throws SchemaError (naming the tool) for a `parameters` schema the compiler does not support,
// moeflow::Error for a syntax that has no text form here (None, Harmony) or an unknown name.
std::shared_ptr<const Grammar> forced_tool_call_grammar(ToolCallSyntax syntax,
                                                        const nlohmann::ordered_json& tools,
                                                        const ForcedToolCalls& choice);

}  // namespace moeflow
