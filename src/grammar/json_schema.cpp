#include "grammar/json_schema.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "grammar/json_grammar.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;
using E = Expr;

// Keywords that constrain nothing: skipped wherever they appear.
const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default",    "examples", "$schema",
    "$id",   "$comment",    "deprecated", "readOnly", "writeOnly",
    "$defs", "definitions", "strict",     "$anchor",  "$vocabulary"};
const std::set<std::string, std::less<>> kHandled = {
    "type",      "properties", "required", "additionalProperties",
    "items",     "minItems",   "maxItems", "minLength",
    "maxLength", "enum",       "const",    "anyOf",
    "oneOf",     "allOf",      "$ref"};
const std::set<std::string, std::less<>> kTypes = {"object",  "array",   "string", "number",
                                                   "integer", "boolean", "null"};
constexpr int kMaxDepth = 64;

class SchemaCompiler {
 public:
  SchemaCompiler(const ojson& root, GrammarBuilder& b) : root_(root), b_(b) { add_json_rules(b_); }

  // One value valid against the subschema at `pointer` ("" for the whole document).
  Expr run(const std::string& pointer) {
    const ojson* s = &root_;
    if (!pointer.empty()) {
      try {
        s = &root_.at(ojson::json_pointer(pointer));
      } catch (const std::exception&) {
        error("", pointer, "no subschema at this place");
      }
    }
    return value(*s, pointer, 0);
  }

 private:
  [[noreturn]] static void error(const std::string& keyword, const std::string& path,
                                 const std::string& what) {
    throw SchemaError(
        fmt::format("JSON schema: {} (at {})", what, path.empty() ? "the root" : path), keyword,
        path);
  }

  static bool is_annotation(const std::string& k) {
    return kAnnotations.count(k) || k.rfind("x-", 0) == 0;
  }

