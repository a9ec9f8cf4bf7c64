#include "toolcall/gemma4_values.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;
constexpr int kMaxDepth = 64;

bool g4_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t g4_skip(std::string_view s, size_t i) {
  while (i < s.size() && g4_space(s[i])) ++i;
  return i;
}

// s[i..] starts with the quote (1), is cut off inside one (0 with `partial`), or neither.
bool at_quote(std::string_view s, size_t i, bool& partial) {
  const std::string_view rest = s.substr(i);
  partial = rest.size() < kGemma4Quote.size() && kGemma4Quote.substr(0, rest.size()) == rest;
  return rest.substr(0, kGemma4Quote.size()) == kGemma4Quote;
}

Gemma4Read read_value(std::string_view s, size_t& pos, ojson& out, int depth);

// A quoted string at s[pos] (the quote checked by the caller).
Gemma4Read read_string(std::string_view s, size_t& pos, std::string& out) {
  const size_t begin = pos + kGemma4Quote.size();
  const size_t end = s.find(kGemma4Quote, begin);
  if (end == std::string_view::npos) return Gemma4Read::Incomplete;
  out.assign(s.substr(begin, end - begin));
  pos = end + kGemma4Quote.size();
  return Gemma4Read::Done;
}

Gemma4Read read_container(std::string_view s, size_t& pos, ojson& out, int depth) {
  const bool object = s[pos] == '{';
  const char close = object ? '}' : ']';
  out = object ? ojson::object() : ojson::array();
  size_t i = g4_skip(s, pos + 1);
  if (i == s.size()) return Gemma4Read::Incomplete;
  if (s[i] == close) {
    pos = i + 1;
    return Gemma4Read::Done;
  }
  for (;;) {
    std::string key;
    if (object) {
      bool partial = false;
      if (at_quote(s, i, partial)) {
        if (Gemma4Read r = read_string(s, i, key); r != Gemma4Read::Done) return r;
      } else if (partial) {
        return Gemma4Read::Incomplete;
      } else {
        const size_t k = i;
        while (i < s.size() && s[i] != ':' &&
               std::string_view("{}[],<>\"\n").find(s[i]) == std::string_view::npos)
          ++i;
        if (i == s.size()) return Gemma4Read::Incomplete;
        size_t e = i;
        while (e > k && g4_space(s[e - 1])) --e;
        key.assign(s.substr(k, e - k));
        if (key.empty()) return Gemma4Read::Invalid;
      }
      i = g4_skip(s, i);
      if (i == s.size()) return Gemma4Read::Incomplete;
      if (s[i] != ':') return Gemma4Read::Invalid;
      ++i;
    }
    ojson v;
    if (Gemma4Read r = read_value(s, i, v, depth + 1); r != Gemma4Read::Done) return r;
    if (object)
      out[key] = std::move(v);
    else
      out.push_back(std::move(v));
    i = g4_skip(s, i);
    if (i == s.size()) return Gemma4Read::Incomplete;
    if (s[i] == close) {
      pos = i + 1;
      return Gemma4Read::Done;
    }
    if (s[i] != ',') return Gemma4Read::Invalid;
    i = g4_skip(s, i + 1);
  }
}

Gemma4Read read_value(std::string_view s, size_t& pos, ojson& out, int depth) {
  if (depth > kMaxDepth) return Gemma4Read::Invalid;
  size_t i = g4_skip(s, pos);
  if (i == s.size()) return Gemma4Read::Incomplete;
  bool partial = false;
  if (at_quote(s, i, partial)) {
    std::string str;
    const Gemma4Read r = read_string(s, i, str);
    if (r == Gemma4Read::Done) {
      out = std::move(str);
      pos = i;
    }
    return r;
  }
  if (partial) return Gemma4Read::Incomplete;
  if (s[i] == '{' || s[i] == '[') {
    const Gemma4Read r = read_container(s, i, out, depth);
    if (r == Gemma4Read::Done) pos = i;
    return r;
  }
  // A number or a word: the run of characters that can be part of one.
  const size_t k = i;
  auto word_char = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' ||
           c == '-' || c == '.';
  };
  while (i < s.size() && word_char(s[i])) ++i;
  if (i == s.size()) return Gemma4Read::Incomplete;  // the number may go on
  const std::string_view w = s.substr(k, i - k);
  if (w == "true" || w == "True") {
    out = true;
  } else if (w == "false" || w == "False") {
    out = false;
  } else if (w == "null" || w == "None") {
    out = nullptr;
  } else {
    if (w.empty() || !(w[0] == '-' || (w[0] >= '0' && w[0] <= '9'))) return Gemma4Read::Invalid;
    ojson n = ojson::parse(w.begin(), w.end(), nullptr, false);
    if (n.is_discarded() || !n.is_number()) return Gemma4Read::Invalid;
    out = std::move(n);
  }
  pos = i;
  return Gemma4Read::Done;
}

}  // namespace

Gemma4Read read_gemma4_value(std::string_view s, size_t& pos, ojson& out) {
  return read_value(s, pos, out, 0);
}

std::string write_gemma4_value(const ojson& v) {
  if (v.is_string())
    return std::string(kGemma4Quote) + v.get<std::string>() + std::string(kGemma4Quote);
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() > 1) out += ',';
      out += it.key() + ":" + write_gemma4_value(it.value());
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (const ojson& x : v) {
      if (out.size() > 1) out += ',';
      out += write_gemma4_value(x);
    }
    return out + "]";
  }
  return v.dump();
}

}  // namespace moeflow
