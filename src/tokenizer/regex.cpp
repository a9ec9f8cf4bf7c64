#include "tokenizer/regex.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace moeflow {

namespace {

using unicode::GeneralCategory;

constexpr uint32_t bit(GeneralCategory c) { return 1u << static_cast<int>(c); }

// Category masks for \p{...} names.
bool category_mask(const std::string& name, uint32_t& mask) {
  using G = GeneralCategory;
  static const char* kNames[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                 "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                 "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  for (int i = 0; i < 30; ++i) {
    if (name == kNames[i]) {
      mask = 1u << i;
      return true;
    }
  }
  std::string n = name;
  if (n == "Letter") n = "L";
  if (n == "Number") n = "N";
  if (n == "Punctuation") n = "P";
  if (n.size() != 1) return false;
  mask = 0;
  for (int i = 0; i < 30; ++i) {
    if (unicode::major_class(static_cast<G>(i)) == n[0]) mask |= 1u << i;
  }
  return mask != 0;
}

// Function reference without allocation: the matcher passes continuations down the stack.
class Cont {
 public:
  template <typename F>
  Cont(const F& f)
      : obj_(&f), call_([](const void* o, size_t p) { return (*static_cast<const F*>(o))(p); }) {}
  bool operator()(size_t p) const { return call_(obj_, p); }

 private:
  const void* obj_;
  bool (*call_)(const void*, size_t);
};

}  // namespace

struct CharSet {
  bool negated = false;
  bool any = false;  // '.' (anything but \n)
  bool icase = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint32_t cat_mask = 0;                // \p{..}
  std::vector<uint32_t> neg_cat_masks;  // \P{..}
  bool space = false, nonspace = false;

  bool contains_raw(uint32_t cp) const {
    if (any && cp != '\n') return true;
    for (auto& r : ranges)
      if (cp >= r.first && cp <= r.second) return true;
    if (space && unicode::is_whitespace(cp)) return true;
    if (nonspace && !unicode::is_whitespace(cp)) return true;
    if (cat_mask || !neg_cat_masks.empty()) {
      const uint32_t b = 1u << static_cast<int>(unicode::category(cp));
      if (cat_mask & b) return true;
      for (uint32_t m : neg_cat_masks)
        if (!(m & b)) return true;
    }
    return false;
  }
  bool matches(uint32_t cp) const {
    bool r = contains_raw(cp);
    if (!r && icase && cp < 128 && ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'))
      r = contains_raw(cp ^ 0x20);
    return r != negated;
  }
};

struct Regex::Node {
  enum Type { Set, Seq, Alt, Repeat, Look, Begin, End } type = Seq;
  CharSet set;
  std::vector<std::unique_ptr<Node>> kids;
  int min = 0, max = 0;   // Repeat; max < 0 = unbounded
  bool negative = false;  // Look
};

namespace {

using Node = Regex::Node;

class Parser {
 public:
  Parser(std::string_view pat) : src_(pat), p_(unicode::decode(pat)) {}

  std::unique_ptr<Node> parse() {
    auto n = alt(false);
    if (i_ != p_.size()) error("unbalanced ')'");
    return n;
  }

 private:
  [[noreturn]] void error(const char* what) {
    fail("pre-tokenizer regex '{}': {} at character {}", src_, what, i_);
  }
  bool eof() const { return i_ >= p_.size(); }
  uint32_t peek() const { return p_[i_]; }

  std::unique_ptr<Node> alt(bool icase) {
    auto first = seq(icase);
    if (eof() || peek() != '|') return first;
    auto n = std::make_unique<Node>();
    n->type = Node::Alt;
    n->kids.push_back(std::move(first));
    while (!eof() && peek() == '|') {
      ++i_;
      n->kids.push_back(seq(icase));
    }
    return n;
  }

  std::unique_ptr<Node> seq(bool icase) {
    auto n = std::make_unique<Node>();
    n->type = Node::Seq;
    while (!eof() && peek() != '|' && peek() != ')') {
      auto a = atom(icase);
      a = quantified(std::move(a));
      n->kids.push_back(std::move(a));
    }
    return n;
  }

  int number() {
    if (eof() || peek() < '0' || peek() > '9') error("expected a number in {m,n}");
    int v = 0;
    while (!eof() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<int>(peek() - '0');
      if (v > 100000) error("repeat count too large");
      ++i_;
    }
    return v;
  }

