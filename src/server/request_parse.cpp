#include "server/request_parse.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "server/response_format.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;

RequestError bad(std::string msg, std::string param = "", std::string code = "") {
  return RequestError(400, std::move(msg), std::move(param), std::move(code));
}

// A value as the client wrote it, short enough for an error message.
std::string shown(const ojson& v) {
  std::string s = v.dump(-1, ' ', false, ojson::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// SAX pass over the body that builds nothing: it stops at the first limit exceeded, so the
// cost of an oversized request is reading it once.
class Prescan final : public nlohmann::json_sax<ojson> {
 public:
  explicit Prescan(const RequestLimits& lim) : lim_(lim) {}
  std::optional<RequestError> error;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t& s) override { return value() && text(s.size()); }
  bool binary(binary_t&) override { return value(); }
  bool key(string_t& k) override {
    key_is_messages_ = stack_.size() == 1 && k == "messages";
    return text(k.size());
  }
  bool start_object(std::size_t) override { return value() && push('o'); }
  bool start_array(std::size_t) override {
    const bool messages = stack_.size() == 1 && key_is_messages_;
    return value() && push(messages ? 'm' : 'a');
  }
  bool end_object() override { return pop(); }
  bool end_array() override { return pop(); }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // nlohmann's text: "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
    std::string what = ex.what();
    const size_t p = what.find("] ");
    if (p != std::string::npos) what = what.substr(p + 2);
    error = bad("the request body is not valid JSON: " + what);
    return false;
  }

 private:
  bool value() {
    if (++values_ > lim_.max_values)
      return fail(
          bad(fmt::format("the request body has more than {} JSON values", lim_.max_values)));
    if (!stack_.empty() && stack_.back() == 'm' && ++messages_ > lim_.max_messages)
      return fail(
          bad(fmt::format("'messages' has more than {} entries", lim_.max_messages), "messages"));
    return true;
  }
  bool text(size_t n) {
    string_bytes_ += n;
    if (string_bytes_ > lim_.max_string_bytes)
      return fail(bad(fmt::format("the request body has more than {} bytes of strings",
                                  lim_.max_string_bytes)));
    return true;
  }
  bool push(char kind) {
    stack_.push_back(kind);
    if (stack_.size() > lim_.max_depth)
      return fail(bad(
          fmt::format("the request body nests arrays and objects deeper than {}", lim_.max_depth)));
    return true;
  }
  bool pop() {
    if (!stack_.empty()) stack_.pop_back();
    return true;
  }
  bool fail(RequestError e) {
    error = std::move(e);
    return false;
  }

  const RequestLimits& lim_;
  size_t values_ = 0, string_bytes_ = 0, messages_ = 0;
  std::vector<char> stack_;  // 'o' object, 'a' array, 'm' the top-level "messages" array
  bool key_is_messages_ = false;
};

const ojson* field(const ojson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> opt_number(const ojson& b, const char* key) {
  const ojson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw bad(fmt::format("'{}' must be a number, got {}", key, shown(*v)), key);
  return v->get<double>();
}

// Integers are JSON integers, or floats with an integral value (4.0); anything else (4.5, 1e300,
// "4") is refused, never rounded or clamped into range.
std::optional<int64_t> opt_int(const ojson& b, const char* key, int64_t lo, int64_t hi) {
  const ojson* v = field(b, key);
  if (!v) return std::nullopt;
  auto out_of_range = [&] {
    return bad(fmt::format("'{}' must be an integer in [{}, {}], got {}", key, lo, hi, shown(*v)),
               key);
  };
  if (v->is_number_unsigned()) {  // nlohmann reads every non-negative integer as unsigned
    const uint64_t u = v->get<uint64_t>();
    if (u > (uint64_t)INT64_MAX || (int64_t)u < lo || (int64_t)u > hi) throw out_of_range();
    return (int64_t)u;
  }
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) throw out_of_range();
    return i;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // Only floats that hold an integer exactly (|d| <= 2^53) are integers here; checked before
    // the cast, since casting an out-of-range double is undefined.
    if (!(std::fabs(d) <= 9007199254740992.0) || d != std::floor(d)) throw out_of_range();
    const int64_t i = (int64_t)d;
    if (i < lo || i > hi) throw out_of_range();
    return i;
  }
  throw out_of_range();
}

