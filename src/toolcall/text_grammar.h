#pragma once
// Raw text in the forced-call grammars of the families that write string arguments unquoted
// between tags (Qwen3.5's and MiniMax-M2's </parameter>, Gemma 4's <|"|> quotes): text in which
// the closing marker cannot occur, so the reply parser ends the value exactly where the grammar
// did.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace moeflow {

// Any text of tab, newline and printable characters (valid UTF-8) in which `stop` (ASCII) does
// not occur: the automaton of a substring search (its states: how much of `stop` the text ends
// with) as one rule per state, each continuing by a tail call.
Expr text_without(GrammarBuilder& b, std::string_view stop);

// The raw text of a value whose schema (at `path`, for errors) declares a string only
// (tool_call_arguments.h: declares_only_string): a const or an enum its literals; minLength /
// maxLength as many characters, none of them '<' (so no closing marker can start in it); else
// text_without(stop). Throws SchemaError for a keyword it cannot enforce (pattern, format, ...).
Expr raw_string_value(GrammarBuilder& b, const nlohmann::ordered_json& schema,
                      const std::string& path, std::string_view stop);

}  // namespace moeflow
