#pragma once
// Gemma 4's notation for a call's arguments, as its chat template writes them
// (`format_argument`): an object {key:value,...} with bare keys, strings between <|"|> quotes
// (no escapes: a string ends at the next <|"|>), numbers, true / false / null as in JSON, lists
// [a,b]. A model writes a call as <|tool_call>call:NAME{...}<tool_call|>.
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace moeflow {

inline constexpr std::string_view kGemma4Quote = "<|\"|>";

enum class Gemma4Read { Done, Incomplete, Invalid };

// Reads one value at s[pos] (leading whitespace skipped): Done sets `out` and moves `pos` past
// it; Incomplete when s ends before the value does; Invalid when it is not a value (a bare word,
// nesting deeper than 64, a key without ':'). Keys may also be quoted (the template quotes them
// inside nested values when asked to). Python's True / False / None are read as JSON's.
Gemma4Read read_gemma4_value(std::string_view s, size_t& pos, nlohmann::ordered_json& out);

// The value in Gemma 4's notation, keys bare (as the template writes a call's arguments).
std::string write_gemma4_value(const nlohmann::ordered_json& v);

// For the forced-call grammar: one value valid against the subschema at `pointer` of
// `document`, in Gemma 4's notation: type (one or a list), properties / required (in the sorted
// order the template writes them; additionalProperties never adds any; an object without
// properties is written empty), items / minItems / maxItems, minLength / maxLength, enum, const,
// anyOf / oneOf, $ref within the document; numbers, booleans and null as json_schema_expr writes
// them. Throws SchemaError for any other keyword.
Expr gemma4_value_expr(GrammarBuilder& b, const nlohmann::ordered_json& document,
                       const std::string& pointer);

}  // namespace moeflow
