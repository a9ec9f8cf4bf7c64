// A small Jinja interpreter for chat templates: template text -> segments (text, {{ }}, {% %})
// with Jinja's whitespace control -> statement tree -> rendering over ordered JSON values.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace moeflow {

const char* const kChatMlTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

namespace {

using json = nlohmann::ordered_json;

template <typename... Args>
[[noreturn]] void terr(fmt::format_string<Args...> f, Args&&... args) {
  fail("chat template: {}", fmt::format(f, std::forward<Args>(args)...));
}

// Limits that keep a hostile template or conversation from exhausting the stack, the memory or
// the time of the process (tests/fuzz/fuzz_chat_template.cpp); exceeding one is an Error
// naming it. Published templates render real conversations far below all of them.
constexpr int kMaxNesting = 100;        // brackets, unary operators or blocks inside each other
constexpr int kMaxExprDepth = 256;      // depth of one expression's tree (operator chains too)
constexpr int kMaxValueDepth = 100;     // lists/objects inside each other in any value
constexpr int64_t kMaxRange = 100000;   // items of one range() (Jinja's sandbox limit)
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
constexpr uint64_t kItemBytes = 32;     // what one list item or object member is charged

// Whether `j` nests lists/objects deeper than `limit` (recursion bounded by the limit).
bool deeper_than(const json& j, int limit) {
  if (!j.is_structured()) return false;
  if (limit <= 0) return true;
  for (const json& x : j)
    if (deeper_than(x, limit - 1)) return true;
  return false;
}

// Approximate heap bytes of a value's top level: string bytes, or a slot per item.
uint64_t shallow_bytes(const json& j) {
  if (j.is_string()) return j.get_ref<const std::string&>().size();
  if (j.is_structured()) return kItemBytes * static_cast<uint64_t>(j.size());
  return 0;
}

// hay.find(needle, from) in linear time (Knuth-Morris-Pratt): std::string::find is
// O(|hay| * |needle|) in the worst case, which a template can make last for hours.
size_t find_text(std::string_view hay, std::string_view needle, size_t from = 0) {
  if (needle.size() <= 16 || from >= hay.size()) return hay.find(needle, from);
  std::vector<size_t> fail(needle.size(), 0);
  for (size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k - 1];
    if (needle[i] == needle[k]) ++k;
    fail[i] = k;
  }
  for (size_t i = from, k = 0; i < hay.size(); ++i) {
    while (k > 0 && hay[i] != needle[k]) k = fail[k - 1];
    if (hay[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - k;
  }
  return std::string_view::npos;
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

bool truthy(const Value& v) {
  if (v.undef) return false;
  const json& j = v.j();
  switch (j.type()) {
    case json::value_t::null: return false;
    case json::value_t::boolean: return j.get<bool>();
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return j.get<int64_t>() != 0;
    case json::value_t::number_float: return j.get<double>() != 0.0;
    case json::value_t::string: return !j.get_ref<const std::string&>().empty();
    case json::value_t::array:
    case json::value_t::object: return !j.empty();
    default: return false;
  }
}

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string json_string(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string py_repr(const json& j);

// Python's str() of a value, as {{ }} prints it.
std::string to_str(const Value& v) {
  if (v.undef) return "";
  const json& j = v.j();
  switch (j.type()) {
    case json::value_t::string: return j.get<std::string>();
    case json::value_t::null: return "None";
    case json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case json::value_t::number_integer: return std::to_string(j.get<int64_t>());
    case json::value_t::number_unsigned: return std::to_string(j.get<uint64_t>());
    case json::value_t::number_float: return py_float(j.get<double>());
    default: return py_repr(j);
  }
}

std::string py_repr(const json& j) {
  if (j.is_string()) {
    std::string out = "'";
    for (char c : j.get_ref<const std::string&>()) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out + "'";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + py_repr(j[i]);
    return out + "]";
  }
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      out += (first ? "" : ", ") + py_repr(json(it.key())) + ": " + py_repr(it.value());
      first = false;
    }
    return out + "}";
  }
  return to_str(Value(j));
}

// Python's json.dumps(x, ensure_ascii=False, indent=indent) (the tojson filter of transformers).
// Stops with an Error once `out` passes `max_size` bytes (indentation multiplies sizes).
void dumps(const json& j, int indent, int depth, std::string& out, uint64_t max_size) {
  if (out.size() > max_size) terr("tojson output exceeds {} bytes", max_size);
  const std::string nl = indent >= 0 ? "\n" + std::string((size_t)indent * (depth + 1), ' ') : "";
  const std::string nl_end = indent >= 0 ? "\n" + std::string((size_t)indent * depth, ' ') : "";
  const char* sep = indent >= 0 ? "," : ", ";
  switch (j.type()) {
    case json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += sep;
        out += nl;
        dumps(j[i], indent, depth + 1, out, max_size);
      }
      out += nl_end + "]";
      return;
    }
    case json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      out += "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += sep;
        first = false;
        out += nl + json_string(it.key()) + ": ";
        dumps(it.value(), indent, depth + 1, out, max_size);
      }
      out += nl_end + "}";
      return;
    }
    case json::value_t::string: out += json_string(j.get<std::string>()); return;
    case json::value_t::null: out += "null"; return;
    case json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case json::value_t::number_float: out += py_float(j.get<double>()); return;
    default: out += j.dump(); return;
  }
}

bool is_int(const json& j) { return j.is_number_integer(); }
bool is_num(const json& j) { return j.is_number(); }

const std::string& need_str(const Value& v, const char* what) {
  if (v.undef || !v.j().is_string()) terr("{} needs a string, got {}", what, v.undef ? "undefined" : v.j().type_name());
  return v.j().get_ref<const std::string&>();
}

int64_t need_int(const Value& v, const char* what) {
  if (v.undef || !v.j().is_number()) terr("{} needs a number", what);
  if (!v.j().is_number_float()) return v.j().get<int64_t>();
  const double d = v.j().get<double>();
  // [-2^63, 2^63): the doubles that convert to int64 without undefined behaviour.
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
    terr("{} needs a number in the 64-bit integer range, got {}", what, d);
  return static_cast<int64_t>(d);
}

// Argument k of a call, or an Error naming the call.
const Value& arg(const std::vector<Value>& a, size_t k, const std::string& what) {
  if (k >= a.size()) terr("{} needs at least {} argument(s)", what, k + 1);
  return a[k];
}

// p + q, p - q or p * q; an Error instead of signed overflow.
int64_t int_arith(const std::string& op, int64_t p, int64_t q) {
  int64_t r = 0;
  const bool overflow = op == "+"   ? __builtin_add_overflow(p, q, &r)
                        : op == "-" ? __builtin_sub_overflow(p, q, &r)
                                    : __builtin_mul_overflow(p, q, &r);
  if (overflow) terr("integer overflow in '{}'", op);
  return r;
}

// -x, |x|: an Error for INT64_MIN, whose negation does not fit.
int64_t int_negate(int64_t x, const char* op) {
  if (x == INT64_MIN) terr("integer overflow in '{}'", op);
  return -x;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.undef || b.undef) return a.undef && b.undef;
  return a.j() == b.j();
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  bool strip[256] = {};
  for (unsigned char c : chars) strip[c] = true;
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip[(unsigned char)s[b]]) ++b;
  if (right)
    while (e > b && strip[(unsigned char)s[e - 1]]) --e;
  return s.substr(b, e - b);
}

const std::string kWhitespace = " \t\n\r\f\v";

// ---------------------------------------------------------------------------------------------
// Expression tokens and syntax tree.

enum class TT { Name, String, Int, Float, Op, End };
struct Token {
  TT type;
  std::string s;
  int64_t i = 0;
  double f = 0;
};