std::optional<bool> opt_bool(const ojson& b, const char* key) {
  const ojson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw bad(fmt::format("'{}' must be true or false, got {}", key, shown(*v)), key);
  return v->get<bool>();
}

// Strict requests: every field of a body (and of its nested objects) must be one this server
// reads; anything else is a 400 naming it, as the OpenAI API answers an unrecognized argument.
// docs/server.md lists every field. Three kinds of names are allowed:
//   - honoured fields (read below),
//   - fields accepted and ignored because they cannot change the output (check_ignored),
//   - OpenAI fields this server does not honour: a 400 saying why, unless null
//     (kUnsupportedChat; reasoning_effort and modalities where they cannot be honoured).
constexpr std::string_view kCommonFields[] = {
    "model", "stream", "stream_options", "n", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "presence_penalty", "frequency_penalty", "logit_bias", "seed", "stop", "logprobs",
    "response_format",  // on completions an extension, as llama.cpp's server
    // llama.cpp's extensions
    "top_k", "min_p", "repeat_penalty", "repeat_last_n", "ignore_eos",
    // ignored (check_ignored)
    "user"};
constexpr std::string_view kChatFields[] = {"messages", "top_logprobs", "tools", "tool_choice",
                                            "parallel_tool_calls", "reasoning_effort", "modalities",
                                            // ignored (check_ignored)
                                            "metadata", "store", "service_tier",
                                            "safety_identifier", "prompt_cache_key"};
constexpr std::string_view kCompletionFields[] = {"prompt", "suffix", "echo", "best_of"};

struct Unsupported {
  std::string_view field, why;
};
constexpr Unsupported kUnsupportedChat[] = {
    {"audio", "audio output is not supported (this server generates text only)"},
    {"prediction", "predicted outputs are not supported"},
    {"web_search_options", "web search is not supported"},
    {"verbosity", "no model served here reads a verbosity level"},
    {"functions", "it is deprecated; pass 'tools'"},
    {"function_call", "it is deprecated; pass 'tool_choice'"},
};

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest allowed name to a typo (at most 2 edits away, or differing in case), or "".
std::string closest(std::string_view key,
                    std::initializer_list<std::span<const std::string_view>> lists) {
  std::string best;
  size_t best_d = 3;
  if (key.size() > 64) return best;
  std::string lower(key);
  for (char& c : lower) c = (char)std::tolower((unsigned char)c);
  for (auto list : lists)
    for (std::string_view k : list) {
      const size_t d = lower == k ? 0 : edit_distance(key, k);
      if (d < best_d && d < std::max<size_t>(2, k.size() / 3 + 1)) {
        best_d = d;
        best = k;
      }
    }
  return best;
}

std::string shown_key(std::string_view k) {
  return k.size() > 40 ? std::string(k.substr(0, 37)) + "..." : std::string(k);
}

// Throws for the first field of object `obj` not in `lists`; `where` is "" at the top level, else
// the path of the object ("stream_options", "messages[2]"), which prefixes the param.
void check_fields(const ojson& obj, const std::string& where,
                  std::initializer_list<std::span<const std::string_view>> lists) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    bool ok = false;
    for (auto list : lists)
      for (std::string_view a : list) ok = ok || a == k;
    if (ok) continue;
    const std::string param = where.empty() ? k : where + "." + k;
    const std::string hint = closest(k, lists);
    throw bad(fmt::format("Unrecognized request argument supplied: '{}'{}{}", shown_key(k),
                          where.empty() ? "" : " (in " + where + ")",
                          hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint)),
              param.size() > 80 ? param.substr(0, 77) + "..." : param);
  }
}

// A JSON number as float: out of float range becomes +-inf, which every sampler range refuses.
float to_float(double d) {
  if (d > FLT_MAX) return std::numeric_limits<float>::infinity();
  if (d < -FLT_MAX) return -std::numeric_limits<float>::infinity();
  return (float)d;
}

