// Template text -> segments, expression text -> tokens (lexer.h).
#include "chat_template/lexer.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "chat_template/value.h"

namespace moeflow::jinja {

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
      if (text.rfind("\r\n", 0) == 0)
        text.erase(0, 2);
      else if (!text.empty() && text[0] == '\n')
        text.erase(0, 1);
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
        if ((ls == 0 || src[ls - 1] == '\n') && p - ls <= text.size())
          text.resize(text.size() - (p - ls));
      }
    }
    if (!text.empty()) segs.push_back({Segment::Text, text});
    // Find the closing delimiter (outside string literals and brackets: as in Jinja's lexer,
    // `}}` closes a tag only where no bracket is open, so {{ f({'a': {'b': 1}}) }} is one tag).
    const char close = kind == '{' ? '}' : kind;
    size_t e = q;
    char quote = 0;
    size_t open = 0;  // brackets open
    for (; e + 1 < n; ++e) {
      const char c = src[e];
      if (kind != '#') {
        if (quote) {
          if (c == '\\')
            ++e;
          else if (c == quote)
            quote = 0;
          continue;
        }
        if (c == '\'' || c == '"') {
          quote = c;
          continue;
        }
        if (open == 0 && c == close && src[e + 1] == '}') break;
        if (c == '(' || c == '[' || c == '{') {
          ++open;
        } else if ((c == ')' || c == ']' || c == '}') && open > 0) {
          --open;  // a stray closer is the expression parser's error
        }
        continue;
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
    if (kind == '{')
      segs.push_back({Segment::Var, inner});
    else if (kind == '%')
      segs.push_back({Segment::Block, inner});
    after_block = kind != '{';
    pos = e + 2;
  }
  return segs;
}

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

}  // namespace moeflow::jinja