std::vector<Token> lex_expr(std::string_view src) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (std::isspace((unsigned char)c)) {
      ++i;
      continue;
    }
    if (std::isalpha((unsigned char)c) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum((unsigned char)src[j]) || src[j] == '_')) ++j;
      out.push_back({TT::Name, std::string(src.substr(i, j - i))});
      i = j;
      continue;
    }
    if (std::isdigit((unsigned char)c)) {
      size_t j = i;
      while (j < src.size() && std::isdigit((unsigned char)src[j])) ++j;
      if (j + 1 < src.size() && src[j] == '.' && std::isdigit((unsigned char)src[j + 1])) {
        ++j;
        while (j < src.size() && std::isdigit((unsigned char)src[j])) ++j;
        Token t{TT::Float, std::string(src.substr(i, j - i))};
        t.f = std::strtod(t.s.c_str(), nullptr);  // too large: inf, as Python's float()
        out.push_back(t);
      } else {
        Token t{TT::Int, std::string(src.substr(i, j - i))};
        const auto r = std::from_chars(t.s.data(), t.s.data() + t.s.size(), t.i);
        if (r.ec != std::errc()) terr("integer literal {} is out of range", t.s);
        out.push_back(t);
      }
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string s;
      size_t j = i + 1;
      for (; j < src.size() && src[j] != c; ++j) {
        if (src[j] == '\\' && j + 1 < src.size()) {
          const char e = src[++j];
          switch (e) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            case '0': s += '\0'; break;
            default: s += e; break;  // \\ \' \" and unknown escapes keep the character
          }
        } else {
          s += src[j];
        }
      }
      if (j >= src.size()) terr("unterminated string literal in '{}'", src);
      out.push_back({TT::String, s});
      i = j + 1;
      continue;
    }
    static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
    bool matched = false;
    for (const char* op : two) {
      if (src.substr(i, 2) == op) {
        out.push_back({TT::Op, op});
        i += 2;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (std::strchr("+-*/%~<>=()[]{}.,:|", c)) {
      out.push_back({TT::Op, std::string(1, c)});
      ++i;
      continue;
    }
    terr("unexpected character '{}' in '{}'", c, src);
  }
  out.push_back({TT::End, ""});
  return out;
}

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum Kind { Lit, Name, Attr, Index, Slice, Call, Filter, Test, Not, Neg, Bin, And, Or, Cond, List, Dict };
  Kind kind;
  json lit;
  std::string name;  // variable, attribute, filter, test or operator
  ExprP a, b, c;     // operands (Slice: a[b:c:args[0]])
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  bool negate = false;  // "is not"
  int depth = 1;        // of this node's tree (bounded by kMaxExprDepth)
  explicit Expr(Kind k) : kind(k) {}
};

ExprP mk(Expr::Kind k) { return std::make_unique<Expr>(k); }

class ExprParser {
 public:
  ExprParser(std::vector<Token> toks, std::string_view src) : t_(std::move(toks)), src_(src) {}

  // Recursion guard of the descent: brackets, unary operators and `not` nest.
  struct Nest {
    explicit Nest(ExprParser& p) : p_(p) {
      if (++p_.nest_ > kMaxNesting) terr("expression nested deeper than {} levels", kMaxNesting);
    }
    ~Nest() { --p_.nest_; }
    ExprParser& p_;
  };

  ExprP parse_expr() { return conditional(); }
  ExprP parse_or_expr() { return or_expr(); }
  bool at_end() const { return t_[p_].type == TT::End; }
  bool peek_name(const char* n) const { return t_[p_].type == TT::Name && t_[p_].s == n; }
  bool peek_op(const char* o) const { return t_[p_].type == TT::Op && t_[p_].s == o; }
  void expect_end() {
    if (!at_end()) terr("unexpected '{}' in '{}'", t_[p_].s, src_);
  }
  std::string name() {
    if (t_[p_].type != TT::Name) terr("expected a name in '{}'", src_);
    return t_[p_++].s;
  }
  void expect_op(const char* o) {
    if (!peek_op(o)) terr("expected '{}' in '{}'", o, src_);
    ++p_;
  }
  bool accept_op(const char* o) {
    if (!peek_op(o)) return false;
    ++p_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++p_;
    return true;
  }

