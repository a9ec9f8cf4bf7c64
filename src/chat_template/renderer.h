#pragma once
// Internal to src/chat_template/: runs a statement tree over a context. Scopes follow Jinja's
// (a loop body's {% set %} stays in the loop; a namespace attribute does not); every render has
// a work budget in steps and bytes proportional to its context (limits.h), so a hostile
// template stops with an Error instead of stalling or exhausting memory.
#include <string>

#include "chat_template/statement_parser.h"
#include "chat_template/value.h"

namespace moeflow::jinja {

// `context` (an object) gives the global variables. Errors are moeflow::Error starting
// "chat template: ".
std::string render(const Body& body, const json& context);

}  // namespace moeflow::jinja
