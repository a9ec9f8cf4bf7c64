#pragma once
// Arguments written as raw text (Qwen3.5's <parameter=K>, MiniMax-M2's <parameter name="K">):
// the templates write a string argument as it is and any other value as JSON, so the text of a
// value is typed by the tool's JSON schema, as the model's own template wrote it:
//   * declared a string only (type "string", or an enum / const of strings): the text as it is,
//     "75001" stays a string;
//   * declared types without string (integer, number, boolean, object, array, null): the text as
//     JSON (Python's True / False / None too: the Qwen3.5 template writes a boolean with
//     `| string`); text that is not JSON stays a string, so nothing the model wrote is lost
//     (the client's schema check then sees the wrong type);
//   * string among other types: JSON when it parses to one of the other types, else the text;
//   * no schema for the argument (or no type in it): JSON when it parses, else the text.
#include <string_view>

#include <nlohmann/json.hpp>

namespace moeflow {

// The schema of argument `key` of function `function` in an OpenAI tools array, or nullptr.
const nlohmann::ordered_json* tool_argument_schema(const nlohmann::ordered_json& tools,
                                                   std::string_view function, std::string_view key);

// The value of an argument written as raw text, typed by its schema (nullptr: none declared).
nlohmann::ordered_json typed_text_argument(const nlohmann::ordered_json* schema,
                                           std::string_view text);

// The schema declares the value a string and nothing else (the forced-call grammars write such
// a value as raw text; see above).
bool declares_only_string(const nlohmann::ordered_json& schema);

// The schema declares string among other types (a value the grammars cannot write unambiguously
// as raw text).
bool declares_string_and_more(const nlohmann::ordered_json& schema);

}  // namespace moeflow
