#pragma once
// A model's reply split into content and OpenAI tool calls, as the text streams in: content is
// released as soon as it cannot be the start of a call any more (a suffix that could begin the
// family's call marker is held back, as stop strings are), a call is handed out once its block
// is complete. A block that turns out malformed, or is cut off by the end of the reply, is
// content: nothing the model wrote is lost.
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "toolcall/tool_call_syntax.h"

namespace moeflow {

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object (OpenAI's function.arguments)
  std::string id;         // given by the server (new_tool_call_id), not by the model
};

// A fresh call id: "call_" and 24 letters or digits, or for Mistral 9 letters or digits (its
// template refuses any other id when the call is sent back).
std::string new_tool_call_id(ToolCallSyntax syntax, std::mt19937_64& rng);

class ToolCallParser {
 public:
  // tools: the request's OpenAI tools array (GLM writes string arguments unquoted: a value is
  // read as JSON unless its parameter is declared a string). Harmony replies are split by
  // tokenizer/harmony.h, not here: for it, and for None, everything is content.
  ToolCallParser(ToolCallSyntax syntax, nlohmann::ordered_json tools = nullptr);

  struct Out {
    std::string content;
    std::vector<ToolCall> calls;
  };
  // More reply text: the content that is final now and the calls completed by it.
  Out push(std::string_view text);
  // The end of the reply: what is held back is content, an unfinished call included.
  Out finish();

  ToolCallSyntax syntax() const { return syntax_; }

 private:
  enum class Block { Incomplete, Done, Invalid };
  Block parse_block(std::vector<ToolCall>& calls, size_t& consumed) const;
  void run(Out& out, bool final);
  // Where a call starts in buf_ from `from`, or npos; `partial` gets the length of a suffix
  // that could still become a start.
  size_t find_start(size_t from, size_t& partial) const;
  std::string argument_json(const std::string& function, const std::string& key,
                            const std::string& raw) const;

  ToolCallSyntax syntax_;
  nlohmann::ordered_json tools_;
  std::string buf_;         // text not handed out yet
  bool in_call_ = false;    // buf_ starts with a call's marker
  bool seen_text_ = false;  // content other than whitespace went out (Llama 3: calls start a reply)
};

// The whole reply at once.
ToolCallParser::Out parse_tool_calls(ToolCallSyntax syntax, std::string_view text,
                                     const nlohmann::ordered_json& tools = nullptr);

// Index just past the JSON object or array that starts at s[pos] ('{' or '['), or npos when it
// does not close within s. Strings and escapes are skipped; nothing else is validated.
size_t json_container_end(std::string_view s, size_t pos);

}  // namespace moeflow
