#pragma once
// The chat-template engine's resource limits, shared by the parsers (nesting, tree depth) and
// the renderer (values, ranges, the work budget of one render).
#include <cstdint>

namespace moeflow::jinja {

// Limits that keep a hostile template or conversation from exhausting the stack, the memory or
// the time of the process (tests/fuzz/fuzz_chat_template.cpp); exceeding one is an Error
// naming it. Published templates render real conversations far below all of them.
constexpr int kMaxNesting = 100;       // brackets, unary operators or blocks inside each other
constexpr int kMaxExprDepth = 256;     // depth of one expression's tree (operator chains too)
constexpr int kMaxValueDepth = 100;    // lists/objects inside each other in any value
constexpr int64_t kMaxRange = 100000;  // items of one range() (Jinja's sandbox limit)
// Statements and expressions being evaluated inside each other while rendering. Without macros
// the parse limits above bound this (kMaxNesting blocks + kMaxExprDepth, ~360); a macro that
// calls itself nests without end, so the renderer counts and stops here: 1.4 times the stack
// the deepest template without macros could already take (500 levels need 0.5-1 MiB of stack
// in a release build). Published templates with macros (Hermes' recursive type mapping, GLM's)
// stay below 50.
constexpr int kMaxRenderDepth = 500;
// Work of one render, in proportion to its context (the conversation): steps (expressions
// evaluated + statements run; a loop iteration counts kLoopStepCost) up to kBaseSteps +
// kStepsPerItem per list item / object member of the context, and bytes (text, values and
// copies made) up to kBaseBytes + kBytesPerByte per byte of the context. Published templates
// need a few dozen steps per message and a few times the conversation's size in bytes; with
// a small context the worst a hostile template can do within both is ~50 ms (release build).
constexpr uint64_t kBaseSteps = 250000;
constexpr uint64_t kStepsPerItem = 64;
constexpr uint64_t kLoopStepCost = 4;
constexpr uint64_t kBaseBytes = uint64_t{16} << 20;
constexpr uint64_t kBytesPerByte = 8;
constexpr uint64_t kItemBytes = 32;  // what one list item or object member is charged

}  // namespace moeflow::jinja
