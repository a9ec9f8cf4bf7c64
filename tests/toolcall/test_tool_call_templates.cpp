// Each published template of tests/chat_template/templates/ (the vendors' own text, see its
// README.md) tells the call syntax of its family: detect_tool_call_syntax reads the real
// templates, not only the excerpts of test_tool_call_parser.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "support/published_template.h"
#include "toolcall/tool_call_syntax.h"

namespace moeflow::test::tool_call_templates {
namespace {

std::string published(const std::string& name) { return published_template(name); }

TEST(ToolCallTemplates, EachPublishedTemplateNamesItsFamily) {
  const std::pair<const char*, ToolCallSyntax> cases[] = {
      {"qwen3", ToolCallSyntax::Hermes},
      {"hermes3_tool_use", ToolCallSyntax::Hermes},
      {"mistral_nemo", ToolCallSyntax::Mistral},
      {"llama31", ToolCallSyntax::Llama3},
      {"deepseek_v31", ToolCallSyntax::DeepSeekV31},
      {"glm46", ToolCallSyntax::Glm},
      {"qwen35", ToolCallSyntax::QwenXml},
      {"gemma4", ToolCallSyntax::Gemma4},
      {"gemma4_interleaved", ToolCallSyntax::Gemma4},
      {"minimax_m2", ToolCallSyntax::MiniMax},
      // Templates that show no tool calls.
      {"chatml", ToolCallSyntax::None},
      {"mixtral_v01", ToolCallSyntax::None},
      {"mixtral_sys", ToolCallSyntax::None},
      {"qwen2", ToolCallSyntax::None},
      {"qwen15moe", ToolCallSyntax::None},
      {"olmoe", ToolCallSyntax::None},
      {"deepseek_v2", ToolCallSyntax::None},
      {"phi35moe", ToolCallSyntax::None},
  };
  for (const auto& [name, want] : cases)
    EXPECT_EQ(detect_tool_call_syntax(published(name), false), want)
        << name << ": " << tool_call_syntax_name(detect_tool_call_syntax(published(name), false));
}

}  // namespace
}  // namespace moeflow::test::tool_call_templates
