#include "toolcall/tool_call_arguments.h"

#include <set>
#include <string>

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;

// The JSON type names a schema declares: its `type` (one or a list), else the kinds of its
// enum / const values; empty when it says nothing.
std::set<std::string> declared_types(const ojson& s) {
  std::set<std::string> t;
  if (!s.is_object()) return t;
  auto kind = [](const ojson& v) -> std::string {
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_null()) return "null";
    if (v.is_number_integer()) return "integer";
    if (v.is_number()) return "number";
    return v.is_object() ? "object" : "array";
  };
  if (auto ty = s.find("type"); ty != s.end()) {
    if (ty->is_string()) t.insert(ty->get<std::string>());
    if (ty->is_array())
      for (const ojson& x : *ty)
        if (x.is_string()) t.insert(x.get<std::string>());
  } else if (auto c = s.find("const"); c != s.end()) {
    t.insert(kind(*c));
  } else if (auto e = s.find("enum"); e != s.end() && e->is_array()) {
    for (const ojson& v : *e) t.insert(kind(v));
  }
  return t;
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim_ws(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// JSON, or Python's spelling of true, false and null.
bool parse_value(std::string_view text, ojson& out) {
  const std::string_view t = trim_ws(text);
  if (t == "True" || t == "False") {
    out = t == "True";
    return true;
  }
  if (t == "None") {
    out = nullptr;
    return true;
  }
  out = ojson::parse(t.begin(), t.end(), nullptr, false);
  return !out.is_discarded() && !t.empty();
}

bool has_kind(const ojson& v, const std::set<std::string>& types) {
  auto in = [&](const char* n) { return types.count(n) != 0; };
  if (v.is_boolean()) return in("boolean");
  if (v.is_null()) return in("null");
  if (v.is_number_integer()) return in("integer") || in("number");
  if (v.is_number()) return in("number");
  if (v.is_object()) return in("object");
  if (v.is_array()) return in("array");
  return false;  // a JSON string: only the raw text is a string
}

}  // namespace

const ojson* tool_argument_schema(const ojson& tools, std::string_view function,
                                  std::string_view key) {
  if (!tools.is_array()) return nullptr;
  for (const ojson& t : tools) {
    auto f = t.find("function");
    if (f == t.end() || !f->is_object() || f->value("name", "") != function) continue;
    auto p = f->find("parameters");
    if (p == f->end() || !p->is_object()) return nullptr;
    auto props = p->find("properties");
    if (props == p->end() || !props->is_object()) return nullptr;
    auto s = props->find(std::string(key));
    return s != props->end() ? &*s : nullptr;
  }
  return nullptr;
}

bool declares_only_string(const ojson& schema) {
  const std::set<std::string> t = declared_types(schema);
  return t.size() == 1 && *t.begin() == "string";
}

bool declares_string_and_more(const ojson& schema) {
  const std::set<std::string> t = declared_types(schema);
  return t.size() > 1 && t.count("string");
}

ojson typed_text_argument(const ojson* schema, std::string_view text) {
  const std::set<std::string> types = schema ? declared_types(*schema) : std::set<std::string>{};
  ojson v;
  const bool parsed = parse_value(text, v);
  if (types.empty()) return parsed ? v : ojson(text);
  if (types.size() == 1 && types.count("string")) return ojson(text);
  if (parsed && has_kind(v, types)) return v;
  // A value of another type than declared: the JSON as written when there is no string to
  // fall back to (the client's schema check tells), else the text.
  if (parsed && !types.count("string")) return v;
  return ojson(text);
}

}  // namespace moeflow