ojson parse_json(std::string_view body, const RequestLimits& lim) {
  if (body.size() > lim.max_body_bytes)
    throw RequestError(413, fmt::format("the request body is {} bytes; the limit is {}",
                                        body.size(), lim.max_body_bytes));
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw bad("the request body is empty; send a JSON object");
  Prescan scan(lim);
  const bool ok = ojson::sax_parse(body, &scan, ojson::input_format_t::json, true, false);
  if (scan.error) throw *scan.error;
  if (!ok) throw bad("the request body is not valid JSON");
  try {
    return ojson::parse(body);
  } catch (const std::exception& e) {
    throw bad(fmt::format("the request body is not valid JSON: {}", e.what()));
  }
}

// The content of a chat message as text: a string, null, or an array of {"type": "text"} parts.
std::string message_text(const ojson& content, size_t i) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string s;
    for (size_t k = 0; k < content.size(); ++k) {
      const ojson& part = content[k];
      const ojson* type = part.is_object() ? field(part, "type") : nullptr;
      if (!type || !type->is_string())
        throw bad(fmt::format("messages[{}].content[{}] must be an object with a 'type'", i, k),
                  "messages");
      if (type->get<std::string>() != "text")
        throw bad(
            fmt::format("messages[{}].content[{}] is of type {}: only text parts are supported", i,
                        k, shown(*type)),
            "messages");
      static constexpr std::string_view kPart[] = {"type", "text"};
      check_fields(part, fmt::format("messages[{}].content[{}]", i, k), {kPart});
      const ojson* t = field(part, "text");
      if (!t || !t->is_string())
        throw bad(fmt::format("messages[{}].content[{}].text must be a string", i, k), "messages");
      s += t->get<std::string>();
    }
    return s;
  }
  throw bad(fmt::format("messages[{}].content must be a string, null or an array of text parts", i),
            "messages");
}

// Roles and the fields each may have (docs/server.md). Message fields go to the chat template as
// given (after the content is flattened to text).
void check_message(const ojson& msg, size_t i) {
  const std::string where = fmt::format("messages[{}]", i);
  const ojson* role = msg.is_object() ? field(msg, "role") : nullptr;
  if (!role || !role->is_string())
    throw bad(fmt::format("{} must be an object with a string 'role'", where), "messages");
  const std::string r = role->get<std::string>();
  static constexpr std::string_view kPlain[] = {"role", "content", "name"};
  static constexpr std::string_view kAssistant[] = {"role",       "content", "name",
                                                    "tool_calls", "refusal", "reasoning_content"};
  static constexpr std::string_view kTool[] = {"role", "content", "tool_call_id"};
  if (r == "system" || r == "developer" || r == "user") {
    check_fields(msg, where, {kPlain});
  } else if (r == "assistant") {
    for (const char* legacy : {"function_call", "audio"})
      if (field(msg, legacy))
        throw bad(fmt::format("{}.{} is not supported{}", where, legacy,
                              *legacy == 'f' ? ": pass 'tool_calls'" : " (text only)"),
                  where + "." + legacy);
    static constexpr std::string_view kLegacy[] = {"function_call", "audio"};
    check_fields(msg, where, {kAssistant, kLegacy});
  } else if (r == "tool") {
    check_fields(msg, where, {kTool});
    const ojson* id = field(msg, "tool_call_id");
    if (!id || !id->is_string())
      throw bad(fmt::format("{} (role \"tool\") needs a string 'tool_call_id'", where),
                where + ".tool_call_id");
  } else if (r == "function") {
    throw bad(fmt::format("{}: role \"function\" is deprecated; answer a tool call with role "
                          "\"tool\" and its 'tool_call_id'",
                          where),
              where + ".role");
  } else {
    throw bad(fmt::format("{}.role must be one of \"system\", \"developer\", \"user\", "
                          "\"assistant\", \"tool\"; got {}",
                          where, shown(*role)),
              where + ".role");
  }
  if (const ojson* n = field(msg, "name"); n && !n->is_string())
    throw bad(fmt::format("{}.name must be a string", where), where + ".name");
  for (const char* k : {"refusal", "reasoning_content"})
    if (const ojson* v = field(msg, k); v && !v->is_string())
      throw bad(fmt::format("{}.{} must be a string", where, k), where + "." + k);
  const ojson* tc = field(msg, "tool_calls");
  if (tc && !tc->is_array())
    throw bad(fmt::format("{}.tool_calls must be an array", where), where + ".tool_calls");
  // Content may only be left out (or null) by an assistant message that calls tools.
  if (!field(msg, "content") &&
      !(r == "assistant" && ((tc && !tc->empty()) || field(msg, "refusal"))))
    throw bad(fmt::format("{} (role \"{}\") needs a 'content'{}", where, r,
                          r == "assistant" ? " (or 'tool_calls')" : ""),
              "messages");
}

