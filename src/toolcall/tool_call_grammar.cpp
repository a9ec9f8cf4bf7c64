#include "toolcall/tool_call_grammar.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/utf8_ranges.h"
#include "toolcall/gemma4_values.h"
#include "toolcall/text_grammar.h"
#include "toolcall/tool_call_arguments.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;
using E = Expr;

// GLM writes a string argument bare between <arg_value> tags: a string schema becomes its raw
// text (an enum or const of strings their literals; free text any bytes but '<', so the closing
// tag ends it); any other value JSON, as the template's tojson writes it.
E glm_value(GrammarBuilder& b, const ojson& params, const std::string& key) {
  const ojson& p = params["properties"][key];
  if (p.is_object()) {
    auto all_strings = [](const ojson& a) {
      if (!a.is_array() || a.empty()) return false;
      for (const ojson& v : a)
        if (!v.is_string()) return false;
      return true;
    };
    if (p.contains("const") && p["const"].is_string())
      return E::literal(p["const"].get<std::string>());
    if (p.contains("enum") && all_strings(p["enum"])) {
      std::vector<E> alts;
      for (const ojson& v : p["enum"]) alts.push_back(E::literal(v.get<std::string>()));
      return E::alt(std::move(alts));
    }
    if (p.contains("type") && p["type"] == "string" && !p.contains("enum")) {
      // Any character but '<' and the controls other than tab and newline.
      const E ch = utf8_class({{0x09, 0x0A}, {0x20, 0x3B}, {0x3D, 0x10FFFF}});
      const int lo = p.value("minLength", 0);
      const int hi = p.contains("maxLength") ? p["maxLength"].get<int>() : -1;
      return E::repeat(ch, std::max(lo, 0), std::min(hi, GrammarBuilder::kMaxRepeat));
    }
  }
  return json_schema_expr(b, params, "/properties/" + key);
}

E glm_call(GrammarBuilder& b, const std::string& name, const ojson& params) {
  std::vector<E> seq{E::literal("<tool_call>" + name + "\n")};
  if (params.contains("properties") && params["properties"].is_object()) {
    std::vector<std::string> required;
    if (params.contains("required") && params["required"].is_array())
      for (const ojson& r : params["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
      const std::string& k = it.key();
      E arg = E::seq({E::literal("<arg_key>" + k + "</arg_key>\n<arg_value>"),
                      glm_value(b, params, k), E::literal("</arg_value>\n")});
      const bool req = std::find(required.begin(), required.end(), k) != required.end();
      seq.push_back(req ? std::move(arg) : E::optional(std::move(arg)));
    }
  }
  seq.push_back(E::literal("</tool_call>"));
  return E::seq(std::move(seq));
}

// Qwen3.5 and MiniMax-M2 write a string argument as raw text up to </parameter> and any other
// value as JSON (tool_call_arguments.h types it back the same way): a string-only schema becomes
// raw text in which </parameter> cannot occur, any other schema JSON. A schema of a string or
// something else cannot be written unambiguously, and is refused.
E xml_value(GrammarBuilder& b, const ojson& params, const std::string& key) {
  const std::string path = "/properties/" + key;
  const ojson& p = params["properties"][key];
  if (declares_only_string(p)) return raw_string_value(b, p, path, "</parameter>");
  if (declares_string_and_more(p))
    throw SchemaError(fmt::format("{}: a value that may be a string or another type cannot be "
                                  "written unambiguously as raw text",
                                  path),
                      "type", path);
  return json_schema_expr(b, params, path);
}

// The arguments of an XML call, in the schema's order, the required ones always: each one
// `open(K)` value `close`.
std::vector<E> xml_arguments(GrammarBuilder& b, const ojson& params,
                             const std::function<std::string(const std::string&)>& open,
                             const std::string& close) {
  std::vector<E> seq;
  if (!params.contains("properties") || !params["properties"].is_object()) return seq;
  std::vector<std::string> required;
  if (params.contains("required") && params["required"].is_array())
    for (const ojson& r : params["required"])
      if (r.is_string()) required.push_back(r.get<std::string>());
  for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
    const std::string& k = it.key();
    E arg = E::seq({E::literal(open(k)), xml_value(b, params, k), E::literal(close)});
    const bool req = std::find(required.begin(), required.end(), k) != required.end();
    seq.push_back(req ? std::move(arg) : E::optional(std::move(arg)));
  }
  return seq;
}

