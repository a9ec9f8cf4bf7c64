#include "toolcall/tool_call_parser.h"

#include <algorithm>
#include <optional>

#include "toolcall/gemma4_values.h"
#include "toolcall/tool_call_arguments.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kToolCall = "<tool_call>", kToolCallEnd = "</tool_call>";
constexpr std::string_view kArgKey = "<arg_key>", kArgKeyEnd = "</arg_key>";
constexpr std::string_view kArgValue = "<arg_value>", kArgValueEnd = "</arg_value>";
constexpr std::string_view kMistral = "[TOOL_CALLS]", kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kDsCalls = "<｜tool▁calls▁begin｜>",
                           kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCall = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=", kParameterEnd = "</parameter>";
constexpr std::string_view kGemmaCall = "<|tool_call>", kGemmaCallEnd = "<tool_call|>";
constexpr std::string_view kGemmaCallName = "call:";
constexpr std::string_view kMiniMax = "<minimax:tool_call>", kMiniMaxEnd = "</minimax:tool_call>";
constexpr std::string_view kInvoke = "<invoke name=\"", kInvokeEnd = "</invoke>";
constexpr std::string_view kMiniMaxParameter = "<parameter name=\"";
// A function or parameter name longer than this is not one (the block is content).
constexpr size_t kMaxNameBytes = 256;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// Longest suffix of s that is a proper prefix of m.
size_t partial_suffix(std::string_view s, std::string_view m) {
  for (size_t len = std::min(s.size(), m.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == m.substr(0, len)) return len;
  return 0;
}

std::optional<ojson> parse_json(std::string_view s) {
  ojson j = ojson::parse(s.begin(), s.end(), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// {"name": ..., "arguments" | "parameters": {...} or a JSON string of one} -> a call.
std::optional<ToolCall> call_from_object(const ojson& o) {
  if (!o.is_object()) return std::nullopt;
  auto n = o.find("name");
  if (n == o.end() || !n->is_string() || n->get_ref<const std::string&>().empty())
    return std::nullopt;
  auto a = o.find("arguments");
  if (a == o.end()) a = o.find("parameters");
  ToolCall c{n->get<std::string>(), "{}", ""};
  if (a == o.end()) return c;
  if (a->is_object()) {
    c.arguments = a->dump();
  } else if (a->is_string()) {
    auto inner = parse_json(a->get_ref<const std::string&>());
    if (!inner || !inner->is_object()) return std::nullopt;
    c.arguments = inner->dump();
  } else {
    return std::nullopt;
  }
  return c;
}

// Where the XML-ish blocks stand at b[i]: `lit` is there (Done, i moved past it), b ends inside
// it (Incomplete) or something else is (Invalid).
enum class Match { Done, Incomplete, Invalid };
Match expect(std::string_view b, size_t& i, std::string_view lit) {
  const std::string_view rest = b.substr(std::min(i, b.size()));
  if (rest.size() < lit.size())
    return lit.substr(0, rest.size()) == rest ? Match::Incomplete : Match::Invalid;
  if (rest.substr(0, lit.size()) != lit) return Match::Invalid;
  i += lit.size();
  return Match::Done;
}

// A name up to `close` at b[i] (moved past close): no '<', '>' or newline in it, not empty.
Match read_name(std::string_view b, size_t& i, std::string_view close, std::string& name) {
  const size_t e = b.find(close, i);
  const size_t bad = b.find_first_of("<>\n", i);
  if (bad != std::string_view::npos && (e == std::string_view::npos || bad < e))
    return Match::Invalid;
  if (e == std::string_view::npos)
    return b.size() - i > kMaxNameBytes ? Match::Invalid : Match::Incomplete;
  name.assign(trim(b.substr(i, e - i)));
  if (name.empty() || name.size() > kMaxNameBytes) return Match::Invalid;
  i = e + close.size();
  return Match::Done;
}

// The parameters of an XML-ish call up to and including `close` (its end tag), whitespace
// between the tags: Qwen3.5 writes "<parameter=K>\nV\n</parameter>" (`open` "<parameter=",
// `name_end` ">", one newline trimmed each side of V), MiniMax-M2 "<parameter name=\"K\">V
// </parameter>" (V as it is). Each V is typed by the schema of function `fn`'s parameter K.
Match read_xml_parameters(std::string_view b, size_t& i, std::string_view open,
                          std::string_view name_end, bool trim_newlines, std::string_view close,
                          const ojson& tools, const std::string& fn, ojson& args) {
  for (;;) {
    i = skip_space(b, i);
    const Match p = expect(b, i, open);
    if (p == Match::Done) {
      std::string key;
      if (Match m = read_name(b, i, name_end, key); m != Match::Done) return m;
      const size_t e = b.find(kParameterEnd, i);
      if (e == std::string_view::npos) return Match::Incomplete;
      std::string_view raw = b.substr(i, e - i);
      if (trim_newlines && !raw.empty() && raw.front() == '\n') raw.remove_prefix(1);
      if (trim_newlines && !raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
      args[key] = typed_text_argument(tool_argument_schema(tools, fn, key), raw);
      i = e + kParameterEnd.size();
      continue;
    }
    const Match c = expect(b, i, close);
    if (c == Match::Done) return Match::Done;
    return p == Match::Incomplete || c == Match::Incomplete ? Match::Incomplete : Match::Invalid;
  }
}

// The text that opens a call block ("" for None and Harmony); Llama 3's bare '{' is handled apart.
std::string_view start_marker(ToolCallSyntax s) {
  switch (s) {
    case ToolCallSyntax::Hermes:
    case ToolCallSyntax::Glm:
    case ToolCallSyntax::QwenXml: return kToolCall;
    case ToolCallSyntax::Gemma4: return kGemmaCall;
    case ToolCallSyntax::MiniMax: return kMiniMax;
    case ToolCallSyntax::Mistral: return kMistral;
    case ToolCallSyntax::Llama3: return kPythonTag;
    case ToolCallSyntax::DeepSeek:
    case ToolCallSyntax::DeepSeekV31: return kDsCalls;
    default: return {};
  }
}

}  // namespace

std::string new_tool_call_id(ToolCallSyntax syntax, std::mt19937_64& rng) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const bool mistral = syntax == ToolCallSyntax::Mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

size_t json_container_end(std::string_view s, size_t pos) {
  if (pos >= s.size() || (s[pos] != '{' && s[pos] != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

ToolCallParser::ToolCallParser(ToolCallSyntax syntax, ojson tools)
    : syntax_(syntax), tools_(std::move(tools)) {}

size_t ToolCallParser::find_start(size_t from, size_t& partial) const {
  partial = 0;
  const std::string_view b(buf_);
  size_t best = std::string_view::npos;
  if (const std::string_view m = start_marker(syntax_); !m.empty()) {
    best = b.find(m, from);
    partial = partial_suffix(b.substr(from), m);
  }
  // Llama 3 answers with a bare JSON call: a reply whose first character is '{'.
  if (syntax_ == ToolCallSyntax::Llama3 && !seen_text_) {
    const size_t p = skip_space(b, from);
    if (p < b.size() && b[p] == '{' && p < best) best = p;
    if (p == b.size()) partial = std::max(partial, b.size() - from);  // whitespace so far
  }
  return best;
}

void ToolCallParser::run(Out& out, bool final) {
  for (;;) {
    if (!in_call_) {
      size_t partial = 0;
      const size_t start = find_start(0, partial);
      const size_t upto =
          start != std::string::npos ? start : (final ? buf_.size() : buf_.size() - partial);
      const std::string_view text = std::string_view(buf_).substr(0, upto);
      if (!trim(text).empty()) seen_text_ = true;
      out.content.append(text);
      buf_.erase(0, upto);
      if (start == std::string::npos) return;
      in_call_ = true;
    }
    std::vector<ToolCall> calls;
    size_t consumed = 0;
    const Block b = parse_block(calls, consumed);
    if (b == Block::Incomplete && !final) return;
    in_call_ = false;
    if (b == Block::Done) {
      for (ToolCall& c : calls) out.calls.push_back(std::move(c));
      buf_.erase(0, consumed);
      // Llama 3 writes one call per reply; what follows is text (a second JSON is content).
      if (syntax_ == ToolCallSyntax::Llama3) seen_text_ = true;
      continue;
    }
    // Malformed or cut off: the marker is text; scanning goes on after it.
    const std::string_view m = start_marker(syntax_);
    const size_t marker = !m.empty() && buf_.compare(0, m.size(), m) == 0 ? m.size() : 1;
    out.content.append(buf_, 0, marker);
    seen_text_ = true;
    buf_.erase(0, marker);
  }
}

ToolCallParser::Out ToolCallParser::push(std::string_view text) {
  Out out;
  buf_.append(text);
  if (syntax_ == ToolCallSyntax::None || syntax_ == ToolCallSyntax::Harmony) {
    out.content = std::move(buf_);
    buf_.clear();
    return out;
  }
  run(out, false);
  return out;
}

ToolCallParser::Out ToolCallParser::finish() {
  Out out;
  if (syntax_ == ToolCallSyntax::None || syntax_ == ToolCallSyntax::Harmony) {
    out.content = std::move(buf_);
    buf_.clear();
    return out;
  }
  run(out, true);
  return out;
}

std::string ToolCallParser::argument_json(const std::string& function, const std::string& key,
                                          const std::string& raw) const {
  // GLM writes a string argument bare and any other value as JSON: the tool's schema says
  // which; without one, what parses as JSON is JSON.
  bool declared_string = false;
  if (tools_.is_array())
    for (const ojson& t : tools_) {
      const ojson* f = t.contains("function") ? &t["function"] : nullptr;
      if (!f || f->value("name", "") != function) continue;
      const ojson* props = f->contains("parameters") && (*f)["parameters"].is_object() &&
                                   (*f)["parameters"].contains("properties")
                               ? &(*f)["parameters"]["properties"]
                               : nullptr;
      if (props && props->is_object() && props->contains(key)) {
        const ojson& p = (*props)[key];
        declared_string = p.is_object() && p.contains("type") && p["type"] == "string";
      }
    }
  if (!declared_string)
    if (auto v = parse_json(raw)) return v->dump();
  return ojson(raw).dump();
}

ToolCallParser::Block ToolCallParser::parse_block(std::vector<ToolCall>& calls,
                                                  size_t& consumed) const {
  const std::string_view b(buf_);
  auto block_of = [](Match m) {
    return m == Match::Incomplete ? Block::Incomplete : Block::Invalid;
  };
  switch (syntax_) {
    case ToolCallSyntax::Hermes: {
      const size_t end = b.find(kToolCallEnd, kToolCall.size());
      if (end == std::string_view::npos) return Block::Incomplete;
      auto j = parse_json(trim(b.substr(kToolCall.size(), end - kToolCall.size())));
      auto c = j ? call_from_object(*j) : std::nullopt;
      if (!c) return Block::Invalid;
      calls.push_back(std::move(*c));
      consumed = end + kToolCallEnd.size();
      return Block::Done;
    }
    case ToolCallSyntax::Glm: {
      const size_t end = b.find(kToolCallEnd, kToolCall.size());
      if (end == std::string_view::npos) return Block::Incomplete;
      std::string_view in = b.substr(kToolCall.size(), end - kToolCall.size());
      const size_t first_key = in.find(kArgKey);
      const std::string name(trim(in.substr(0, first_key)));
      if (name.empty() || name.find_first_of("<>\n") != std::string::npos) return Block::Invalid;
      ojson args = ojson::object();
      size_t i = first_key;
      while (i != std::string_view::npos) {
        const size_t ke = in.find(kArgKeyEnd, i);
        if (ke == std::string_view::npos) return Block::Invalid;
        const std::string key(trim(in.substr(i + kArgKey.size(), ke - i - kArgKey.size())));
        size_t v = skip_space(in, ke + kArgKeyEnd.size());
        if (in.compare(v, kArgValue.size(), kArgValue) != 0) return Block::Invalid;
        v += kArgValue.size();
        const size_t ve = in.find(kArgValueEnd, v);
        if (ve == std::string_view::npos) return Block::Invalid;
        args[key] = ojson::parse(argument_json(name, key, std::string(in.substr(v, ve - v))));
        i = skip_space(in, ve + kArgValueEnd.size());
        if (i == in.size()) break;
        if (in.compare(i, kArgKey.size(), kArgKey) != 0) return Block::Invalid;
      }
      calls.push_back({name, args.dump(), ""});
      consumed = end + kToolCallEnd.size();
      return Block::Done;
    }
    case ToolCallSyntax::Mistral: {
      size_t i = skip_space(b, kMistral.size());
      if (i == b.size()) return Block::Incomplete;
      if (b[i] == '[') {  // [{"name": ..., "arguments": ...}, ...]
        const size_t e = json_container_end(b, i);
        if (e == std::string_view::npos) return Block::Incomplete;
        auto j = parse_json(b.substr(i, e - i));
        if (!j || !j->is_array() || j->empty()) return Block::Invalid;
        for (const ojson& o : *j) {
          auto c = call_from_object(o);
          if (!c) return Block::Invalid;
          calls.push_back(std::move(*c));
        }
        consumed = e;
        return Block::Done;
      }
      // NAME[ARGS]{...}
      const size_t a = b.find(kMistralArgs, i);
      if (a == std::string_view::npos)
        return b.size() - i > 256 ? Block::Invalid : Block::Incomplete;
      const std::string name(trim(b.substr(i, a - i)));
      const size_t o = skip_space(b, a + kMistralArgs.size());
      if (o == b.size()) return Block::Incomplete;
      const size_t e = json_container_end(b, o);
      if (name.empty() || b[o] != '{') return Block::Invalid;
      if (e == std::string_view::npos) return Block::Incomplete;
      auto j = parse_json(b.substr(o, e - o));
      if (!j || !j->is_object()) return Block::Invalid;
      calls.push_back({name, j->dump(), ""});
      consumed = e;
      return Block::Done;
    }
    case ToolCallSyntax::Llama3: {
      size_t i = b.compare(0, kPythonTag.size(), kPythonTag) == 0 ? kPythonTag.size() : 0;
      i = skip_space(b, i);
      if (i == b.size()) return Block::Incomplete;
      if (b[i] != '{') return Block::Invalid;
      const size_t e = json_container_end(b, i);
      if (e == std::string_view::npos) return Block::Incomplete;
      auto j = parse_json(b.substr(i, e - i));
      auto c = j ? call_from_object(*j) : std::nullopt;
      if (!c) return Block::Invalid;
      calls.push_back(std::move(*c));
      consumed = e;
      return Block::Done;
    }
    case ToolCallSyntax::DeepSeek:
    case ToolCallSyntax::DeepSeekV31: {
      const size_t end = b.find(kDsCallsEnd, kDsCalls.size());
      if (end == std::string_view::npos) return Block::Incomplete;
      std::string_view in = b.substr(kDsCalls.size(), end - kDsCalls.size());
      size_t i = skip_space(in, 0);
      while (i < in.size()) {
        if (in.compare(i, kDsCall.size(), kDsCall) != 0) return Block::Invalid;
        const size_t ce = in.find(kDsCallEnd, i);
        const size_t sep = in.find(kDsSep, i);
        if (ce == std::string_view::npos || sep == std::string_view::npos || sep > ce)
          return Block::Invalid;
        const std::string_view left = trim(in.substr(i + kDsCall.size(), sep - i - kDsCall.size()));
        std::string_view right = in.substr(sep + kDsSep.size(), ce - sep - kDsSep.size());
        std::string name;
        std::string_view args;
        const size_t fence = right.find("```");
        if (left == "function" && fence != std::string_view::npos) {  // V3: NAME\n```json\n{}\n```
          name = std::string(trim(right.substr(0, fence)));
          std::string_view rest = right.substr(fence + 3);
          if (rest.substr(0, 4) == "json") rest.remove_prefix(4);
          const size_t close = rest.rfind("```");
          if (close == std::string_view::npos) return Block::Invalid;
          args = trim(rest.substr(0, close));
        } else {  // V3.1: NAME<sep>{}
          name = std::string(left);
          args = trim(right);
        }
        auto j = parse_json(args);
        if (name.empty() || !j || !j->is_object()) return Block::Invalid;
        calls.push_back({name, j->dump(), ""});
        i = skip_space(in, ce + kDsCallEnd.size());
      }
      if (calls.empty()) return Block::Invalid;
      consumed = end + kDsCallsEnd.size();
      return Block::Done;
    }
    case ToolCallSyntax::QwenXml: {
      // <tool_call>\n<function=NAME>\n(<parameter=K>\nV\n</parameter>\n)*</function>\n</tool_call>
      size_t i = skip_space(b, kToolCall.size());
      std::string name;
      if (Match m = expect(b, i, kFunction); m != Match::Done) return block_of(m);
      if (Match m = read_name(b, i, ">", name); m != Match::Done) return block_of(m);
      ojson args = ojson::object();
      if (Match m =
              read_xml_parameters(b, i, kParameter, ">", true, kFunctionEnd, tools_, name, args);
          m != Match::Done)
        return block_of(m);
      i = skip_space(b, i);
      if (Match m = expect(b, i, kToolCallEnd); m != Match::Done) return block_of(m);
      calls.push_back({name, args.dump(), ""});
      consumed = i;
      return Block::Done;
    }
    case ToolCallSyntax::Gemma4: {
      // <|tool_call>call:NAME{K:V,...}<tool_call|>
      size_t i = kGemmaCall.size();
      std::string name;
      if (Match m = expect(b, i, kGemmaCallName); m != Match::Done) return block_of(m);
      if (Match m = read_name(b, i, "{", name); m != Match::Done) return block_of(m);
      --i;  // back to the '{'
      ojson args;
      switch (read_gemma4_value(b, i, args)) {
        case Gemma4Read::Done: break;
        case Gemma4Read::Incomplete: return Block::Incomplete;
        case Gemma4Read::Invalid: return Block::Invalid;
      }
      i = skip_space(b, i);
      if (Match m = expect(b, i, kGemmaCallEnd); m != Match::Done) return block_of(m);
      calls.push_back({name, args.dump(), ""});
      consumed = i;
      return Block::Done;
    }
    case ToolCallSyntax::MiniMax: {
      // <minimax:tool_call>(<invoke name="NAME">(<parameter name="K">V</parameter>)*</invoke>)+
      // </minimax:tool_call>, whitespace between the tags.
      size_t i = kMiniMax.size();
      for (;;) {
        i = skip_space(b, i);
        const Match inv = expect(b, i, kInvoke);
        if (inv == Match::Done) {
          std::string name;
          if (Match m = read_name(b, i, "\">", name); m != Match::Done) return block_of(m);
          ojson args = ojson::object();
          if (Match m = read_xml_parameters(b, i, kMiniMaxParameter, "\">", false, kInvokeEnd,
                                            tools_, name, args);
              m != Match::Done)
            return block_of(m);
          calls.push_back({name, args.dump(), ""});
          continue;
        }
        const Match end = expect(b, i, kMiniMaxEnd);
        if (end == Match::Done) {
          if (calls.empty()) return Block::Invalid;
          consumed = i;
          return Block::Done;
        }
        return inv == Match::Incomplete || end == Match::Incomplete ? Block::Incomplete
                                                                    : Block::Invalid;
      }
    }
    default: return Block::Invalid;
  }
}

ToolCallParser::Out parse_tool_calls(ToolCallSyntax syntax, std::string_view text,
                                     const ojson& tools) {
  ToolCallParser p(syntax, tools);
  ToolCallParser::Out out = p.push(text);
  ToolCallParser::Out rest = p.finish();
  out.content += rest.content;
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace moeflow
