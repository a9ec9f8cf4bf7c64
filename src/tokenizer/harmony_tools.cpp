// The "# Tools" section of harmony's developer message: OpenAI function tools as a TypeScript
// namespace, written the way openai-harmony (json_schema_to_typescript and
// template_tools_section in its src/encoding.rs) writes them, quirks included, since that is
// the text gpt-oss was trained on:
//   * a property's description and title become "// " lines above it, its default a trailing
//     "// default: X" (a string in quotes, except in an enum; other values as compact JSON);
//   * a nested object is written after "name: " with its own description line first, its
//     properties and closing brace indented by four more spaces per level;
//   * oneOf lists its variants on lines of their own (" | T"), each with its description and
//     default; anyOf, allOf, $ref, const and numeric enums are not read (the type, or "any");
//   * "type": [..] is the union of the types; integer is number; an array is T[] of its items
//     (Array<any> without them);
//   * "nullable": true adds " | null".
#include <charconv>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/harmony.h"

namespace moeflow {
namespace {

using json = nlohmann::ordered_json;

const json* member(const json& v, const char* key) {
  if (!v.is_object()) return nullptr;
  const auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

// A member that is a string, or nullptr.
const std::string* string_member(const json& v, const char* key) {
  const json* m = member(v, key);
  return m && m->is_string() ? &m->get_ref<const std::string&>() : nullptr;
}

bool is_enum(const json& schema) {
  const json* e = member(schema, "enum");
  return e && e->is_array() && !e->empty();
}

bool nullable(const json& schema) {
  const json* n = member(schema, "nullable");
  return n && n->is_boolean() && n->get<bool>();
}

// A double as Rust's serde_json writes it (ryu: the shortest digits that round-trip; plain
// decimals for magnitudes from 1e-5 up to 1e16, "1e21" / "1.5e-7" beyond; always a ".0" or
// fraction when plain).
std::string rust_float(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e(+|-)XX
  std::string out;
  if (sci[0] == '-') {
    out = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // the point
  const int exp10 = std::stoi(sci.substr(e + 1));
  if (digits == "0") return out + "0.0";
  const int len = static_cast<int>(digits.size());
  const int k = exp10 - (len - 1);  // value = digits * 10^k
  const int kk = len + k;           // 10^(kk-1) <= value < 10^kk
  if (k >= 0 && kk <= 16) return out + digits + std::string(k, '0') + ".0";
  if (kk > 0 && kk <= 16) return out + digits.substr(0, kk) + "." + digits.substr(kk);
  if (kk > -5 && kk <= 0) return out + "0." + std::string(-kk, '0') + digits;
  out += digits.substr(0, 1);
  if (len > 1) out += "." + digits.substr(1);
  return out + "e" + std::to_string(kk - 1);
}

// A JSON value as serde_json's Display writes it (compact; floats as rust_float).
std::string rust_json(const json& v) {
  if (v.is_number_float()) return rust_float(v.get<double>());
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + rust_json(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "" : ",") + json(it.key()).dump() + ":" + rust_json(it.value());
      first = false;
    }
    return out + "}";
  }
  return v.dump();
}

// The text after "default: ". A string is quoted unless `owner` is an enum, where
// `raw_enum_string` writes it bare (properties) or as JSON (top-level oneOf variants).
std::string default_text(const json& d, const json& owner, bool raw_enum_string) {
  if (d.is_string() && !is_enum(owner)) return "\"" + d.get<std::string>() + "\"";
  if (d.is_string() && raw_enum_string) return d.get<std::string>();
  return rust_json(d);
}

std::string typescript(const json& schema, const std::string& indent);

// One oneOf variant's type: nullable adds " | null" unless null is already there.
std::string variant_type(const json& variant, const std::string& indent) {
  std::string t = typescript(variant, indent + "   ");
  if (nullable(variant) && t.find("null") == std::string::npos) t += " | null";
  return t;
}

// A oneOf schema: "\n{indent} | T // description default: X" per variant.
std::string one_of(const json& variants, const std::string& indent) {
  std::string out;
  for (const json& v : variants) {
    out += "\n" + indent + " | " + variant_type(v, indent);
    std::vector<std::string> notes;
    if (const std::string* d = string_member(v, "description")) notes.push_back(*d);
    if (const json* d = member(v, "default"))
      notes.push_back("default: " + default_text(*d, v, false));
    for (size_t i = 0; i < notes.size(); ++i) out += (i ? " " : " // ") + notes[i];
  }
  return out;
}

// A property whose schema has a oneOf list: its comments above the name, each variant below.
void one_of_property(std::string& out, const std::string& key, bool required, const json& prop,
                     const json& variants, const std::string& indent) {
  const std::string* desc = string_member(prop, "description");
  bool desc_above = false;
  if (desc) {
    const std::string* first =
        variants.empty() ? nullptr : string_member(variants.front(), "description");
    if (!first || *first != *desc) {
      out += indent + "// " + *desc + "\n";
      desc_above = true;
    }
  }
  if (const json* d = member(prop, "default"))
    out += indent + "// default: " + default_text(*d, prop, true) + "\n";
  out += indent + key + (required ? "" : "?") + ":\n";
  for (size_t i = 0; i < variants.size(); ++i) {
    const json& v = variants[i];
    out += indent + " | " + variant_type(v, indent);
    std::vector<std::string> notes;
    const std::string* vd = string_member(v, "description");
    if (vd && !(i == 0 && desc_above) && !(desc && *vd == *desc)) notes.push_back(*vd);
    if (const json* d = member(v, "default"))
      notes.push_back("default: " + default_text(*d, v, true));
    for (size_t n = 0; n < notes.size(); ++n) out += (n ? " " : " // ") + notes[n];
    out += "\n";
  }
  out += indent + ",\n";
}

std::string object_type(const json& schema, const std::string& indent) {
  std::string out;
  if (const std::string* d = string_member(schema, "description"))
    out += indent + "// " + *d + "\n";
  out += "{\n";
  const json* props = member(schema, "properties");
  if (props && props->is_object()) {
    std::set<std::string> required;
    if (const json* r = member(schema, "required"); r && r->is_array())
      for (const json& name : *r)
        if (name.is_string()) required.insert(name.get<std::string>());
    for (auto it = props->begin(); it != props->end(); ++it) {
      const std::string& key = it.key();
      const json& prop = it.value();
      const bool req = required.count(key) > 0;
      const json* variants = member(prop, "oneOf");
      if (const std::string* t = string_member(prop, "title"))
        out += indent + "// " + *t + "\n" + indent + "//\n";
      if (!variants)
        if (const std::string* d = string_member(prop, "description"))
          out += indent + "// " + *d + "\n";
      if (const json* ex = member(prop, "examples"); ex && ex->is_array() && !ex->empty()) {
        out += indent + "// Examples:\n";
        for (const json& e : *ex)
          if (e.is_string()) out += indent + "// - \"" + e.get<std::string>() + "\"\n";
      }
      if (variants && variants->is_array()) {
        one_of_property(out, key, req, prop, *variants, indent);
        continue;
      }
      std::string t = typescript(prop, indent + "    ");
      if (nullable(prop) && t.find("null") == std::string::npos) t += " | null";
      out += indent + key + (req ? "" : "?") + ": " + t + ",";
      if (!variants)
        if (const json* d = member(prop, "default"))
          out += " // default: " + default_text(*d, prop, true);
      out += "\n";
    }
  }
  return out + indent + "}";
}

std::string typescript(const json& schema, const std::string& indent) {
  if (const json* v = member(schema, "oneOf"); v && v->is_array()) return one_of(*v, indent);
  const json* type = member(schema, "type");
  if (type && type->is_array()) {
    std::string out;
    for (const json& t : *type) {
      if (!t.is_string()) continue;
      const std::string& name = t.get_ref<const std::string&>();
      out += (out.empty() ? "" : " | ") + (name == "integer" ? std::string("number") : name);
    }
    if (!out.empty()) return out;
  }
  if (!type || !type->is_string()) return "any";
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "object") return object_type(schema, indent);
  if (t == "string") {
    std::string out;
    if (const json* e = member(schema, "enum"); e && e->is_array())
      for (const json& v : *e)
        if (v.is_string()) out += (out.empty() ? "\"" : " | \"") + v.get<std::string>() + "\"";
    return out.empty() ? "string" : out;
  }
  if (t == "number" || t == "integer") return "number";
  if (t == "boolean") return "boolean";
  if (t == "array") {
    const json* items = member(schema, "items");
    return items ? typescript(*items, indent) + "[]" : "Array<any>";
  }
  return "any";
}

// Rust's str::lines(): split at \n, a trailing empty line dropped, a \r before \n removed.
std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t nl = s.find('\n', at);
    if (nl == std::string::npos) nl = s.size();
    std::string line = s.substr(at, nl - at);
    if (nl < s.size() && !line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
    at = nl + 1;
  }
  return out;
}

}  // namespace

std::string harmony_tools_section(const nlohmann::ordered_json& tools) {
  if (tools.is_null()) return "";
  if (!tools.is_array()) fail("chat template: tools must be an array");
  if (tools.empty()) return "";
  std::string out = "# Tools\n\n## functions\n\nnamespace functions {\n\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    const json* f = member(tools[i], "function");
    const std::string* name = f ? string_member(*f, "name") : nullptr;
    if (!name)
      fail(
          "chat template: tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": "
          "...}}}}",
          i);
    const json* desc = member(*f, "description");
    if (desc && !desc->is_null() && !desc->is_string())
      fail("chat template: tools[{}].function.description must be a string", i);
    if (desc && desc->is_string())
      for (const std::string& line : lines(desc->get<std::string>())) out += "// " + line + "\n";
    const json* params = member(*f, "parameters");
    if (params && !params->is_null())
      out += "type " + *name + " = (_: " + typescript(*params, "") + ") => any;\n\n";
    else
      out += "type " + *name + " = () => any;\n\n";
  }
  return out + "} // namespace functions";
}

}  // namespace moeflow