void read_messages(const ojson& b, const RequestContext& ctx, GenerationRequest& r) {
  const ojson* m = field(b, "messages");
  if (!m) throw bad("'messages' is required", "messages");
  if (!m->is_array() || m->empty()) throw bad("'messages' must be a non-empty array", "messages");
  r.messages = ojson::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const ojson& msg = (*m)[i];
    check_message(msg, i);
    ojson mm = msg;  // other fields (name, tool_calls, tool_call_id) go to the template as given
    const ojson* content = field(msg, "content");
    mm["content"] = message_text(content ? *content : ojson(nullptr), i);
    r.messages.push_back(std::move(mm));
  }
  // tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
  const ojson* tc = field(b, "tool_choice");
  if (tc) {
    if (tc->is_string()) {
      const std::string c = tc->get<std::string>();
      if (c == "none")
        r.tool_choice = ToolChoice::None;
      else if (c == "auto")
        r.tool_choice = ToolChoice::Auto;
      else if (c == "required")
        r.tool_choice = ToolChoice::Required;
      else
        throw bad(fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                              "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {}",
                              shown(*tc)),
                  "tool_choice");
    } else if (tc->is_object()) {
      static constexpr std::string_view kChoice[] = {"type", "function"};
      static constexpr std::string_view kChoiceFunction[] = {"name"};
      check_fields(*tc, "tool_choice", {kChoice});
      const ojson* type = field(*tc, "type");
      const ojson* f = field(*tc, "function");
      const ojson* name = f && f->is_object() ? field(*f, "name") : nullptr;
      if (!type || *type != "function" || !name || !name->is_string() ||
          name->get<std::string>().empty())
        throw bad(
            "'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
            "{\"name\": NAME}}",
            "tool_choice");
      check_fields(*f, "tool_choice.function", {kChoiceFunction});
      r.tool_choice = ToolChoice::Named;
      r.tool_name = name->get<std::string>();
    } else if (!tc->is_null()) {
      throw bad(fmt::format("'tool_choice' must be a string or an object, got {}", shown(*tc)),
                "tool_choice");
    }
  }
  const bool tools_off = r.tool_choice == ToolChoice::None;
  if (const ojson* t = field(b, "tools")) {
    if (!t->is_array()) throw bad("'tools' must be an array", "tools");
    for (size_t i = 0; i < t->size(); ++i) {
      const ojson& tool = (*t)[i];
      const ojson* type = tool.is_object() ? field(tool, "type") : nullptr;
      if (!type || *type != "function")
        throw bad(fmt::format("tools[{}] must be an object with \"type\": \"function\"", i),
                  "tools");
      const ojson* f = field(tool, "function");
      const ojson* name = f && f->is_object() ? field(*f, "name") : nullptr;
      if (!name || !name->is_string() || name->get<std::string>().empty())
        throw bad(fmt::format("tools[{}].function must be an object with a non-empty 'name'", i),
                  "tools");
      static constexpr std::string_view kTool[] = {"type", "function"};
      static constexpr std::string_view kFunction[] = {"name", "description", "parameters",
                                                       "strict"};
      check_fields(tool, fmt::format("tools[{}]", i), {kTool});
      check_fields(*f, fmt::format("tools[{}].function", i), {kFunction});
    }
    if (!tools_off && !t->empty()) r.tools = *t;
  }
  const bool forced = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
  if (forced && r.tools.is_null())
    throw bad(fmt::format("'tool_choice' {} needs a non-empty 'tools'", shown(*tc)), "tool_choice");
  if (r.tool_choice == ToolChoice::Named) {
    bool found = false;
    for (const ojson& t : r.tools) found = found || t["function"]["name"] == r.tool_name;
    if (!found)
      throw bad(fmt::format("'tool_choice' names the function '{}', which is not in 'tools'",
                            r.tool_name),
                "tool_choice");
  }
  if (auto v = opt_bool(b, "parallel_tool_calls")) r.parallel_tool_calls = *v;
  if (const ojson* e = field(b, "reasoning_effort")) {
    if (!ctx.reasoning_effort)
      throw bad(
          "'reasoning_effort' is not supported by this model: its chat template has no reasoning "
          "levels (only harmony models, gpt-oss, have them)",
          "reasoning_effort");
    const std::string v = e->is_string() ? e->get<std::string>() : "";
    if (v != "low" && v != "medium" && v != "high")
      throw bad(fmt::format("'reasoning_effort' must be \"low\", \"medium\" or \"high\", got {}",
                            shown(*e)),
                "reasoning_effort");
    r.reasoning_effort = v;
  }
  if (const ojson* mo = field(b, "modalities"))
    if (!(mo->is_array() && mo->size() == 1 && (*mo)[0] == "text"))
      throw bad(fmt::format("'modalities' {} is not supported: this server generates text only "
                            "([\"text\"])",
                            shown(*mo)),
                "modalities");
  for (const Unsupported& u : kUnsupportedChat)
    if (field(b, std::string(u.field).c_str()))
      throw bad(fmt::format("'{}' is not supported: {}", u.field, u.why), std::string(u.field));
}