// One call of function `fn` in the syntax.
E one_call(GrammarBuilder& b, ToolCallSyntax s, const ojson& fn) {
  const std::string name = fn["name"].get<std::string>();
  const ojson& params = tool_parameters(fn);
  if (s == ToolCallSyntax::Glm) return glm_call(b, name, params);
  if (s == ToolCallSyntax::QwenXml) {
    std::vector<E> seq{E::literal("<tool_call>\n<function=" + name + ">\n")};
    for (E& a : xml_arguments(
             b, params, [](const std::string& k) { return "<parameter=" + k + ">\n"; },
             "\n</parameter>\n"))
      seq.push_back(std::move(a));
    seq.push_back(E::literal("</function>\n</tool_call>"));
    return E::seq(std::move(seq));
  }
  if (s == ToolCallSyntax::MiniMax) {
    std::vector<E> seq{E::literal("<invoke name=\"" + name + "\">\n")};
    for (E& a : xml_arguments(
             b, params, [](const std::string& k) { return "<parameter name=\"" + k + "\">"; },
             "</parameter>\n"))
      seq.push_back(std::move(a));
    seq.push_back(E::literal("</invoke>\n"));
    return E::seq(std::move(seq));
  }
  if (s == ToolCallSyntax::Gemma4)
    return E::seq({E::literal("<|tool_call>call:" + name), gemma4_value_expr(b, params, ""),
                   E::literal("<tool_call|>")});
  const E args = json_schema_expr(b, params);
  const std::string qname = ojson(name).dump();  // the name as a JSON string
  switch (s) {
    case ToolCallSyntax::Hermes:
      return E::seq({E::literal("<tool_call>\n{\"name\": " + qname + ", \"arguments\": "), args,
                     E::literal("}\n</tool_call>")});
    case ToolCallSyntax::Mistral:
      return E::seq(
          {E::literal("{\"name\": " + qname + ", \"arguments\": "), args, E::literal("}")});
    case ToolCallSyntax::Llama3:
      return E::seq(
          {E::literal("{\"name\": " + qname + ", \"parameters\": "), args, E::literal("}")});
    case ToolCallSyntax::DeepSeek:
      return E::seq(
          {E::literal("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n"), args,
           E::literal("\n```<｜tool▁call▁end｜>")});
    case ToolCallSyntax::DeepSeekV31:
      return E::seq({E::literal("<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>"), args,
                     E::literal("<｜tool▁call▁end｜>")});
    default: fail("tool calls in the {} syntax have no grammar", tool_call_syntax_name(s));
  }
}

}  // namespace

const ojson& tool_parameters(const ojson& fn) {
  static const ojson any_object = {{"type", "object"}};
  auto p = fn.find("parameters");
  return p != fn.end() && p->is_object() ? *p : any_object;
}

std::shared_ptr<const Grammar> forced_tool_call_grammar(ToolCallSyntax s, const ojson& tools,
                                                        const ForcedToolCalls& choice) {
  if (s == ToolCallSyntax::None || s == ToolCallSyntax::Harmony)
    fail("tool calls in the {} syntax have no grammar", tool_call_syntax_name(s));
  GrammarBuilder b;
  std::vector<E> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& fn = tools[i]["function"];
    if (!choice.name.empty() && fn["name"] != choice.name) continue;
    try {
      calls.push_back(one_call(b, s, fn));
    } catch (const SchemaError& e) {
      throw SchemaError(fmt::format("tools[{}] ('{}'): parameters: {}", i,
                                    fn["name"].get<std::string>(), e.what()),
                        e.keyword, e.path);
    }
  }
  if (calls.empty()) fail("no tool is named '{}'", choice.name);
  b.define("call", calls.size() == 1 ? calls[0] : E::alt(std::move(calls)));
  // Llama 3 writes one call per reply.
  const int extra =
      choice.parallel && s != ToolCallSyntax::Llama3 ? ForcedToolCalls::kMaxParallel - 1 : 0;
  // Gemma 4 and MiniMax-M2 write their calls back to back (MiniMax's each end with a newline).
  const bool adjacent = s == ToolCallSyntax::DeepSeekV31 || s == ToolCallSyntax::Gemma4 ||
                        s == ToolCallSyntax::MiniMax;
  const char* sep = s == ToolCallSyntax::Mistral ? ", " : (adjacent ? "" : "\n");
  E body =
      E::seq({E::rule("call"), E::repeat(E::seq({E::literal(sep), E::rule("call")}), 0, extra)});
  switch (s) {
    case ToolCallSyntax::Mistral:
      body = E::seq({E::literal("[TOOL_CALLS]["), std::move(body), E::literal("]")});
      break;
    case ToolCallSyntax::DeepSeek:
    case ToolCallSyntax::DeepSeekV31:
      body = E::seq({E::literal("<｜tool▁calls▁begin｜>"), std::move(body),
                     E::literal("<｜tool▁calls▁end｜>")});
      break;
    case ToolCallSyntax::MiniMax:
      body = E::seq({E::literal("<minimax:tool_call>\n"), std::move(body),
                     E::literal("</minimax:tool_call>")});
      break;
    default: break;
  }
  b.define("root", std::move(body));
  return build_schema_grammar(b, "root");
}

}  // namespace moeflow
