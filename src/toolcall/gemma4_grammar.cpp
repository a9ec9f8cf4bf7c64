// gemma4_value_expr (gemma4_values.h): a JSON schema as a grammar of Gemma 4's argument notation.
#include <algorithm>
#include <cctype>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "grammar/json_schema.h"
#include "toolcall/gemma4_values.h"
#include "toolcall/text_grammar.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;
using E = Expr;

class Gemma4SchemaCompiler {
 public:
  Gemma4SchemaCompiler(GrammarBuilder& b, const ojson& doc) : b_(b), doc_(doc) {}

  // The rule of the subschema at `pointer` (one per pointer, so recursive $refs end).
  E value(const std::string& pointer) {
    if (auto it = rules_.find(pointer); it != rules_.end()) return E::rule(it->second);
    const std::string name = b_.fresh_name("gemma4-value");
    rules_[pointer] = name;
    b_.define(name, build(pointer));
    return E::rule(name);
  }

 private:
  [[noreturn]] static void refuse(const std::string& pointer, const std::string& keyword,
                                  const std::string& why) {
    throw SchemaError(fmt::format("{}: {}", pointer.empty() ? "/" : pointer, why), keyword,
                      pointer);
  }

  const ojson& at(const std::string& pointer) const {
    try {
      return doc_.at(ojson::json_pointer(pointer));
    } catch (const nlohmann::json::exception&) {
      refuse(pointer, "$ref", "no subschema here");
    }
  }