// The fields this server accepts and ignores (they cannot change the output): type-checked only.
void check_ignored(const ojson& b, Endpoint ep) {
  for (const char* k : {"user", "service_tier", "safety_identifier", "prompt_cache_key"})
    if (const ojson* v = field(b, k); v && !v->is_string())
      throw bad(fmt::format("'{}' must be a string", k), k);
  if (ep != Endpoint::Chat) return;
  if (auto v = opt_bool(b, "store")) (void)*v;
  if (const ojson* m = field(b, "metadata")) {
    bool ok = m->is_object();
    for (auto it = ok ? m->begin() : m->end(); ok && it != m->end(); ++it)
      ok = it.value().is_string();
    if (!ok) throw bad("'metadata' must be an object of strings", "metadata");
  }
}

void read_prompt(const ojson& b, const RequestContext& ctx, GenerationRequest& r) {
  const ojson* p = field(b, "prompt");
  if (!p) throw bad("'prompt' is required", "prompt");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    r.prompt_is_text = true;
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r.prompt_is_text = false;
    for (size_t i = 0; i < p->size(); ++i) {
      const ojson& x = (*p)[i];
      if (!x.is_number_integer() && !x.is_number_unsigned())
        throw bad(fmt::format("prompt[{}] must be a token id (an integer), got {}", i, shown(x)),
                  "prompt");
      if (x.is_number_unsigned() ? x.get<uint64_t>() >= (uint64_t)ctx.n_vocab
                                 : (x.get<int64_t>() < 0 || x.get<int64_t>() >= ctx.n_vocab))
        throw bad(fmt::format("prompt[{}]: token id {} is out of range (vocabulary of {})", i,
                              shown(x), ctx.n_vocab),
                  "prompt");
      r.prompt_ids.push_back((int32_t)x.get<int64_t>());
    }
  } else if (p->is_array() && p->size() > 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    throw bad(fmt::format("'prompt' holds {} prompts: only one prompt per request is supported",
                          p->size()),
              "prompt");
  } else {
    throw bad(
        "'prompt' must be a string, an array of one string, or a non-empty array of token ids",
        "prompt");
  }
  if (const ojson* s = field(b, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
    throw bad("'suffix' is not supported (no fill-in-the-middle)", "suffix");
  if (auto e = opt_bool(b, "echo")) r.echo = *e;
}

void read_stop(const ojson& b, const RequestLimits& lim, TextGenParams& p) {
  const ojson* s = field(b, "stop");
  if (!s) return;
  const char* rule = "'stop' must be a string or an array of strings";
  std::vector<const ojson*> items;
  if (s->is_string())
    items.push_back(s);
  else if (s->is_array())
    for (const ojson& x : *s) items.push_back(&x);
  else
    throw bad(rule, "stop");
  if (items.size() > lim.max_stop)
    throw bad(fmt::format("'stop' has more than {} strings", lim.max_stop), "stop");
  for (const ojson* x : items) {
    if (!x->is_string()) throw bad(rule, "stop");
    std::string t = x->get<std::string>();
    if (t.size() > lim.max_stop_bytes)
      throw bad(fmt::format("a 'stop' string is longer than {} bytes", lim.max_stop_bytes), "stop");
    p.stop.push_back(std::move(t));
  }
}

void read_logit_bias(const ojson& b, const RequestContext& ctx, SamplerParams& sp) {
  const ojson* lb = field(b, "logit_bias");
  if (!lb) return;
  if (!lb->is_object())
    throw bad(
        "'logit_bias' must be an object mapping token ids (as strings) to biases in [-100, 100]",
        "logit_bias");
  if (lb->size() > ctx.limits.max_logit_bias)
    throw bad(fmt::format("'logit_bias' has more than {} entries", ctx.limits.max_logit_bias),
              "logit_bias");
  sp.logit_bias.clear();
  for (auto it = lb->begin(); it != lb->end(); ++it) {
    const std::string& k = it.key();
    int64_t id = -1;
    if (!k.empty() && k.size() <= 10 && k.find_first_not_of("0123456789") == std::string::npos)
      id = std::stoll(k);
    if (id < 0 || id >= ctx.n_vocab)
      throw bad(fmt::format("logit_bias key '{}' is not a token id of the vocabulary (0..{})",
                            k.size() > 20 ? k.substr(0, 20) + "..." : k, ctx.n_vocab - 1),
                "logit_bias");
    if (!it.value().is_number())
      throw bad(fmt::format("logit_bias['{}'] must be a number in [-100, 100], got {}", k,
                            shown(it.value())),
                "logit_bias");
    const double v = it.value().get<double>();
    if (!(v >= -100 && v <= 100))
      throw bad(fmt::format("logit_bias['{}'] must be a number in [-100, 100], got {}", k,
                            shown(it.value())),
                "logit_bias");
    sp.logit_bias.emplace_back((int32_t)id, (float)v);
  }
}

void read_sampling(const ojson& b, const RequestContext& ctx, GenerationRequest& r) {
  SamplerParams& sp = r.gen.sampling;
  if (auto v = opt_number(b, "temperature")) sp.temperature = to_float(*v);
  if (auto v = opt_number(b, "top_p")) sp.top_p = to_float(*v);
  if (auto v = opt_number(b, "min_p")) sp.min_p = to_float(*v);
  if (auto v = opt_number(b, "repeat_penalty")) sp.repeat_penalty = to_float(*v);
  if (auto v = opt_number(b, "presence_penalty")) sp.presence_penalty = to_float(*v);
  if (auto v = opt_number(b, "frequency_penalty")) sp.frequency_penalty = to_float(*v);
  if (auto v = opt_int(b, "top_k", -1, INT32_MAX)) sp.top_k = (int)*v;
  if (auto v = opt_int(b, "repeat_last_n", -1, INT32_MAX)) sp.repeat_last_n = (int)*v;
  read_logit_bias(b, ctx, sp);
  // One rule for the CLI and the server (sampling/sampler.h); the message quotes the request.
  if (auto e = check_sampler_params(sp)) {
    const ojson* v = field(b, e->field);
    const std::string got = v && !v->is_object() ? shown(*v) : e->value;
    throw bad(fmt::format("'{}' {}, got {}", e->field, e->requirement, got), e->field);
  }
  if (const ojson* s = field(b, "seed")) {
    // Any 64-bit integer; -1 asks for a random seed, as llama.cpp's server reads it.
    if (s->is_number_unsigned()) {
      sp.seed = s->get<uint64_t>();
      r.seed_given = true;
    } else if (auto v = opt_int(b, "seed", INT64_MIN, INT64_MAX); v && *v != -1) {
      sp.seed = (uint64_t)*v;
      r.seed_given = true;
    }
  }
}

void read_logprobs(const ojson& b, const RequestLimits& lim, GenerationRequest& r) {
  TextGenParams& p = r.gen;
  if (r.endpoint == Endpoint::Chat) {
    if (auto v = opt_bool(b, "logprobs")) p.logprobs = *v;
    if (auto v = opt_int(b, "top_logprobs", 0, lim.max_top_logprobs)) {
      if (!p.logprobs) throw bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      p.top_logprobs = (int)*v;
    }
  } else {
    // Completions: an integer, the number of alternatives per token (OpenAI's legacy form).
    if (auto v = opt_int(b, "logprobs", 0, lim.max_completion_logprobs)) {
      p.logprobs = true;
      p.top_logprobs = (int)*v;
    }
    if (p.logprobs && r.echo)
      throw bad("'echo' with 'logprobs' is not supported (prompt tokens get no logprobs)", "echo");
  }
}

}  // namespace

