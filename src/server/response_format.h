#pragma once
// The `response_format` field of a request, as the grammar its output must follow:
//   {"type": "text"}                         -> none
//   {"type": "json_object"}                  -> any JSON object
//   {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}
//                                            -> JSON valid against the schema
// (grammar/json_schema.h says which schema keywords are supported).
#include <memory>

#include <nlohmann/json.hpp>

namespace moeflow {

class Grammar;

// nullptr for text. Throws RequestError (400, param "response_format") for a malformed field or
// an unsupported schema, the message naming the keyword.
std::shared_ptr<const Grammar> parse_response_format(const nlohmann::ordered_json& rf);

}  // namespace moeflow