  std::unique_ptr<Node> quantified(std::unique_ptr<Node> a) {
    while (!eof()) {
      int mn, mx;
      const uint32_t c = peek();
      if (c == '?') {
        mn = 0;
        mx = 1;
        ++i_;
      } else if (c == '*') {
        mn = 0;
        mx = -1;
        ++i_;
      } else if (c == '+') {
        mn = 1;
        mx = -1;
        ++i_;
      } else if (c == '{') {
        ++i_;
        mn = number();
        mx = mn;
        if (!eof() && peek() == ',') {
          ++i_;
          mx = (!eof() && peek() == '}') ? -1 : number();
        }
        if (eof() || peek() != '}') error("expected '}'");
        ++i_;
        if (mx >= 0 && mx < mn) error("bad repeat range");
      } else {
        return a;
      }
      if (!eof() && (peek() == '?' || peek() == '+'))
        error("lazy/possessive quantifiers are not supported");
      if (a->type == Node::Look || a->type == Node::Begin || a->type == Node::End)
        error("quantified assertion");
      auto r = std::make_unique<Node>();
      r->type = Node::Repeat;
      r->min = mn;
      r->max = mx;
      r->kids.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (eof()) error("truncated hex escape");
      const uint32_t c = peek();
      ++i_;
      if (c >= '0' && c <= '9')
        v = v * 16 + (c - '0');
      else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
        v = v * 16 + ((c | 0x20) - 'a' + 10);
      else
        error("bad hex digit");
    }
    return v;
  }

  // Parses an escape after '\'. Returns true and sets `lit` if it is a single character;
  // otherwise adds the class it denotes to `set`.
  bool escape(CharSet& set, uint32_t& lit) {
    if (eof()) error("trailing backslash");
    const uint32_t c = peek();
    ++i_;
    switch (c) {
      case 'n': lit = '\n'; return true;
      case 'r': lit = '\r'; return true;
      case 't': lit = '\t'; return true;
      case 'f': lit = '\f'; return true;
      case 'v': lit = '\v'; return true;
      case '0': lit = 0; return true;
      case 'x': lit = hex(2); return true;
      case 'u': lit = hex(4); return true;
      case 's': set.space = true; return false;
      case 'S': set.nonspace = true; return false;
      case 'd': set.cat_mask |= bit(GeneralCategory::Nd); return false;
      case 'D': set.neg_cat_masks.push_back(bit(GeneralCategory::Nd)); return false;
      case 'w': {
        uint32_t m = 0;
        category_mask("L", m);
        uint32_t mm = 0;
        category_mask("M", mm);
        set.cat_mask |= m | mm | bit(GeneralCategory::Nd) | bit(GeneralCategory::Pc);
        return false;
      }
      case 'p':
      case 'P': {
        std::string name;
        if (!eof() && peek() == '{') {
          ++i_;
          while (!eof() && peek() != '}') name += static_cast<char>(peek() & 0x7F), ++i_;
          if (eof()) error("unterminated \\p{");
          ++i_;
        } else {
          if (eof()) error("truncated \\p");
          name = static_cast<char>(peek() & 0x7F);
          ++i_;
        }
        uint32_t m = 0;
        if (!category_mask(name, m)) error("unknown Unicode category");
        if (c == 'p')
          set.cat_mask |= m;
        else
          set.neg_cat_masks.push_back(m);
        return false;
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
          error("unsupported escape");
        lit = c;  // escaped punctuation
        return true;
    }
  }

  std::unique_ptr<Node> set_node(CharSet s, bool icase) {
    auto n = std::make_unique<Node>();
    n->type = Node::Set;
    s.icase = icase;
    n->set = std::move(s);
    return n;
  }

  std::unique_ptr<Node> char_class(bool icase) {
    CharSet s;
    if (!eof() && peek() == '^') {
      s.negated = true;
      ++i_;
    }
    bool first = true;
    while (true) {
      if (eof()) error("unterminated character class");
      uint32_t c = peek();
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      ++i_;
      uint32_t lo;
      if (c == '\\') {
        if (!escape(s, lo)) continue;
      } else if (c == '[') {
        error("nested character classes are not supported");
      } else {
        lo = c;
      }
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = peek();
        ++i_;
        if (hi == '\\') {
          CharSet dummy;
          if (!escape(dummy, hi)) error("class escape as range end");
        }
        if (hi < lo) error("reversed range in character class");
        s.ranges.emplace_back(lo, hi);
      } else {
        s.ranges.emplace_back(lo, lo);
      }
    }
    return set_node(std::move(s), icase);
  }