GenerationRequest parse_generation_request(std::string_view body, Endpoint endpoint,
                                           const RequestContext& ctx) {
  const ojson b = parse_json(body, ctx.limits);
  if (!b.is_object()) throw bad("the request body must be a JSON object");
  if (const ojson* m = field(b, "model")) {
    if (!m->is_string()) throw bad("'model' must be a string", "model");
    const std::string id = m->get<std::string>();
    if (!id.empty() && id != ctx.model_id)
      throw RequestError(
          404,
          fmt::format("The model '{}' does not exist (this server serves '{}')",
                      id.size() > 100 ? id.substr(0, 100) + "..." : id, ctx.model_id),
          "model", "model_not_found");
  }
  const bool chat = endpoint == Endpoint::Chat;
  std::vector<std::string_view> unsupported;
  if (chat)
    for (const Unsupported& u : kUnsupportedChat) unsupported.push_back(u.field);
  check_fields(b, "",
               {kCommonFields,
                chat ? std::span<const std::string_view>(kChatFields)
                     : std::span<const std::string_view>(kCompletionFields),
                unsupported});
  check_ignored(b, endpoint);
  GenerationRequest r;
  r.endpoint = endpoint;
  r.gen.sampling = ctx.sampling;
  if (chat)
    read_messages(b, ctx, r);
  else
    read_prompt(b, ctx, r);
  read_sampling(b, ctx, r);
  if (const ojson* rf = field(b, "response_format")) r.gen.grammar = parse_response_format(*rf);
  if (r.gen.grammar &&
      (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named))
    throw bad(
        "'response_format' json_object / json_schema cannot be combined with 'tool_choice' "
        "\"required\" or a named function: that reply is tool calls",
        "response_format");
  read_stop(b, ctx.limits, r.gen);
  read_logprobs(b, ctx.limits, r);
  if (auto v = opt_bool(b, "ignore_eos")) r.gen.ignore_eos = *v;
  if (auto v = opt_bool(b, "stream")) r.stream = *v;
  if (const ojson* so = field(b, "stream_options")) {
    if (!r.stream)
      throw bad("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (!so->is_object()) throw bad("'stream_options' must be an object", "stream_options");
    // include_obfuscation pads deltas against length side channels: accepted, never needed here.
    static constexpr std::string_view kStreamOptions[] = {"include_usage", "include_obfuscation"};
    check_fields(*so, "stream_options", {kStreamOptions});
    if (auto v = opt_bool(*so, "include_usage")) r.include_usage = *v;
    if (auto v = opt_bool(*so, "include_obfuscation")) (void)*v;
  }
  if (auto v = opt_int(b, "n", 1, ctx.limits.max_n)) r.n = (int)*v;
  if (auto v = chat ? std::nullopt : opt_int(b, "best_of", 1, ctx.limits.max_n); v && *v != r.n)
    throw bad("'best_of' is not supported (it may only equal 'n')", "best_of");
  // max_completion_tokens is the newer name of max_tokens; either may be given.
  const char* mt_key = field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto v = opt_int(b, mt_key, 1, INT32_MAX))
    r.gen.max_tokens = (int)*v;
  else
    r.gen.max_tokens = ctx.default_max_tokens;
  return r;
}

}  // namespace moeflow
