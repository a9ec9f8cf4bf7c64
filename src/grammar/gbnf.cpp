#include "grammar/gbnf.h"

#include <cctype>

#include <fmt/format.h>

#include "grammar/utf8_ranges.h"

namespace moeflow {
namespace {

bool name_char(char c) { return std::isalnum((unsigned char)c) || c == '_' || c == '-'; }

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view t) : t_(t) {}

  std::shared_ptr<const Grammar> parse() {
    skip_space();
    while (p_ < t_.size()) {
      const std::string name = read_name();
      skip_space();
      if (t_.substr(p_, 3) != "::=") error("expected '::=' after the rule name");
      p_ += 3;
      b_.define(name, alternatives());
      if (p_ < t_.size() && !at_rule_start()) error("unexpected character");
    }
    return b_.build("root");
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw GrammarError(fmt::format("grammar: line {}, column {}: {}", line, col, what));
  }

  void skip_space() {
    while (p_ < t_.size()) {
      if (std::isspace((unsigned char)t_[p_])) {
        ++p_;
      } else if (t_[p_] == '#') {
        while (p_ < t_.size() && t_[p_] != '\n') ++p_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t s = p_;
    while (p_ < t_.size() && name_char(t_[p_])) ++p_;
    if (s == p_) error("expected a rule name");
    return std::string(t_.substr(s, p_ - s));
  }

  // At `name ::=`: the current rule has ended.
  bool at_rule_start() const {
    size_t q = p_;
    while (q < t_.size() && name_char(t_[q])) ++q;
    if (q == p_) return false;
    while (q < t_.size() && (t_[q] == ' ' || t_[q] == '\t' || t_[q] == '\n' || t_[q] == '\r')) ++q;
    return t_.substr(q, 3) == "::=";
  }

  Expr alternatives() {
    std::vector<Expr> alts;
    alts.push_back(sequence());
    while (p_ < t_.size() && t_[p_] == '|') {
      ++p_;
      skip_space();
      alts.push_back(sequence());
    }
    return Expr::alt(std::move(alts));
  }

  Expr sequence() {
    std::vector<Expr> items;
    for (;;) {
      skip_space();
      if (p_ >= t_.size() || t_[p_] == '|' || t_[p_] == ')' || at_rule_start()) break;
      Expr e = primary();
      postfix(e);
      items.push_back(std::move(e));
    }
    return items.size() == 1 ? std::move(items[0]) : Expr::seq(std::move(items));
  }

  void postfix(Expr& e) {
    for (;;) {
      if (p_ >= t_.size()) return;
      const char c = t_[p_];
      if (c == '*' || c == '+' || c == '?') {
        ++p_;
        e = Expr::repeat(std::move(e), c == '+' ? 1 : 0, c == '?' ? 1 : -1);
      } else if (c == '{') {
        ++p_;
        const int lo = number();
        int hi = lo;
        if (p_ < t_.size() && t_[p_] == ',') {
          ++p_;
          hi = p_ < t_.size() && t_[p_] == '}' ? -1 : number();
        }
        if (p_ >= t_.size() || t_[p_] != '}') error("expected '}' to close the repetition");
        ++p_;
        e = Expr::repeat(std::move(e), lo, hi);
      } else {
        return;
      }
    }
  }

  int number() {
    const size_t s = p_;
    long v = 0;
    while (p_ < t_.size() && std::isdigit((unsigned char)t_[p_]) && v <= 1000000)
      v = v * 10 + (t_[p_++] - '0');
    if (s == p_) error("expected a number");
    return (int)v;
  }

  Expr primary() {
    const char c = t_[p_];
    if (c == '"') {
      ++p_;
      std::string bytes;
      while (p_ < t_.size() && t_[p_] != '"') bytes += utf8_encode(character());
      if (p_ >= t_.size()) error("unterminated string literal");
      ++p_;
      return Expr::literal(bytes);
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++p_;
      return utf8_class({{0, 0x10FFFF}});
    }
    if (c == '(') {
      ++p_;
      skip_space();
      Expr e = alternatives();
      if (p_ >= t_.size() || t_[p_] != ')') error("expected ')'");
      ++p_;
      return e;
    }
    if (name_char(c)) return Expr::rule(read_name());
    error(fmt::format("unexpected character '{}'", c));
  }

  Expr char_class() {
    ++p_;  // '['
    const bool negated = p_ < t_.size() && t_[p_] == '^';
    if (negated) ++p_;
    CodepointRanges r;
    while (p_ < t_.size() && t_[p_] != ']') {
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (p_ + 1 < t_.size() && t_[p_] == '-' && t_[p_ + 1] != ']') {
        ++p_;
        hi = character();
        if (hi < lo) error("character range out of order");
      }
      r.emplace_back(lo, hi);
    }
    if (p_ >= t_.size()) error("unterminated character class");
    ++p_;
    return utf8_class(negated ? complement(std::move(r)) : r);
  }

  // One character of a literal or class: an escape, or a UTF-8 encoded code point.
  uint32_t character() {
    if (p_ >= t_.size()) error("unexpected end of the grammar");
    const unsigned char c = (unsigned char)t_[p_];
    if (c == '\\') {
      if (++p_ >= t_.size()) error("unfinished escape");
      const char e = t_[p_++];
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '\'': return (uint32_t)e;
        default: --p_; error(fmt::format("unknown escape '\\{}'", e));
      }
    }
    int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || p_ + n > t_.size()) error("invalid UTF-8 in the grammar");
    uint32_t cp = n == 1 ? c : c & (0x3F >> (n - 1));
    for (int k = 1; k < n; ++k) cp = (cp << 6) | ((unsigned char)t_[p_ + k] & 0x3F);
    p_ += n;
    return cp;
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k, ++p_) {
      if (p_ >= t_.size() || !std::isxdigit((unsigned char)t_[p_])) error("expected a hex digit");
      const char d = (char)std::tolower((unsigned char)t_[p_]);
      v = v * 16 + (uint32_t)(d <= '9' ? d - '0' : d - 'a' + 10);
    }
    if (v > 0x10FFFF) error("code point above U+10FFFF");
    return v;
  }

  std::string_view t_;
  size_t p_ = 0;
  GrammarBuilder b_;
};

}  // namespace

std::shared_ptr<const Grammar> parse_gbnf(std::string_view text) {
  return GbnfParser(text).parse();
}

}  // namespace moeflow
