#pragma once
// JSON Schema -> grammar: the output is a JSON text valid against the schema.
//
// Supported: type (one or a list), properties / required / additionalProperties (objects get
// exactly the properties declared, in their order, the required ones always, the others when
// the model chooses; extra properties are never generated, so additionalProperties false or
// absent are alike; an object without properties is any object, or a map when
// additionalProperties is a schema), items / minItems / maxItems, minLength / maxLength, enum,
// const, anyOf and oneOf (as alternatives: a oneOf whose branches overlap may produce a value
// matching two), allOf of one schema, $ref to the document's own #/$defs/... or
// #/definitions/... (recursive ones too), and the annotations (title, description, default,
// examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, x-*). Any other keyword
// (pattern, format, minimum, ...) is refused with a SchemaError naming it: a constraint left out
// would let outputs through that the schema rejects.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace moeflow {

class SchemaError : public GrammarError {
 public:
  SchemaError(const std::string& message, std::string keyword, std::string path)
      : GrammarError(message), keyword(std::move(keyword)), path(std::move(path)) {}
  std::string keyword;  // the keyword at fault ("" when the schema as a whole is)
  std::string path;     // JSON pointer to the subschema, "" for the root
};

// root ::= json-ws <a value valid against schema>
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);

// For grammars that embed JSON values (tool calls): defines the JSON rules and the rules of the
// subschema at `pointer` (a JSON pointer into `document`, "" for all of it; its $refs resolve
// against `document`) in b, and returns the expression of one value valid against it. Throws
// SchemaError.
Expr json_schema_expr(GrammarBuilder& b, const nlohmann::ordered_json& document,
                      const std::string& pointer = "");
// b.build(root), with the builder's errors (a $ref cycle, a grammar too large) as SchemaErrors.
std::shared_ptr<const Grammar> build_schema_grammar(const GrammarBuilder& b,
                                                    const std::string& root);

}  // namespace moeflow