  // Keywords besides annotations: those that constrain the value.
  static std::vector<std::string> constraints(const ojson& s) {
    std::vector<std::string> out;
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!is_annotation(it.key())) out.push_back(it.key());
    return out;
  }

  // `kw` must stand alone (besides annotations): combining it with other keywords would need an
  // intersection of languages that the compiler does not build.
  static void alone(const ojson& s, const char* kw, const std::string& path) {
    for (const std::string& k : constraints(s))
      if (k != kw) error(kw, path, fmt::format("'{}' next to '{}' is not supported", kw, k));
  }

  std::string rule(const char* hint, Expr e) {
    std::string n = b_.fresh_name(hint);
    b_.define(n, std::move(e));
    return n;
  }

  static int count(const ojson& s, const char* kw, const std::string& path, int dflt) {
    auto it = s.find(kw);
    if (it == s.end()) return dflt;
    const bool ok = it->is_number_unsigned()
                        ? it->get<uint64_t>() <= (uint64_t)GrammarBuilder::kMaxRepeat
                        : it->is_number_integer() && it->get<int64_t>() >= 0 &&
                              it->get<int64_t>() <= GrammarBuilder::kMaxRepeat;
    if (!ok)
      error(kw, path,
            fmt::format("'{}' must be an integer in [0, {}]", kw, GrammarBuilder::kMaxRepeat));
    return (int)it->get<int64_t>();
  }

  Expr value(const ojson& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) error("", path, fmt::format("nested deeper than {}", kMaxDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) error("", path, "the schema false allows no value");
      return E::rule("json-value");
    }
    if (!s.is_object()) error("", path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!is_annotation(it.key()) && !kHandled.count(it.key()))
        error(it.key(), path, fmt::format("keyword '{}' is not supported", it.key()));
    if (s.contains("$ref")) {
      alone(s, "$ref", path);
      return reference(s["$ref"], path, depth);
    }
    if (s.contains("const")) return E::literal(s["const"].dump());
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) error("enum", path, "'enum' must be a non-empty array");
      std::vector<Expr> alts;
      for (const ojson& v : e) alts.push_back(E::literal(v.dump()));
      return E::alt(std::move(alts));
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      alone(s, kw, path);
      const ojson& a = s[kw];
      if (!a.is_array() || a.empty())
        error(kw, path, fmt::format("'{}' must be a non-empty array of schemas", kw));
      std::vector<Expr> alts;
      for (size_t i = 0; i < a.size(); ++i)
        alts.push_back(value(a[i], fmt::format("{}/{}/{}", path, kw, i), depth + 1));
      return E::alt(std::move(alts));
    }
    if (s.contains("allOf")) {
      alone(s, "allOf", path);
      const ojson& a = s["allOf"];
      if (!a.is_array() || a.size() != 1)
        error("allOf", path, "only 'allOf' with exactly one schema is supported");
      return value(a[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const ojson& x : t) {
          if (!x.is_string()) error("type", path, "'type' must be a string or an array of them");
          types.push_back(x.get<std::string>());
        }
      } else {
        error("type", path, "'type' must be a string or a non-empty array of strings");
      }
      for (const std::string& x : types)
        if (!kTypes.count(x)) error("type", path, fmt::format("unknown type '{}'", x));
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types = {"string"};
    } else {
      return E::rule("json-value");
    }
    std::vector<Expr> alts;
    for (const std::string& t : types) alts.push_back(typed(s, t, path, depth));
    return E::alt(std::move(alts));
  }

  Expr typed(const ojson& s, const std::string& t, const std::string& path, int depth) {
    if (t == "null") return E::literal("null");
    if (t == "boolean") return E::alt({E::literal("true"), E::literal("false")});
    if (t == "integer") return E::rule("json-integer");
    if (t == "number") return E::rule("json-number");
    if (t == "string") {
      const int lo = count(s, "minLength", path, 0), hi = count(s, "maxLength", path, -1);
      if (hi != -1 && hi < lo) error("maxLength", path, "'maxLength' is below 'minLength'");
      if (lo == 0 && hi == -1) return E::rule("json-string");
      return E::seq({E::literal("\""), E::repeat(E::rule("json-char"), lo, hi), E::literal("\"")});
    }
    if (t == "array") return array(s, path, depth);
    return object(s, path, depth);
  }

  Expr array(const ojson& s, const std::string& path, int depth) {
    const int lo = count(s, "minItems", path, 0), hi = count(s, "maxItems", path, -1);
    if (hi != -1 && hi < lo) error("maxItems", path, "'maxItems' is below 'minItems'");
    const E ws = E::rule("json-ws");
    if (hi == 0) return E::seq({E::literal("["), ws, E::literal("]")});
    Expr item = E::rule("json-value");
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) error("items", path, "'items' as an array (tuple form) is not supported");
      item = value(*it, path + "/items", depth + 1);
    }
    const E elem = E::rule(rule("item", E::seq({std::move(item), ws})));
    Expr list = E::seq({elem, E::repeat(E::seq({E::literal(","), ws, elem}), lo > 0 ? lo - 1 : 0,
                                        hi == -1 ? -1 : hi - 1)});
    if (lo == 0) list = E::optional(std::move(list));
    return E::seq({E::literal("["), ws, std::move(list), E::literal("]")});
  }

  Expr object(const ojson& s, const std::string& path, int depth) {
    const E ws = E::rule("json-ws");
    const ojson* addl = nullptr;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (!it->is_boolean() && !it->is_object())
        error("additionalProperties", path, "'additionalProperties' must be a boolean or a schema");
      addl = &*it;
    }
    struct Prop {
      std::string name;
      const ojson* schema;  // nullptr: any value
      std::string schema_path;
      bool required = false;
    };
    std::vector<Prop> props;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) error("properties", path, "'properties' must be an object");
      for (auto p = it->begin(); p != it->end(); ++p)
        props.push_back({p.key(), &p.value(), path + "/properties/" + p.key()});
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) error("required", path, "'required' must be an array of strings");
      for (const ojson& r : *it) {
        if (!r.is_string()) error("required", path, "'required' must be an array of strings");
        const std::string n = r.get<std::string>();
        auto p =
            std::find_if(props.begin(), props.end(), [&](const Prop& x) { return x.name == n; });
        if (p != props.end()) {
          p->required = true;
        } else {
          // Required but not declared: it must be there, with any value additionalProperties
          // allows.
          if (addl && addl->is_boolean() && !addl->get<bool>())
            error("required", path,
                  fmt::format("'{}' is required but not in 'properties' and "
                              "'additionalProperties' is false",
                              n));
          props.push_back({n, addl && addl->is_object() ? addl : nullptr,
                           path + "/additionalProperties", true});
        }
      }
    }
    if (props.empty()) {
      if (addl && addl->is_boolean() && !addl->get<bool>())
        return E::seq({E::literal("{"), ws, E::literal("}")});
      if (!addl || addl->is_boolean()) return E::rule("json-object");
      // A map: string keys, values of the additionalProperties schema.
      const E member = E::rule(
          rule("member", E::seq({E::rule("json-string"), ws, E::literal(":"), ws,
                                 value(*addl, path + "/additionalProperties", depth + 1), ws})));
      return E::seq(
          {E::literal("{"), ws,
           E::optional(E::seq({member, E::repeat(E::seq({E::literal(","), ws, member}), 0, -1)})),
           E::literal("}")});
    }
    // The properties in order, each optional one present or not: first(i) is the rest from
    // property i when none has been written yet, after(i) when one has (so each is preceded by
    // a comma).
    const size_t n = props.size();
    std::vector<std::string> first(n + 1), after(n + 1);
    first[n] = rule("props", E::empty());
    after[n] = first[n];
    for (size_t i = n; i-- > 0;) {
      const Prop& p = props[i];
      Expr v = p.schema ? value(*p.schema, p.schema_path, depth + 1) : E::rule("json-value");
      const E kv = E::rule(rule("member", E::seq({E::literal(nlohmann::json(p.name).dump()), ws,
                                                  E::literal(":"), ws, std::move(v), ws})));
      const E comma_kv = E::seq({E::literal(","), ws, kv});
      if (p.required) {
        after[i] = rule("props", E::seq({comma_kv, E::rule(after[i + 1])}));
        first[i] = rule("props", E::seq({kv, E::rule(after[i + 1])}));
      } else {
        after[i] = rule("props", E::seq({E::optional(comma_kv), E::rule(after[i + 1])}));
        first[i] =
            rule("props", E::alt({E::seq({kv, E::rule(after[i + 1])}), E::rule(first[i + 1])}));
      }
    }
    return E::seq({E::literal("{"), ws, E::rule(first[0]), E::literal("}")});
  }

  Expr reference(const ojson& ref, const std::string& path, int depth) {
    if (!ref.is_string()) error("$ref", path, "'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (r != "#" && r.rfind("#/", 0) != 0)
      error("$ref", path,
            fmt::format("'$ref' {} is not supported: only references inside the schema (\"#/...\")",
                        ojson(r).dump()));
    auto known = refs_.find(r);
    if (known != refs_.end()) return E::rule(known->second);
    const ojson* target = nullptr;
    try {
      target = &root_.at(ojson::json_pointer(r.substr(1)));
    } catch (const std::exception&) {
      error("$ref", path, fmt::format("'$ref' {} points at nothing", ojson(r).dump()));
    }
    // Named before it is compiled, so a reference to itself inside finds the rule.
    const std::string name = b_.fresh_name("ref");
    refs_[r] = name;
    b_.define(name, value(*target, r.substr(1), depth + 1));
    return E::rule(name);
  }

  const ojson& root_;
  GrammarBuilder& b_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

Expr json_schema_expr(GrammarBuilder& b, const nlohmann::ordered_json& document,
                      const std::string& pointer) {
  return SchemaCompiler(document, b).run(pointer);
}

std::shared_ptr<const Grammar> build_schema_grammar(const GrammarBuilder& b,
                                                    const std::string& root) {
  try {
    return b.build(root);
  } catch (const SchemaError&) {
    throw;
  } catch (const GrammarError& e) {
    // From build(): left recursion can only come from a $ref cycle that writes nothing between
    // its turns ({"$ref": "#"}); else the grammar is too large.
    const bool cycle = std::string(e.what()).find("left-recursive") != std::string::npos;
    throw SchemaError(
        cycle ? fmt::format("JSON schema: a '$ref' cycle reaches itself before writing anything "
                            "({})",
                            e.what())
              : fmt::format("JSON schema: {}", e.what()),
        cycle ? "$ref" : "", "");
  }
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema) {
  GrammarBuilder b;
  const Expr v = json_schema_expr(b, schema);
  b.define("root", E::seq({E::rule("json-ws"), v}));
  return build_schema_grammar(b, "root");
}

}  // namespace moeflow