  E build(const std::string& pointer) {
    const ojson& s = at(pointer);
    if (!s.is_object()) refuse(pointer, "", "a schema must be an object here");
    static const char* const kKnown[] = {
        "type",      "properties",  "required", "additionalProperties",
        "items",     "minItems",    "maxItems", "minLength",
        "maxLength", "enum",        "const",    "anyOf",
        "oneOf",     "$ref",        "$defs",    "definitions",
        "title",     "description", "default",  "examples",
        "$schema",   "$id",         "$comment", "deprecated",
        "readOnly",  "writeOnly",   "nullable"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (k.rfind("x-", 0) != 0 &&
          std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown))
        refuse(pointer, k, fmt::format("'{}' is not supported in Gemma 4's call syntax", k));
    }
    if (auto r = s.find("$ref"); r != s.end()) {
      if (!r->is_string() || r->get_ref<const std::string&>().rfind("#", 0) != 0)
        refuse(pointer, "$ref", "only references within the document (#/...) are supported");
      return value(r->get<std::string>().substr(1));
    }
    if (auto c = s.find("const"); c != s.end()) return E::literal(write_gemma4_value(*c));
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty())
        refuse(pointer, "enum", "an enum must be a non-empty array");
      std::vector<E> alts;
      for (const ojson& v : *e) alts.push_back(E::literal(write_gemma4_value(v)));
      return E::alt(std::move(alts));
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (auto a = s.find(k); a != s.end()) {
        if (!a->is_array() || a->empty()) refuse(pointer, k, "must be a non-empty array");
        std::vector<E> alts;
        for (size_t i = 0; i < a->size(); ++i)
          alts.push_back(value(fmt::format("{}/{}/{}", pointer, k, i)));
        return E::alt(std::move(alts));
      }
    auto t = s.find("type");
    if (t == s.end()) {
      if (s.contains("properties")) return of_type(s, pointer, "object");
      refuse(pointer, "type", "a schema without a type cannot be written in Gemma 4's syntax");
    }
    if (t->is_string()) return of_type(s, pointer, t->get<std::string>());
    if (!t->is_array() || t->empty()) refuse(pointer, "type", "must be a string or a list");
    std::vector<E> alts;
    for (const ojson& x : *t) {
      if (!x.is_string()) refuse(pointer, "type", "must be a string or a list of strings");
      alts.push_back(of_type(s, pointer, x.get<std::string>()));
    }
    return E::alt(std::move(alts));
  }

  E of_type(const ojson& s, const std::string& pointer, const std::string& type) {
    if (type == "string") {
      const ojson bounds = string_bounds(s);
      return E::seq({E::literal(kGemma4Quote), raw_string_value(b_, bounds, pointer, kGemma4Quote),
                     E::literal(kGemma4Quote)});
    }
    if (type == "integer" || type == "number" || type == "boolean" || type == "null") {
      scalars_.push_back(ojson{{"type", type}});  // kept alive with the compiler
      return json_schema_expr(b_, scalars_.back());
    }
    if (type == "object") return object(s, pointer);
    if (type == "array") return array(s, pointer);
    refuse(pointer, "type", fmt::format("unknown type '{}'", type));
  }

  static ojson string_bounds(const ojson& s) {
    ojson o = {{"type", "string"}};
    for (const char* k : {"minLength", "maxLength"})
      if (s.contains(k)) o[k] = s[k];
    return o;
  }

  // {k1:v1,...}: the properties in the order the template's dictsort writes them
  // (case-insensitive), the required ones always, a comma before each one but the first written.
  E object(const ojson& s, const std::string& pointer) {
    auto p = s.find("properties");
    if (p == s.end() || !p->is_object() || p->empty()) return E::literal("{}");
    std::vector<std::string> keys;
    for (auto it = p->begin(); it != p->end(); ++it) keys.push_back(it.key());
    auto lower = [](std::string k) {
      for (char& c : k) c = (char)std::tolower((unsigned char)c);
      return k;
    };
    std::stable_sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) {
      return lower(a) < lower(b);
    });
    std::vector<std::string> required;
    if (auto r = s.find("required"); r != s.end() && r->is_array())
      for (const ojson& x : *r)
        if (x.is_string()) required.push_back(x.get<std::string>());
    // rest(i, comma): the members from keys[i] on, a comma first when one was written before.
    const std::string base = b_.fresh_name("gemma4-members");
    auto rest = [&](size_t i, bool comma) { return fmt::format("{}-{}-{}", base, i, comma); };
    for (size_t i = keys.size() + 1; i-- > 0;)
      for (const bool comma : {false, true}) {
        if (i == keys.size()) {
          b_.define(rest(i, comma), E::empty());
          continue;
        }
        const std::string& k = keys[i];
        E member =
            E::seq({E::literal((comma ? "," : "") + k + ":"),
                    value(pointer + "/properties/" + escape(k)), E::rule(rest(i + 1, true))});
        const bool req = std::find(required.begin(), required.end(), k) != required.end();
        b_.define(rest(i, comma), req ? std::move(member)
                                      : E::alt({std::move(member), E::rule(rest(i + 1, comma))}));
      }
    return E::seq({E::literal("{"), E::rule(rest(0, false)), E::literal("}")});
  }

  E array(const ojson& s, const std::string& pointer) {
    auto it = s.find("items");
    if (it == s.end() || !it->is_object())
      refuse(pointer, "items", "an array needs an items schema");
    for (const char* k : {"minItems", "maxItems"})
      if (s.contains(k) && !s[k].is_number_unsigned())
        refuse(pointer, k, fmt::format("{} must be a non-negative integer", k));
    const int lo = (int)std::min<uint64_t>(s.value("minItems", uint64_t{0}), 1u << 30);
    const int hi = s.contains("maxItems")
                       ? (int)std::min<uint64_t>(s["maxItems"].get<uint64_t>(), 1u << 30)
                       : -1;
    if (lo < 0 || (hi >= 0 && hi < lo) || lo > GrammarBuilder::kMaxRepeat ||
        hi > GrammarBuilder::kMaxRepeat)
      refuse(pointer, "maxItems", "minItems / maxItems out of range");
    if (hi == 0) return E::literal("[]");
    const E item = value(pointer + "/items");
    E more = E::repeat(E::seq({E::literal(","), item}), std::max(lo - 1, 0), hi < 0 ? -1 : hi - 1);
    E items = E::seq({item, std::move(more)});
    return E::seq({E::literal("["), lo == 0 ? E::optional(std::move(items)) : std::move(items),
                   E::literal("]")});
  }

  // A property name as a JSON pointer token.
  static std::string escape(const std::string& k) {
    std::string o;
    for (char c : k) o += c == '~' ? "~0" : (c == '/' ? "~1" : std::string(1, c));
    return o;
  }

  GrammarBuilder& b_;
  const ojson& doc_;
  std::map<std::string, std::string> rules_;
  std::vector<ojson> scalars_;
};

}  // namespace

Expr gemma4_value_expr(GrammarBuilder& b, const ojson& document, const std::string& pointer) {
  Gemma4SchemaCompiler c(b, document);
  return c.value(pointer);
}

}  // namespace moeflow