 private:
  // Every finished node goes through here: its tree's depth is bounded, so evaluating and
  // destroying it (both recursive) stay within the stack whatever the template says.
  static ExprP done(ExprP e) {
    int d = 0;
    for (const Expr* c : {e->a.get(), e->b.get(), e->c.get()})
      if (c) d = std::max(d, c->depth);
    for (const ExprP& c : e->args)
      if (c) d = std::max(d, c->depth);
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) terr("expression deeper than {} levels", kMaxExprDepth);
    return e;
  }
  ExprP bin(const std::string& op, ExprP a, ExprP b) {
    auto e = mk(Expr::Bin);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return done(std::move(e));
  }
  ExprP conditional() {
    Nest nest(*this);
    ExprP a = or_expr();
    while (accept_name("if")) {
      auto e = mk(Expr::Cond);
      e->b = or_expr();  // condition
      if (accept_name("else")) e->c = or_expr();
      e->a = std::move(a);
      a = done(std::move(e));
    }
    return a;
  }
  ExprP or_expr() {
    ExprP a = and_expr();
    while (accept_name("or")) {
      auto e = mk(Expr::Or);
      e->a = std::move(a);
      e->b = and_expr();
      a = done(std::move(e));
    }
    return a;
  }
  ExprP and_expr() {
    ExprP a = not_expr();
    while (accept_name("and")) {
      auto e = mk(Expr::And);
      e->a = std::move(a);
      e->b = not_expr();
      a = done(std::move(e));
    }
    return a;
  }
  ExprP not_expr() {
    if (accept_name("not")) {
      Nest nest(*this);
      auto e = mk(Expr::Not);
      e->a = not_expr();
      return done(std::move(e));
    }
    return compare();
  }
  ExprP compare() {
    ExprP a = math1();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
      bool done = true;
      for (const char* op : ops) {
        if (accept_op(op)) {
          a = bin(op, std::move(a), math1());
          done = false;
          break;
        }
      }
      if (!done) continue;
      if (accept_name("in")) {
        a = bin("in", std::move(a), math1());
      } else if (peek_name("not") && t_[p_ + 1].type == TT::Name && t_[p_ + 1].s == "in") {
        p_ += 2;
        a = bin("not in", std::move(a), math1());
      } else {
        return a;
      }
    }
  }
  ExprP math1() {
    ExprP a = concat();
    for (;;) {
      if (accept_op("+")) a = bin("+", std::move(a), concat());
      else if (accept_op("-")) a = bin("-", std::move(a), concat());
      else return a;
    }
  }
  ExprP concat() {
    ExprP a = math2();
    while (accept_op("~")) a = bin("~", std::move(a), math2());
    return a;
  }
  ExprP math2() {
    ExprP a = pow();
    for (;;) {
      if (accept_op("*")) a = bin("*", std::move(a), pow());
      else if (accept_op("//")) a = bin("//", std::move(a), pow());
      else if (accept_op("/")) a = bin("/", std::move(a), pow());
      else if (accept_op("%")) a = bin("%", std::move(a), pow());
      else return a;
    }
  }
  ExprP pow() {
    ExprP a = unary();
    while (accept_op("**")) a = bin("**", std::move(a), unary());
    return a;
  }
  ExprP unary() {
    if (accept_op("-")) {
      Nest nest(*this);
      auto e = mk(Expr::Neg);
      e->a = unary();
      return filters(done(std::move(e)));
    }
    if (accept_op("+")) {
      Nest nest(*this);
      return unary();
    }
    return filters(postfix(primary()));
  }
  void call_args(Expr& e) {
    // after '('
    if (accept_op(")")) return;
    do {
      if (t_[p_].type == TT::Name && t_[p_ + 1].type == TT::Op && t_[p_ + 1].s == "=") {
        std::string k = t_[p_].s;
        p_ += 2;
        e.kwargs.emplace_back(k, parse_expr());
      } else {
        e.args.push_back(parse_expr());
      }
    } while (accept_op(","));
    expect_op(")");
  }
  ExprP postfix(ExprP a) {
    for (;;) {
      if (accept_op(".")) {
        auto e = mk(Expr::Attr);
        e->name = name();
        e->a = std::move(a);
        a = done(std::move(e));
      } else if (accept_op("[")) {
        ExprP lo, hi, step;
        bool slice = false;
        if (!peek_op(":")) lo = parse_expr();
        if (accept_op(":")) {
          slice = true;
          if (!peek_op("]") && !peek_op(":")) hi = parse_expr();
          if (accept_op(":") && !peek_op("]")) step = parse_expr();
        }
        expect_op("]");
        auto e = mk(slice ? Expr::Slice : Expr::Index);
        e->a = std::move(a);
        e->b = std::move(lo);
        e->c = std::move(hi);
        if (slice) e->args.push_back(std::move(step));
        a = done(std::move(e));
      } else if (accept_op("(")) {
        auto e = mk(Expr::Call);
        e->a = std::move(a);
        call_args(*e);
        a = done(std::move(e));
      } else {
        return a;
      }
    }
  }
  ExprP filters(ExprP a) {
    for (;;) {
      if (accept_op("|")) {
        auto e = mk(Expr::Filter);
        e->name = name();
        e->a = std::move(a);
        if (accept_op("(")) call_args(*e);
        a = done(std::move(e));
      } else if (accept_name("is")) {
        auto e = mk(Expr::Test);
        e->negate = accept_name("not");
        e->name = name();
        e->a = std::move(a);
        if (accept_op("(")) {
          call_args(*e);
        } else {
          const Token& t = t_[p_];
          const bool arg = t.type == TT::String || t.type == TT::Int || t.type == TT::Float ||
                           (t.type == TT::Name && t.s != "and" && t.s != "or" && t.s != "else" &&
                            t.s != "if" && t.s != "not" && t.s != "in" && t.s != "is");
          if (arg) e->args.push_back(postfix(primary()));
        }
        a = done(std::move(e));
      } else {
        return a;
      }
    }
  }
  ExprP primary() {
    const Token t = t_[p_];
    if (t.type == TT::End) terr("unexpected end of expression in '{}'", src_);
    ++p_;
    auto lit = [](json v) {
      auto e = mk(Expr::Lit);
      e->lit = std::move(v);
      return e;
    };
    switch (t.type) {
      case TT::String: {
        std::string s = t.s;
        while (t_[p_].type == TT::String) s += t_[p_++].s;  // adjacent literals concatenate
        return lit(s);
      }
      case TT::Int: return lit(t.i);
      case TT::Float: return lit(t.f);
      case TT::Name: {
        if (t.s == "true" || t.s == "True") return lit(true);
        if (t.s == "false" || t.s == "False") return lit(false);
        if (t.s == "none" || t.s == "None") return lit(nullptr);
        auto e = mk(Expr::Name);
        e->name = t.s;
        return e;
      }
      default: break;
    }
    if (t.s == "(") {
      ExprP e = parse_expr();
      if (accept_op(",")) {  // tuple -> list
        auto l = mk(Expr::List);
        l->args.push_back(std::move(e));
        while (!peek_op(")")) {
          l->args.push_back(parse_expr());
          if (!accept_op(",")) break;
        }
        expect_op(")");
        return done(std::move(l));
      }
      expect_op(")");
      return e;
    }
    if (t.s == "[") {
      auto l = mk(Expr::List);
      while (!peek_op("]")) {
        l->args.push_back(parse_expr());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return done(std::move(l));
    }
    if (t.s == "{") {
      auto d = mk(Expr::Dict);
      while (!peek_op("}")) {
        ExprP k = parse_expr();
        expect_op(":");
        d->args.push_back(std::move(k));
        d->args.push_back(parse_expr());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return done(std::move(d));
    }
    terr("unexpected '{}' in '{}'", t.s, src_);
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  std::string src_;
  int nest_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Template segments and statements.

struct Segment {
  enum Kind { Text, Var, Block } kind;
  std::string s;
};

std::vector<Segment> segment(const std::string& src) {
  std::vector<Segment> segs;
  size_t pos = 0;
  bool strip_next = false, after_block = false;
  const size_t n = src.size();
  while (pos <= n) {
    size_t p = pos;
    for (;;) {
      p = src.find('{', p);
      if (p == std::string::npos || p + 1 >= n) {
        p = std::string::npos;
        break;
      }
      const char k = src[p + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++p;
    }
    std::string text = src.substr(pos, p == std::string::npos ? std::string::npos : p - pos);
    if (strip_next) {
      text = strip_chars(text, kWhitespace, true, false);
    } else if (after_block) {  // trim_blocks: drop the first newline after a block tag
      if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
      else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
    }
    if (p == std::string::npos) {
      // keep_trailing_newline = False
      if (!text.empty() && text.back() == '\n') text.pop_back();
      if (!text.empty()) segs.push_back({Segment::Text, text});
      break;
    }
    const char kind = src[p + 1];
    size_t q = p + 2;
    bool plus = false;
    if (q < n && src[q] == '-') {
      text = strip_chars(text, kWhitespace, false, true);
      ++q;
    } else {
      if (q < n && src[q] == '+') {
        plus = true;
        ++q;
      }
      if (kind != '{' && !plus) {  // lstrip_blocks: spaces between a line start and a block tag
        size_t ls = p;
        while (ls > pos && (src[ls - 1] == ' ' || src[ls - 1] == '\t')) --ls;
        if ((ls == 0 || src[ls - 1] == '\n') && p - ls <= text.size()) text.resize(text.size() - (p - ls));
      }
    }
    if (!text.empty()) segs.push_back({Segment::Text, text});
    // Find the closing delimiter (outside string literals).
    const char close = kind == '{' ? '}' : kind;
    size_t e = q;
    char quote = 0;
    for (; e + 1 < n; ++e) {
      const char c = src[e];
      if (kind != '#') {
        if (quote) {
          if (c == '\\') ++e;
          else if (c == quote) quote = 0;
          continue;
        }
        if (c == '\'' || c == '"') {
          quote = c;
          continue;
        }
      }
      if (c == close && src[e + 1] == '}') break;
    }
    if (e + 1 >= n) terr("unclosed '{{{}' tag at offset {}", kind, p);
    size_t inner_end = e;
    strip_next = false;
    if (inner_end > q && src[inner_end - 1] == '-') {
      strip_next = true;
      --inner_end;
    } else if (inner_end > q && src[inner_end - 1] == '+') {
      --inner_end;
    }
    const std::string inner = src.substr(q, inner_end - q);
    if (kind == '{') segs.push_back({Segment::Var, inner});
    else if (kind == '%') segs.push_back({Segment::Block, inner});
    after_block = kind != '{';
    pos = e + 2;
  }
  return segs;
}

struct TemplateNode;
using NodeP = std::unique_ptr<TemplateNode>;
using Body = std::vector<NodeP>;
struct TemplateNode {
  enum Kind { Text, Output, If, For, Set, SetBlock, Break, Continue, Scope } kind;
  std::string text;
  ExprP expr, cond;
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition or null for else, body)
  std::vector<std::string> targets;              // For: loop variables; Set: name or ns, attr
  Body body, else_body;
  explicit TemplateNode(Kind k) : kind(k) {}
};

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse() {
    std::string end;
    Body b = body({}, &end);
    if (!end.empty()) terr("unexpected '{{% {} %}}'", end);
    return b;
  }

 private:
  static std::string keyword(const std::string& block, std::string* rest) {
    size_t i = block.find_first_not_of(kWhitespace);
    if (i == std::string::npos) terr("empty block tag");
    size_t j = i;
    while (j < block.size() && (std::isalnum((unsigned char)block[j]) || block[j] == '_')) ++j;
    *rest = block.substr(j);
    return block.substr(i, j - i);
  }

  // Parses until one of `ends` (a block keyword); *found gets it ("" at the end of input).
  Body body(const std::vector<std::string>& ends, std::string* found) {
    Body out;
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_++];
      if (s.kind == Segment::Text) {
        auto n = std::make_unique<TemplateNode>(TemplateNode::Text);
        n->text = s.s;
        out.push_back(std::move(n));
        continue;
      }
      if (s.kind == Segment::Var) {
        ExprParser p(lex_expr(s.s), s.s);
        auto n = std::make_unique<TemplateNode>(TemplateNode::Output);
        n->expr = p.parse_expr();
        p.expect_end();
        out.push_back(std::move(n));
        continue;
      }
      std::string rest;
      const std::string kw = keyword(s.s, &rest);
      if (std::find(ends.begin(), ends.end(), kw) != ends.end()) {
        *found = kw;
        rest_ = rest;
        return out;
      }
      out.push_back(statement(kw, rest, s.s));
    }
    if (!ends.empty()) terr("missing '{{% {} %}}'", ends.back());
    found->clear();
    return out;
  }

  NodeP statement(const std::string& kw, const std::string& rest, const std::string& src) {
    struct Nest {
      explicit Nest(int& n) : n_(n) {
        if (++n_ > kMaxNesting) terr("blocks nested deeper than {} levels", kMaxNesting);
      }
      ~Nest() { --n_; }
      int& n_;
    } nest(nest_);
    if (kw == "if") {
      auto n = std::make_unique<TemplateNode>(TemplateNode::If);
      std::string cond_src = rest;
      for (;;) {
        ExprP cond;
        if (cond_src.find_first_not_of(kWhitespace) != std::string::npos) {
          ExprParser p(lex_expr(cond_src), cond_src);
          cond = p.parse_expr();
          p.expect_end();
        }
        std::string end;
        Body b = body({"elif", "else", "endif"}, &end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "endif") break;
        if (end == "else") {
          std::string end2;
          Body eb = body({"endif"}, &end2);
          n->branches.emplace_back(nullptr, std::move(eb));
          break;
        }
        cond_src = rest_;  // elif condition
        if (cond_src.find_first_not_of(kWhitespace) == std::string::npos) terr("'elif' without a condition");
      }
      if (!n->branches.front().first) terr("'if' without a condition");
      return n;
    }
    if (kw == "for") {
      auto n = std::make_unique<TemplateNode>(TemplateNode::For);
      ExprParser p(lex_expr(rest), src);
      n->targets.push_back(p.name());
      while (p.accept_op(",")) n->targets.push_back(p.name());
      if (!p.accept_name("in")) terr("expected 'in' in '{}'", src);
      n->expr = p.parse_or_expr();
      if (p.accept_name("if")) n->cond = p.parse_or_expr();
      p.accept_name("recursive");
      p.expect_end();
      std::string end;
      n->body = body({"else", "endfor"}, &end);
      if (end == "else") n->else_body = body({"endfor"}, &end);
      return n;
    }
    if (kw == "set") {
      ExprParser p(lex_expr(rest), src);
      std::vector<std::string> target{p.name()};
      if (p.accept_op(".")) target.push_back(p.name());
      if (p.at_end()) {  // {% set x %}...{% endset %}
        auto n = std::make_unique<TemplateNode>(TemplateNode::SetBlock);
        n->targets = target;
        std::string end;
        n->body = body({"endset"}, &end);
        return n;
      }
      p.expect_op("=");
      auto n = std::make_unique<TemplateNode>(TemplateNode::Set);
      n->targets = target;
      n->expr = p.parse_expr();
      p.expect_end();
      return n;
    }
    if (kw == "break" || kw == "continue") return std::make_unique<TemplateNode>(kw == "break" ? TemplateNode::Break : TemplateNode::Continue);
    if (kw == "generation") {  // transformers' assistant-mask marker: renders its body
      auto n = std::make_unique<TemplateNode>(TemplateNode::Scope);
      std::string end;
      n->body = body({"endgeneration"}, &end);
      return n;
    }
    terr("unsupported tag '{{% {} %}}'", kw);
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  std::string rest_;
  int nest_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Rendering.

struct LoopBreak {};
struct LoopContinue {};

class Renderer {
 public:
  explicit Renderer(const json& globals) {
    if (deeper_than(globals, kMaxValueDepth))
      terr("the context nests lists/objects deeper than {} levels", kMaxValueDepth);
    uint64_t items = 0, bytes = 0;
    measure(globals, items, bytes);
    max_steps_ = kBaseSteps + kStepsPerItem * items;
    max_bytes_ = kBaseBytes + kBytesPerByte * bytes;
    scopes_.emplace_back();
    for (auto it = globals.begin(); it != globals.end(); ++it) scopes_[0][it.key()] = it.value();
  }

  void exec(const Body& b, std::string& out) {
    for (const NodeP& n : b) exec(*n, out);
  }

 private:
  using Scope = std::map<std::string, json>;

  // The render's work budget (kBaseSteps.., kBaseBytes..): a template that loops or copies without
  // end stops with an Error instead of stalling the server or exhausting memory.
  static void measure(const json& j, uint64_t& items, uint64_t& bytes) {
    bytes += shallow_bytes(j);
    if (!j.is_structured()) return;
    items += j.size();
    for (const json& x : j) measure(x, items, bytes);  // depth checked by the caller
  }
  void step(uint64_t cost = 1) {
    steps_ += cost;
    if (steps_ > max_steps_) terr("rendering took more than {} steps", max_steps_);
  }
  // Charged before an allocation of `n` bytes where one can be large.
  void produce(uint64_t n) {
    bytes_ += n;
    if (n > max_bytes_ || bytes_ > max_bytes_)
      terr("rendering produced more than {} MiB of text and values", max_bytes_ >> 20);
  }
  uint64_t bytes_left() const { return bytes_ >= max_bytes_ ? 0 : max_bytes_ - bytes_; }
  // Heap bytes of a whole value (string bytes + kItemBytes per item), counted up to `cap` (so
  // the walk costs no more than the budget allows).
  uint64_t deep_bytes(const json& j, uint64_t cap) const {
    uint64_t n = shallow_bytes(j);
    if (j.is_structured())
      for (const json& x : j) {
        if (n > cap) break;
        n += deep_bytes(x, cap - n);
      }
    return n;
  }
  void charge_copy(const json& j) { produce(deep_bytes(j, bytes_left() + 1)); }
  void append(std::string& out, std::string_view piece) {
    produce(piece.size());
    out += piece;
  }

  json* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  void exec(const TemplateNode& n, std::string& out) {
    step();
    switch (n.kind) {
      case TemplateNode::Text: append(out, n.text); return;
      case TemplateNode::Output: append(out, to_str(eval(*n.expr))); return;
      case TemplateNode::If:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || truthy(eval(*cond))) {
            exec(body, out);
            return;
          }
        }
        return;
      case TemplateNode::For: exec_for(n, out); return;
      case TemplateNode::Set: {
        Value v = eval(*n.expr);
        if (v.borrowed()) charge_copy(v.j());
        assign(n.targets, std::move(v).take());
        return;
      }
      case TemplateNode::SetBlock: {
        std::string s;
        exec(n.body, s);
        assign(n.targets, s);
        return;
      }
      case TemplateNode::Break: throw LoopBreak{};
      case TemplateNode::Continue: throw LoopContinue{};
      case TemplateNode::Scope: exec(n.body, out); return;
    }
  }

  void assign(const std::vector<std::string>& t, json v) {
    // Values a template builds stay as flat as its context may be (a namespace can hold
    // itself: {% set ns.x = ns %} in a loop would nest without end).
    if (deeper_than(v, kMaxValueDepth))
      terr("'{}' would nest lists/objects deeper than {} levels", t.back(), kMaxValueDepth);
    if (t.size() == 1) {
      scopes_.back()[t[0]] = std::move(v);
      return;
    }
    json* ns = lookup(t[0]);
    if (!ns || !ns->is_object()) terr("cannot set attribute '{}' of '{}': not a namespace", t[1], t[0]);
    (*ns)[t[1]] = std::move(v);
  }

  void exec_for(const TemplateNode& n, std::string& out) {
    Value seq = eval(*n.expr);
    std::vector<json> items;
    // The items are copied (a string's characters become one item each).
    if (!seq.undef) seq.j().is_string() ? produce(kItemBytes * seq.j().get_ref<const std::string&>().size())
                                        : charge_copy(seq.j());
    if (seq.undef || seq.j().is_null()) {
    } else if (seq.j().is_array()) {
      items.assign(seq.j().begin(), seq.j().end());
    } else if (seq.j().is_object()) {
      for (auto it = seq.j().begin(); it != seq.j().end(); ++it) items.emplace_back(it.key());
    } else if (seq.j().is_string()) {
      for (char c : seq.j().get<std::string>()) items.emplace_back(std::string(1, c));
    } else {
      terr("cannot iterate over a {}", seq.j().type_name());
    }
    auto bind = [&](Scope& s, const json& item) {
      if (n.targets.size() == 1) {
        s[n.targets[0]] = item;
      } else {
        if (!item.is_array() || item.size() != n.targets.size())
          terr("cannot unpack a loop item into {} variables", n.targets.size());
        for (size_t k = 0; k < n.targets.size(); ++k) s[n.targets[k]] = item[k];
      }
    };
    if (n.cond) {
      std::vector<json> kept;
      for (const json& it : items) {
        step(kLoopStepCost);
        scopes_.emplace_back();
        bind(scopes_.back(), it);
        const bool keep = truthy(eval(*n.cond));
        scopes_.pop_back();
        if (keep) kept.push_back(it);
      }
      items.swap(kept);
    }
    if (items.empty()) {
      exec(n.else_body, out);
      return;
    }
    const int64_t len = (int64_t)items.size();
    for (int64_t i = 0; i < len; ++i) {
      step(kLoopStepCost);  // a scope, the loop variables and the loop object
      scopes_.emplace_back();
      bind(scopes_.back(), items[i]);
      json loop = json::object();
      loop["index"] = i + 1;
      loop["index0"] = i;
      loop["revindex"] = len - i;
      loop["revindex0"] = len - i - 1;
      loop["first"] = i == 0;
      loop["last"] = i + 1 == len;
      loop["length"] = len;
      if (i > 0) loop["previtem"] = items[i - 1];
      if (i + 1 < len) loop["nextitem"] = items[i + 1];
      scopes_.back()["loop"] = std::move(loop);
      bool stop = false;
      try {
        exec(n.body, out);
      } catch (const LoopBreak&) {
        stop = true;
      } catch (const LoopContinue&) {
      }
      scopes_.pop_back();
      if (stop) break;
    }
  }

  // Every evaluation is a step; a new value (not a borrowed variable) is charged by its size.
  Value eval(const Expr& e) {
    step();
    Value v = eval_node(e);
    if (!v.undef && !v.borrowed()) charge_copy(v.j());
    return v;
  }

  Value eval_node(const Expr& e) {
    switch (e.kind) {
      case Expr::Lit: return e.lit;
      case Expr::Name: {
        const json* v = lookup(e.name);
        return v ? Value::borrow(v) : Value::undefined();
      }
      case Expr::Attr: {
        Value o = eval(*e.a);
        if (!o.undef && o.j().is_object()) {
          auto it = o.j().find(e.name);
          if (it != o.j().end()) return o.part(*it);
        }
        return Value::undefined();
      }
      case Expr::Index: return index(eval(*e.a), eval(*e.b));
      case Expr::Slice: return slice(e);
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: {
        const bool r = test(e);
        return json(e.negate ? !r : r);
      }
      case Expr::Not: return json(!truthy(eval(*e.a)));
      case Expr::Neg: {
        Value v = eval(*e.a);
        if (v.undef || !v.j().is_number()) terr("unary '-' needs a number");
        if (is_int(v.j())) {
          return json(int_negate(v.j().get<int64_t>(), "-"));
        }
        return json(-v.j().get<double>());
      }
      case Expr::And: {
        Value a = eval(*e.a);
        return truthy(a) ? eval(*e.b) : a;
      }
      case Expr::Or: {
        Value a = eval(*e.a);
        return truthy(a) ? a : eval(*e.b);
      }
      case Expr::Cond:
        if (truthy(eval(*e.b))) return eval(*e.a);
        return e.c ? eval(*e.c) : Value::undefined();
      case Expr::List: {
        json arr = json::array();
        for (const auto& x : e.args) arr.push_back(eval(*x).take());
        return arr;
      }
      case Expr::Dict: {
        json obj = json::object();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2)
          obj[to_str(eval(*e.args[k]))] = eval(*e.args[k + 1]).take();
        return obj;
      }
      case Expr::Bin: return binary(e.name, eval(*e.a), eval(*e.b));
    }
    terr("bad expression");
  }

  static Value index(const Value& o, const Value& k) {
    if (o.undef || k.undef) return Value::undefined();
    if (o.j().is_object()) {
      const std::string key = k.j().is_string() ? k.j().get<std::string>() : to_str(k);
      auto it = o.j().find(key);
      if (it != o.j().end()) return o.part(*it);
      return Value::undefined();
    }
    if (o.j().is_array() || o.j().is_string()) {
      if (!k.j().is_number_integer()) terr("index must be an integer");
      const int64_t len = o.j().is_array() ? (int64_t)o.j().size() : (int64_t)o.j().get_ref<const std::string&>().size();
      int64_t i = k.j().get<int64_t>();
      if (i < 0) i += len;
      if (i < 0 || i >= len) return Value::undefined();
      if (o.j().is_array()) return o.part(o.j()[(size_t)i]);
      return json(std::string(1, o.j().get_ref<const std::string&>()[(size_t)i]));
    }
    return Value::undefined();
  }

  Value slice(const Expr& e) {
    Value o = eval(*e.a);
    if (o.undef) return o;
    const bool str = o.j().is_string();
    if (!str && !o.j().is_array()) terr("cannot slice a {}", o.j().type_name());
    const int64_t len = str ? (int64_t)o.j().get_ref<const std::string&>().size() : (int64_t)o.j().size();
    int64_t step = e.args[0] ? need_int(eval(*e.args[0]), "slice step") : 1;
    if (step == 0) terr("slice step cannot be zero");
    auto norm = [&](const ExprP& x, int64_t dflt) -> int64_t {
      if (!x) return dflt;
      int64_t v = need_int(eval(*x), "slice bound");
      if (v < 0) v += len;
      if (step > 0) return std::clamp<int64_t>(v, 0, len);
      return std::clamp<int64_t>(v, -1, len - 1);
    };
    const int64_t lo = norm(e.b, step > 0 ? 0 : len - 1), hi = norm(e.c, step > 0 ? len : -1);
    json out = str ? json(std::string()) : json::array();
    // lo and hi are in [-1, len]; the count is computed without stepping past them (a step
    // near INT64_MAX would overflow i).
    const uint64_t span = step > 0 ? (hi > lo ? uint64_t(hi - lo) : 0) : (lo > hi ? uint64_t(lo - hi) : 0);
    const uint64_t stride = step > 0 ? uint64_t(step) : 0 - uint64_t(step);
    const uint64_t count = span ? (span - 1) / stride + 1 : 0;
    for (uint64_t k = 0; k < count; ++k) {
      const int64_t i = lo + (step > 0 ? int64_t(k * stride) : -int64_t(k * stride));
      if (str) out.get_ref<std::string&>() += o.j().get_ref<const std::string&>()[(size_t)i];
      else out.push_back(o.j()[(size_t)i]);
    }
    return out;
  }

  // Comparing big borrowed values costs their size: charged like a copy of the smaller one.
  void charge_compare(const Value& a, const Value& b) {
    if (a.undef || b.undef) return;
    const uint64_t cap = bytes_left() + 1;
    produce(std::min(deep_bytes(a.j(), cap), deep_bytes(b.j(), cap)));
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") return json(to_str(a) + to_str(b));
    if (op == "==" || op == "!=") {
      charge_compare(a, b);
      return json(values_equal(a, b) == (op == "=="));
    }
    if (op == "in" || op == "not in") {
      if (!b.undef) charge_copy(b.j());  // a linear search through b
      bool r = false;
      if (!b.undef) {
        if (b.j().is_string()) {
          r = a.j().is_string() && find_text(b.j().get_ref<const std::string&>(), a.j().get_ref<const std::string&>()) != std::string::npos;
        } else if (b.j().is_array()) {
          for (const json& x : b.j()) r = r || (!a.undef && x == a.j());
        } else if (b.j().is_object()) {
          r = a.j().is_string() && b.j().contains(a.j().get<std::string>());
        }
      }
      return json(op == "in" ? r : !r);
    }
    if (a.undef || b.undef) terr("'{}' on an undefined value", op);
    const json &x = a.j(), &y = b.j();
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (!((is_num(x) && is_num(y)) || (x.is_string() && y.is_string())))
        terr("cannot compare {} and {}", x.type_name(), y.type_name());
      if (op == "<") return json(x < y);
      if (op == ">") return json(y < x);
      if (op == "<=") return json(!(y < x));
      return json(!(x < y));
    }
    if (op == "+") {
      if (x.is_string() && y.is_string()) return json(x.get<std::string>() + y.get<std::string>());
      if (x.is_array() && y.is_array()) {
        json r = x;
        for (const json& v : y) r.push_back(v);
        return r;
      }
    }
    if (op == "*" && x.is_string() && is_int(y)) {
      const std::string& xs = x.get_ref<const std::string&>();
      const int64_t n = y.get<int64_t>();
      if (xs.empty() || n <= 0) return json(std::string());
      if (uint64_t(n) > max_bytes_ / xs.size()) produce(max_bytes_ + 1);  // too long, before allocating
      produce(xs.size() * uint64_t(n));
      std::string r;
      r.reserve(xs.size() * size_t(n));
      for (int64_t i = 0; i < n; ++i) r += xs;
      return json(std::move(r));
    }
    if (!is_num(x) || !is_num(y)) terr("unsupported operand types for '{}': {} and {}", op, x.type_name(), y.type_name());
    const bool ints = is_int(x) && is_int(y);
    if (ints) {
      const int64_t p = x.get<int64_t>(), q = y.get<int64_t>();
      if (op == "+" || op == "-" || op == "*") return json(int_arith(op, p, q));
      if (op == "/") {
        if (q == 0) terr("division by zero");
        return json((double)p / (double)q);
      }
      if (op == "//" || op == "%") {
        if (q == 0) terr("division by zero");
        if (p == INT64_MIN && q == -1) {
          if (op == "%") return json(int64_t{0});
          terr("integer overflow in '{}'", op);
        }
        int64_t d = p / q, m = p % q;
        if (m != 0 && ((m < 0) != (q < 0))) {  // Python floors
          d -= 1;
          m += q;
        }
        return json(op == "//" ? d : m);
      }
      if (op == "**") {
        const double r = std::round(std::pow((double)p, (double)q));
        if (!(r >= -9223372036854775808.0 && r < 9223372036854775808.0)) terr("integer overflow in '**'");
        return json(static_cast<int64_t>(r));
      }
    }
    const double p = x.get<double>(), q = y.get<double>();
    if (op == "+") return json(p + q);
    if (op == "-") return json(p - q);
    if (op == "*") return json(p * q);
    if (op == "/") return json(p / q);
    if (op == "//") return json(std::floor(p / q));
    if (op == "%") return json(p - q * std::floor(p / q));
    if (op == "**") return json(std::pow(p, q));
    terr("unknown operator '{}'", op);
  }

  std::vector<Value> args(const Expr& e) {
    std::vector<Value> v;
    for (const auto& a : e.args) v.push_back(eval(*a));
    return v;
  }
  Value kwarg(const Expr& e, const char* name) {
    for (const auto& [k, x] : e.kwargs)
      if (k == name) return eval(*x);
    return Value::undefined();
  }

  Value call(const Expr& e) {
    if (e.a->kind == Expr::Name) {
      const std::string& f = e.a->name;
      std::vector<Value> a = args(e);
      if (f == "raise_exception") terr("{}", a.empty() ? std::string("raise_exception") : to_str(a[0]));
      if (f == "namespace" || f == "dict") {
        json obj = json::object();
        for (const auto& [k, x] : e.kwargs) obj[k] = eval(*x).take();
        return obj;
      }
      if (f == "range") {
        int64_t lo = 0, hi = 0, step = 1;
        if (a.size() == 1) hi = need_int(a[0], "range");
        else if (a.size() >= 2) {
          lo = need_int(a[0], "range");
          hi = need_int(a[1], "range");
          if (a.size() >= 3) step = need_int(a[2], "range");
        }
        if (step == 0) terr("range step cannot be zero");
        // Counted in unsigned arithmetic: hi - lo or i + step may not fit in int64.
        const uint64_t span = step > 0 ? (hi > lo ? uint64_t(hi) - uint64_t(lo) : 0)
                                       : (lo > hi ? uint64_t(lo) - uint64_t(hi) : 0);
        const uint64_t stride = step > 0 ? uint64_t(step) : 0 - uint64_t(step);
        const uint64_t count = span ? (span - 1) / stride + 1 : 0;
        if (count > uint64_t(kMaxRange)) terr("range() of {} items (at most {})", count, kMaxRange);
        json r = json::array();
        for (uint64_t k = 0; k < count; ++k) r.push_back(int64_t(uint64_t(lo) + k * uint64_t(step)));
        return r;
      }
      if (f == "strftime_now") {
        const std::time_t t = std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof buf, a.empty() ? "%Y-%m-%d" : need_str(a[0], "strftime_now").c_str(), &tm);
        return json(std::string(buf, n));
      }
      terr("unknown function '{}'", f);
    }
    if (e.a->kind == Expr::Attr) return method(eval(*e.a->a), e.a->name, args(e), e);
    terr("only functions and methods can be called");
  }

  Value method(const Value& o, const std::string& m, const std::vector<Value>& a, const Expr& e) {
    if (o.undef) terr("cannot call '{}' on an undefined value", m);
    if (o.j().is_string()) {
      const std::string& s = o.j().get_ref<const std::string&>();
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const std::string chars = a.empty() || a[0].j().is_null() ? kWhitespace : need_str(a[0], m.c_str());
        return json(strip_chars(s, chars, m != "rstrip", m != "lstrip"));
      }
      if (m == "startswith") return json(s.rfind(need_str(arg(a, 0, m), "startswith"), 0) == 0);
      if (m == "endswith") {
        const std::string& x = need_str(arg(a, 0, m), "endswith");
        return json(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
      }
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r) c = m == "upper" ? (char)std::toupper((unsigned char)c) : (char)std::tolower((unsigned char)c);
        return json(r);
      }
      if (m == "title" || m == "capitalize") return filter_named(m, o, {}, e);
      if (m == "replace") return filter_named("replace", o, a, e);
      if (m == "split") {
        json r = json::array();
        if (a.empty() || a[0].j().is_null()) {
          size_t i = 0;
          while (true) {
            i = s.find_first_not_of(kWhitespace, i);
            if (i == std::string::npos) break;
            size_t j = s.find_first_of(kWhitespace, i);
            produce(kItemBytes);  // before the item exists: "a a a ..." makes many
            r.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
            if (j == std::string::npos) break;
            i = j;
          }
          return r;
        }
        const std::string& sep = need_str(a[0], "split");
        if (sep.empty()) terr("split: empty separator");
        int64_t maxsplit = a.size() > 1 ? need_int(a[1], "split") : -1;
        size_t i = 0;
        for (;;) {
          size_t j = find_text(s, sep, i);
          produce(kItemBytes);  // before the item exists: "xxxx".split("x") makes many
          if (j == std::string::npos || maxsplit == 0) {
            r.push_back(s.substr(i));
            break;
          }
          r.push_back(s.substr(i, j - i));
          i = j + sep.size();
          if (maxsplit > 0) --maxsplit;
        }
        return r;
      }
      if (m == "join") {
        std::string r;
        if (a.empty() || !a[0].j().is_array()) terr("join needs a list");
        bool first = true;
        for (const json& x : a[0].j()) {
          if (!first) append(r, s);
          append(r, to_str(Value::borrow(&x)));
          first = false;
        }
        return json(r);
      }
      if (m == "format") {
        std::string r;
        size_t k = 0;
        for (size_t i = 0; i < s.size(); ++i) {
          if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '}') {
            r += k < a.size() ? to_str(a[k++]) : "";
            ++i;
          } else {
            r += s[i];
          }
        }
        return json(r);
      }
    }
    if (o.j().is_object()) {
      if (m == "items") {
        json r = json::array();
        for (auto it = o.j().begin(); it != o.j().end(); ++it) r.push_back(json::array({it.key(), it.value()}));
        return r;
      }
      if (m == "keys" || m == "values") {
        json r = json::array();
        for (auto it = o.j().begin(); it != o.j().end(); ++it) r.push_back(m == "keys" ? json(it.key()) : it.value());
        return r;
      }
      if (m == "get") {
        const std::string& k = need_str(arg(a, 0, m), "get");
        auto it = o.j().find(k);
        if (it != o.j().end()) return o.part(*it);
        return a.size() > 1 ? a[1] : Value(json(nullptr));
      }
    }
    terr("unknown method '{}' of a {}", m, o.j().type_name());
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.a);
    return filter_named(e.name, v, args(e), e);
  }

  bool apply_test(const std::string& t, const Value& v, const std::vector<Value>& a) {
    const json& j = v.j();
    if (t == "defined") return !v.undef;
    if (t == "undefined") return v.undef;
    if (t == "none") return !v.undef && j.is_null();
    if (t == "string") return !v.undef && j.is_string();
    if (t == "number") return !v.undef && j.is_number() ;
    if (t == "integer") return !v.undef && j.is_number_integer();
    if (t == "float") return !v.undef && j.is_number_float();
    if (t == "boolean") return !v.undef && j.is_boolean();
    if (t == "true") return !v.undef && j.is_boolean() && j.get<bool>();
    if (t == "false") return !v.undef && j.is_boolean() && !j.get<bool>();
    if (t == "mapping") return !v.undef && j.is_object();
    if (t == "sequence" || t == "iterable") return !v.undef && (j.is_array() || j.is_string() || j.is_object());
    if (t == "odd" || t == "even") {
      const int64_t x = need_int(v, "odd/even");
      return (x % 2 != 0) == (t == "odd");
    }
    if (t == "divisibleby") {
      const int64_t d = need_int(arg(a, 0, t), "divisibleby");
      const int64_t x = need_int(v, "divisibleby");
      return d != 0 && (d == -1 || x % d == 0);  // INT64_MIN % -1 overflows
    }
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas" || t == "ne" || t == "!=")
      return truthy(binary(t == "ne" || t == "!=" ? "!=" : "==", v, arg(a, 0, t)));
    if (t == "lt" || t == "gt" || t == "le" || t == "ge") {
      static const std::map<std::string, std::string> ops = {{"lt", "<"}, {"gt", ">"}, {"le", "<="}, {"ge", ">="}};
      return truthy(binary(ops.at(t), v, arg(a, 0, t)));
    }
    if (t == "in") return truthy(binary("in", v, arg(a, 0, t)));
    terr("unknown test '{}'", t);
  }

  bool test(const Expr& e) { return apply_test(e.name, eval(*e.a), args(e)); }

  Value filter_named(const std::string& f, const Value& v, const std::vector<Value>& a, const Expr& e) {
    const json& j = v.j();
    if (f == "trim") return json(strip_chars(v.undef ? "" : need_str(v, "trim"), a.empty() ? kWhitespace : need_str(a[0], "trim"), true, true));
    if (f == "length" || f == "count") {
      if (v.undef) return json(0);
      if (j.is_string()) return json((int64_t)j.get_ref<const std::string&>().size());
      if (j.is_array() || j.is_object()) return json((int64_t)j.size());
      terr("length of a {}", j.type_name());
    }
    if (f == "tojson") {
      Value ind = a.empty() ? kwarg(e, "indent") : a[0];
      int64_t indent = ind.undef || ind.j().is_null() ? -1 : need_int(ind, "tojson indent");
      if (indent > 1024) terr("tojson indent {} is too large", indent);
      std::string out;
      dumps(v.undef ? json(nullptr) : j, static_cast<int>(std::max<int64_t>(indent, -1)), 0, out, bytes_left());
      return json(std::move(out));
    }
    if (f == "string") return json(to_str(v));
    if (f == "safe" || f == "e" || f == "escape" || f == "forceescape") return v;
    if (f == "upper" || f == "lower") {
      std::string r = to_str(v);
      for (char& c : r) c = f == "upper" ? (char)std::toupper((unsigned char)c) : (char)std::tolower((unsigned char)c);
      return json(r);
    }
    if (f == "capitalize" || f == "title") {
      std::string r = to_str(v);
      bool start = true;
      for (size_t i = 0; i < r.size(); ++i) {
        const unsigned char c = (unsigned char)r[i];
        if (f == "capitalize") r[i] = i == 0 ? (char)std::toupper(c) : (char)std::tolower(c);
        else {
          r[i] = start ? (char)std::toupper(c) : (char)std::tolower(c);
          start = !std::isalnum(c);
        }
      }
      return json(r);
    }
    if (f == "replace") {
      std::string s = to_str(v);
      const std::string from = to_str(arg(a, 0, f)), to = to_str(arg(a, 1, f));
      if (from.empty()) return json(s);
      std::string r;
      size_t i = 0;
      for (;;) {
        size_t k = find_text(s, from, i);
        if (k == std::string::npos) break;
        append(r, std::string_view(s).substr(i, k - i));
        append(r, to);
        i = k + from.size();
      }
      append(r, std::string_view(s).substr(i));
      return json(std::move(r));
    }
    if (f == "default" || f == "d") {
      const bool boolean = (a.size() > 1 && truthy(a[1])) || truthy(kwarg(e, "boolean"));
      if (v.undef || (boolean && !truthy(v))) return a.empty() ? Value(json("")) : a[0];
      return v;
    }
    if (f == "first" || f == "last") {
      if (v.undef) return v;
      if (j.is_array()) {
        if (j.empty()) return Value::undefined();
        return f == "first" ? j.front() : j.back();
      }
      if (j.is_string()) {
        const std::string& s = j.get_ref<const std::string&>();
        if (s.empty()) return Value::undefined();
        return json(std::string(1, f == "first" ? s.front() : s.back()));
      }
      terr("{} of a {}", f, j.type_name());
    }
    if (f == "list") {
      if (v.undef) return json::array();
      if (j.is_array()) return v;
      json r = json::array();
      if (j.is_string()) {
        produce(kItemBytes * j.get_ref<const std::string&>().size());  // one item per character
        for (char c : j.get<std::string>()) r.push_back(std::string(1, c));
      }
      else if (j.is_object())
        for (auto it = j.begin(); it != j.end(); ++it) r.push_back(it.key());
      else
        terr("list of a {}", j.type_name());
      return r;
    }
    if (f == "reverse") {
      if (j.is_string()) {
        std::string s = j.get<std::string>();
        std::reverse(s.begin(), s.end());
        return json(s);
      }
      if (!j.is_array()) terr("reverse of a {}", j.type_name());
      json r = json::array();
      for (auto it = j.rbegin(); it != j.rend(); ++it) r.push_back(*it);
      return r;
    }
    if (f == "join") {
      if (v.undef) return json("");
      if (!j.is_array()) terr("join of a {}", j.type_name());
      const std::string sep = a.empty() ? "" : to_str(a[0]);
      Value attr = kwarg(e, "attribute");
      std::string r;
      bool first = true;
      for (const json& x : j) {
        if (!first) append(r, sep);
        first = false;
        append(r, attr.undef ? to_str(Value::borrow(&x)) : to_str(index(Value::borrow(&x), attr)));
      }
      return json(std::move(r));
    }
    if (f == "items") {
      if (!j.is_object()) terr("items of a {}", j.type_name());
      json r = json::array();
      for (auto it = j.begin(); it != j.end(); ++it) r.push_back(json::array({it.key(), it.value()}));
      return r;
    }
    if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject") {
      if (v.undef) return json::array();
      if (!j.is_array()) terr("{} of a {}", f, j.type_name());
      const bool attr = f == "selectattr" || f == "rejectattr";
      const bool keep_if = f == "selectattr" || f == "select";
      size_t k = 0;
      Value name;
      if (attr) name = arg(a, k++, f);
      std::string test_name = k < a.size() ? to_str(a[k++]) : "";
      std::vector<Value> targs(a.begin() + (long)std::min(k, a.size()), a.end());
      json r = json::array();
      for (const json& x : j) {
        Value item = attr ? index(Value::borrow(&x), name) : Value::borrow(&x);
        const bool ok = test_name.empty() ? truthy(item) : apply_test(test_name, item, targs);
        if (ok == keep_if) r.push_back(x);
      }
      return r;
    }
    if (f == "map") {
      if (v.undef) return json::array();
      if (!j.is_array()) terr("map of a {}", j.type_name());
      Value attr = kwarg(e, "attribute");
      json r = json::array();
      for (const json& x : j) {
        if (!attr.undef) {
          Value item = index(Value::borrow(&x), attr);
          r.push_back(item.undef ? (a.empty() ? json(nullptr) : kwarg(e, "default").j()) : item.j());
        } else {
          if (a.empty()) terr("map needs a filter name or attribute=");
          r.push_back(filter_named(to_str(a[0]), Value::borrow(&x), std::vector<Value>(a.begin() + 1, a.end()), e).take());
        }
      }
      return r;
    }
    if (f == "int") {
      if (j.is_number()) return json(need_int(v, "int"));
      if (j.is_string()) {
        try {
          return json((int64_t)std::stoll(j.get<std::string>()));
        } catch (...) {
          return json(0);
        }
      }
      return json(0);
    }
    if (f == "float") {
      if (j.is_number()) return json(j.get<double>());
      return json(0.0);
    }
    if (f == "abs") {
      if (is_int(j)) {
        const int64_t x = j.get<int64_t>();
        return json(x < 0 ? int_negate(x, "abs") : x);
      }
      if (j.is_number()) return json(std::fabs(j.get<double>()));
      terr("abs of a {}", j.type_name());
    }
    if (f == "indent") {
      const int64_t w = a.empty() ? 4 : need_int(a[0], "indent");
      const bool first = (a.size() > 1 && truthy(a[1])) || truthy(kwarg(e, "first"));
      if (w > 1024) terr("indent width {} is too large", w);
      const std::string pad((size_t)std::max<int64_t>(0, w), ' ');
      std::string s = to_str(v), r;
      if (first) append(r, pad);
      for (size_t i = 0; i < s.size(); ++i) {
        r += s[i];
        if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') append(r, pad);
      }
      return json(std::move(r));
    }
    terr("unknown filter '{}'", f);
  }

  std::vector<Scope> scopes_;
  uint64_t steps_ = 0, bytes_ = 0, max_steps_ = kBaseSteps, max_bytes_ = kBaseBytes;
};

}  // namespace

