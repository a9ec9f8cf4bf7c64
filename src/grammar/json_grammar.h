#pragma once
// The rules of JSON text (RFC 8259) for grammars to build on, and the grammar of "any JSON
// object" (response_format json_object).
//
// Bounds keep a constrained model from running on forever where JSON has no limit of its own:
// whitespace between tokens is one space or tab, or a newline and up to kMaxWs spaces or tabs of
// indentation; integer and fraction parts at most 16 digits, exponents 2 (so every number fits a
// double: parsers such as nlohmann refuse 1e791 as an overflow); strings are unbounded. No
// whitespace follows the root value, so the output is done the moment the value closes.
#include <memory>

#include "grammar/grammar.h"

namespace moeflow {

// Defines json-value, json-object, json-array, json-string, json-number, json-integer,
// json-ws and their helpers in b (once: a second call does nothing).
void add_json_rules(GrammarBuilder& b);

// root ::= json-ws json-object
std::shared_ptr<const Grammar> json_object_grammar();

inline constexpr int kMaxWs = 20;

}  // namespace moeflow
