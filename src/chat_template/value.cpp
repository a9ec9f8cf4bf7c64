// Values and their Python semantics (value.h).
#include "chat_template/value.h"

#include <cmath>

#include "chat_template/limits.h"

namespace moeflow::jinja {

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
size_t find_text(std::string_view hay, std::string_view needle, size_t from) {
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

const std::string& need_str(const Value& v, const char* what) {
  if (v.undef || !v.j().is_string())
    terr("{} needs a string, got {}", what, v.undef ? "undefined" : v.j().type_name());
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

}  // namespace moeflow::jinja
