#pragma once
// Internal to src/chat_template/ (callers include chat_template.h): the values the engine
// computes with -- JSON plus "undefined" -- and the Python semantics Jinja gives them (str(),
// repr(), json.dumps, truthiness, integer arithmetic without overflow), shared by the lexer,
// the parsers and the renderer. Every error is a moeflow::Error starting "chat template: ".
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moeflow::jinja {

using json = nlohmann::ordered_json;

template <typename... Args>
[[noreturn]] void terr(fmt::format_string<Args...> f, Args&&... args) {
  fail("chat template: {}", fmt::format(f, std::forward<Args>(args)...));
}

// ---------------------------------------------------------------------------------------------
// Values: JSON plus "undefined" (a missing variable, key or attribute).
// A variable's value is borrowed, not copied: expressions have no side effects, so the
// variables an expression reads cannot change while it is evaluated (statements copy with
// take() before they store). Reading `messages` in a loop therefore costs nothing, however
// long the conversation.
struct Value {
  bool undef = false;
  Value() = default;
  Value(json v) : own_(std::move(v)) {}  // NOLINT: implicit on purpose
  static Value undefined() {
    Value v;
    v.undef = true;
    return v;
  }
  static Value borrow(const json* v) {
    Value r;
    r.ref_ = v;
    return r;
  }
  const json& j() const { return ref_ ? *ref_ : own_; }
  bool borrowed() const { return ref_ != nullptr; }
  // The value to keep: moved out when owned, copied when borrowed.
  json take() && { return ref_ ? *ref_ : std::move(own_); }
  // A part of this value (an item, a member), borrowed when this value is.
  Value part(const json& sub) const { return ref_ ? borrow(&sub) : Value(sub); }

 private:
  json own_;
  const json* ref_ = nullptr;
};

bool truthy(const Value& v);
// Python's float repr ("2.0", "inf", "nan").
std::string py_float(double d);
// A JSON string literal (invalid UTF-8 replaced).
std::string json_string(const std::string& s);
// Python's str() of a value, as {{ }} prints it.
std::string to_str(const Value& v);
// Python's repr() of a value (lists and dicts print their items this way).
std::string py_repr(const json& j);
// Python's json.dumps(x, ensure_ascii=False, indent=indent) (the tojson filter of transformers).
// Stops with an Error once `out` passes `max_size` bytes (indentation multiplies sizes).
void dumps(const json& j, int indent, int depth, std::string& out, uint64_t max_size);

inline bool is_int(const json& j) { return j.is_number_integer(); }
inline bool is_num(const json& j) { return j.is_number(); }

const std::string& need_str(const Value& v, const char* what);
int64_t need_int(const Value& v, const char* what);
// Argument k of a call, or an Error naming the call.
const Value& arg(const std::vector<Value>& a, size_t k, const std::string& what);
// p + q, p - q or p * q; an Error instead of signed overflow.
int64_t int_arith(const std::string& op, int64_t p, int64_t q);
// -x, |x|: an Error for INT64_MIN, whose negation does not fit.
int64_t int_negate(int64_t x, const char* op);
bool values_equal(const Value& a, const Value& b);

// Whether `j` nests lists/objects deeper than `limit` (recursion bounded by the limit).
bool deeper_than(const json& j, int limit);
// Approximate heap bytes of a value's top level: string bytes, or a slot per item.
uint64_t shallow_bytes(const json& j);

// Python's str.strip/lstrip/rstrip with a set of characters.
std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right);
// hay.find(needle, from) in linear time (Knuth-Morris-Pratt): std::string::find is
// O(|hay| * |needle|) in the worst case, which a template can make last for hours.
size_t find_text(std::string_view hay, std::string_view needle, size_t from = 0);

// Python's whitespace for strip() and split() without arguments.
inline const std::string kWhitespace = " \t\n\r\f\v";

}  // namespace moeflow::jinja
