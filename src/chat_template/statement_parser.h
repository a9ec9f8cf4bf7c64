#pragma once
// Internal to src/chat_template/: the statement tree of a template and its parser. The
// statements are those of the published chat templates: {% if/elif/else %}, {% for ... in ...
// [if ...] %} with {% else %}, {% set x = ... %} / {% set ns.attr = ... %} / {% set x %}...{%
// endset %}, {% break %} / {% continue %}, transformers' {% generation %} marker, and {% macro
// name(params, p=default) %}...{% endmacro %} (GLM-4.x and Hermes tool-use templates define
// them). Anything else (call blocks, includes) is a syntax error.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat_template/expr_parser.h"

namespace moeflow::jinja {

struct TemplateNode;
using NodeP = std::unique_ptr<TemplateNode>;
using Body = std::vector<NodeP>;
struct TemplateNode {
  enum Kind { Text, Output, If, For, Set, SetBlock, Break, Continue, Scope, Macro } kind;
  std::string text;
  ExprP expr, cond;
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition or null for else, body)
  std::vector<std::string> targets;              // For: loop variables; Set: name or ns, attr;
                                                 // Macro: parameters (text: the macro's name)
  std::vector<ExprP> defaults;                   // Macro: default of each parameter, or null
  Body body, else_body;
  explicit TemplateNode(Kind k) : kind(k) {}
};

// The template's statement tree; a syntax error is a moeflow::Error starting "chat template: ".
Body parse_template(const std::string& source);

}  // namespace moeflow::jinja
