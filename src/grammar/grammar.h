#pragma once
// Grammars over bytes: a set of named rules, each an expression of byte sets, references to
// rules, sequences, alternatives and bounded or unbounded repetition (what GBNF writes and what
// the JSON-schema compiler produces). GrammarBuilder lowers the expressions into the flat form
// the matcher runs (grammar/matcher.h): every rule a list of alternatives, every alternative a
// run of symbols (a byte set or a rule) ended by an End symbol, in one array.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "grammar/byte_set.h"

namespace moeflow {

// A grammar that cannot be built: an undefined rule, left recursion, a repetition too large.
class GrammarError : public Error {
 public:
  using Error::Error;
};

struct Expr {
  enum class Kind : uint8_t { Bytes, Ref, Seq, Alt, Repeat };
  Kind kind = Kind::Seq;  // an empty sequence matches the empty string
  ByteSet bytes;          // Bytes: one byte of this set
  std::string ref;        // Ref: the rule's name
  std::vector<Expr> items;
  int min = 0, max = -1;  // Repeat: items[0], min to max times (-1: no upper bound)

  static Expr byte_set(const ByteSet& s);
  static Expr literal(std::string_view bytes);  // these bytes in order
  static Expr rule(std::string name);
  static Expr seq(std::vector<Expr> items);
  static Expr alt(std::vector<Expr> items);
  static Expr repeat(Expr e, int min, int max);
  static Expr optional(Expr e) { return repeat(std::move(e), 0, 1); }
  static Expr empty() { return Expr{}; }
};

struct Symbol {
  enum Kind : uint8_t { Bytes, Rule, End };
  Kind kind = End;
  uint32_t arg = 0;  // Bytes: index of the byte set; Rule: rule id
};

class Grammar {
 public:
  const std::vector<Symbol>& symbols() const { return syms_; }
  const ByteSet& byte_set(uint32_t i) const { return sets_[i]; }
  // Where each alternative of `rule` starts in symbols().
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alts_[rule]; }
  uint32_t root() const { return root_; }
  size_t n_rules() const { return alts_.size(); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

 private:
  friend class GrammarLowerer;  // grammar.cpp: fills it in
  std::vector<Symbol> syms_;
  std::vector<ByteSet> sets_;
  std::vector<std::vector<uint32_t>> alts_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

class GrammarBuilder {
 public:
  // Throws GrammarError when `name` is already defined.
  void define(const std::string& name, Expr e);
  bool defined(const std::string& name) const { return defs_.count(name) != 0; }
  // A name no rule has yet, made from `hint`.
  std::string fresh_name(std::string_view hint);
  // Lowers every definition. Throws GrammarError naming the rule for a reference to an
  // undefined rule, a left-recursive rule (the matcher would never stop expanding it), a
  // repetition bound over kMaxRepeat, or a grammar of more than kMaxSymbols symbols.
  std::shared_ptr<const Grammar> build(const std::string& root) const;

  static constexpr int kMaxRepeat = 10000;
  // Bounds the lowered grammar (8 bytes a symbol): x{0,10000} alone is 10000 rules, and a
  // schema from a request may hold many such counts.
  static constexpr size_t kMaxSymbols = size_t{1} << 20;

 private:
  std::map<std::string, Expr> defs_;
  std::vector<std::string> order_;  // definition order: rule ids follow it
  int counter_ = 0;
};

}  // namespace moeflow