struct ChatTemplate::Impl {
  std::string source;
  Body body;
};

ChatTemplate::ChatTemplate(const std::string& source) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  impl->body = TemplateParser(segment(source)).parse();
  impl_ = std::move(impl);
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;

const std::string& ChatTemplate::source() const { return impl_->source; }

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) fail("chat template: the context must be an object");
  Renderer r(context);
  std::string out;
  try {
    r.exec(impl_->body, out);
  } catch (const LoopBreak&) {
    fail("chat template: 'break' outside a loop");
  } catch (const LoopContinue&) {
    fail("chat template: 'continue' outside a loop");
  } catch (const nlohmann::json::exception& e) {
    fail("chat template: {}", e.what());
  }
  return out;
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token) const {
  json ctx = json::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_token;
  ctx["eos_token"] = eos_token;
  return render(ctx);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token) const {
  json arr = json::array();
  for (const ChatMessage& m : messages) arr.push_back(json{{"role", m.role}, {"content", m.content}});
  return apply(arr, add_generation_prompt, bos_token, eos_token);
}

std::string ModelChatTemplate::describe() const {
  if (harmony)
    return "chat format: harmony (gpt-oss), rendered natively; the answer is the final channel";
  if (fallback) return "chat template: the model has none (no tokenizer.chat_template); using ChatML";
  return fmt::format("chat template: {} ({} bytes)", origin, tmpl.source().size());
}