  std::unique_ptr<Node> atom(bool icase) {
    const uint32_t c = peek();
    ++i_;
    if (c == '(') {
      bool ic = icase;
      auto look = std::unique_ptr<Node>();
      if (!eof() && peek() == '?') {
        ++i_;
        if (eof()) error("truncated group");
        const uint32_t k = peek();
        ++i_;
        if (k == '=' || k == '!') {
          look = std::make_unique<Node>();
          look->type = Node::Look;
          look->negative = (k == '!');
        } else if (k == 'i' && !eof() && peek() == ':') {
          ++i_;
          ic = true;
        } else if (k != ':') {
          error("unsupported group kind");
        }
      }
      auto inner = alt(ic);
      if (eof() || peek() != ')') error("missing ')'");
      ++i_;
      if (look) {
        look->kids.push_back(std::move(inner));
        return look;
      }
      return inner;
    }
    if (c == '[') return char_class(icase);
    if (c == '.') {
      CharSet s;
      s.any = true;
      return set_node(std::move(s), icase);
    }
    if (c == '^' || c == '$') {
      auto n = std::make_unique<Node>();
      n->type = c == '^' ? Node::Begin : Node::End;
      return n;
    }
    if (c == ')' || c == '|' || c == '?' || c == '*' || c == '+' || c == '{') {
      --i_;
      error("unexpected metacharacter");
    }
    CharSet s;
    uint32_t lit = c;
    if (c == '\\' && !escape(s, lit)) return set_node(std::move(s), icase);
    s.ranges.emplace_back(lit, lit);
    return set_node(std::move(s), icase);
  }

  std::string src_;
  std::vector<uint32_t> p_;
  size_t i_ = 0;
};

class Matcher {
 public:
  Matcher(const uint32_t* s, size_t n) : s_(s), n_(n) {}

  bool m(const Node& nd, size_t pos, Cont k) const {
    switch (nd.type) {
      case Node::Set: return pos < n_ && nd.set.matches(s_[pos]) && k(pos + 1);
      case Node::Seq: return seq(nd, 0, pos, k);
      case Node::Alt:
        for (auto& kid : nd.kids)
          if (m(*kid, pos, k)) return true;
        return false;
      case Node::Repeat: return repeat(nd, pos, k);
      case Node::Look: {
        auto accept = [](size_t) { return true; };
        const bool found = m(*nd.kids[0], pos, Cont(accept));
        return found != nd.negative && k(pos);
      }
      case Node::Begin: return pos == 0 && k(pos);
      case Node::End: return pos == n_ && k(pos);
    }
    return false;
  }

 private:
  bool seq(const Node& nd, size_t i, size_t pos, Cont k) const {
    if (i == nd.kids.size()) return k(pos);
    auto next = [&](size_t p) { return seq(nd, i + 1, p, k); };
    return m(*nd.kids[i], pos, Cont(next));
  }

  bool repeat(const Node& nd, size_t pos, Cont k) const {
    const Node& kid = *nd.kids[0];
    const size_t mx = nd.max < 0 ? n_ - pos : std::min<size_t>(nd.max, n_ - pos);
    if (kid.type == Node::Set) {
      // Single-character body: count the run, then back off greedily without recursion
      // (so a megabyte of letters cannot overflow the stack).
      size_t c = 0;
      while (c < mx && kid.set.matches(s_[pos + c])) ++c;
      for (size_t j = c + 1; j-- > static_cast<size_t>(nd.min);) {
        if (k(pos + j)) return true;
      }
      return false;
    }
    return repeat_general(kid, nd.min, nd.max, 0, pos, k);
  }

  bool repeat_general(const Node& kid, int mn, int mx, int count, size_t pos, Cont k) const {
    if (mx < 0 || count < mx) {
      auto more = [&](size_t p) {
        return p != pos && repeat_general(kid, mn, mx, count + 1, p, k);
      };
      if (m(kid, pos, Cont(more))) return true;
    }
    return count >= mn && k(pos);
  }

  const uint32_t* s_;
  size_t n_;
};

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern), root_(Parser(pattern).parse()) {}
Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

long Regex::match_at(const uint32_t* s, size_t n, size_t pos) const {
  long end = -1;
  auto done = [&](size_t p) {
    end = static_cast<long>(p);
    return true;
  };
  Matcher(s, n).m(*root_, pos, Cont(done));
  return end;
}

void Regex::split(const uint32_t* s, size_t begin, size_t end,
                  std::vector<std::pair<size_t, size_t>>& out) const {
  const uint32_t* base = s + begin;
  const size_t n = end - begin;
  size_t gap = 0;
  for (size_t pos = 0; pos < n;) {
    const long e = match_at(base, n, pos);
    if (e > static_cast<long>(pos)) {
      if (gap < pos) out.emplace_back(begin + gap, begin + pos);
      out.emplace_back(begin + pos, begin + e);
      pos = static_cast<size_t>(e);
      gap = pos;
    } else {
      ++pos;
    }
  }
  if (gap < n) out.emplace_back(begin + gap, begin + n);
}

}  // namespace moeflow