std::string ModelChatTemplate::format(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  if (harmony) return render_harmony(messages, add_generation_prompt, harmony_options);
  return tmpl.apply(messages, add_generation_prompt, bos_token, eos_token);
}

std::vector<int32_t> ModelChatTemplate::tokenize(const Tokenizer& tok, const std::string& rendered) const {
  const bool has_bos = !bos_token.empty() && rendered.rfind(bos_token, 0) == 0;
  return tok.encode(rendered, !has_bos, true);
}

ModelChatTemplate model_chat_template(const Tokenizer& tok, const std::string& override_source) {
  // gpt-oss's own Jinja template is not parsed: harmony is rendered natively.
  const bool harmony = override_source.empty() && uses_harmony(tok);
  const std::string& own =
      override_source.empty() ? (harmony ? std::string() : tok.chat_template()) : override_source;
  const bool fallback = own.empty() && !harmony;
  ModelChatTemplate m{ChatTemplate(fallback ? std::string(kChatMlTemplate) : own),
                      fallback, "", "", "", false, {}};
  m.fallback = fallback;
  m.harmony = harmony;
  m.origin = override_source.empty() ? "the model's tokenizer.chat_template" : "given on the command line";
  if (tok.bos_id() >= 0) m.bos_token = tok.token_text(tok.bos_id());
  if (tok.eos_id() >= 0) m.eos_token = tok.token_text(tok.eos_id());
  return m;
}

}  // namespace moeflow
