#pragma once
// Internal to src/chat_template/: the expression syntax tree and its recursive-descent parser
// (Jinja's precedence: conditional < or < and < not < comparisons/in < + - < ~ < * / // % <
// ** < unary < postfix . [] () < filters/tests). Every tree is bounded in depth
// (kMaxExprDepth) and the descent in nesting (kMaxNesting), so parsing, evaluating and
// destroying a hostile expression stay within the stack.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat_template/lexer.h"
#include "chat_template/limits.h"
#include "chat_template/value.h"

namespace moeflow::jinja {

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum Kind {
    Lit,
    Name,
    Attr,
    Index,
    Slice,
    Call,
    Filter,
    Test,
    Not,
    Neg,
    Bin,
    And,
    Or,
    Cond,
    List,
    Dict
  };
  Kind kind;
  json lit;
  std::string name;  // variable, attribute, filter, test or operator
  ExprP a, b, c;     // operands (Slice: a[b:c:args[0]])
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  bool negate = false;  // "is not"
  int depth = 1;        // of this node's tree (bounded by kMaxExprDepth)
  explicit Expr(Kind k) : kind(k) {}
};

// Parses one expression's tokens; the statement parser drives it through the public calls.
class ExprParser {
 public:
  ExprParser(std::vector<Token> toks, std::string_view src) : t_(std::move(toks)), src_(src) {}

  // Recursion guard of the descent: brackets, unary operators and `not` nest.
  struct Nest {
    explicit Nest(ExprParser& p) : p_(p) {
      if (++p_.nest_ > kMaxNesting) terr("expression nested deeper than {} levels", kMaxNesting);
    }
    ~Nest() { --p_.nest_; }
    ExprParser& p_;
  };

  ExprP parse_expr() { return conditional(); }
  ExprP parse_or_expr() { return or_expr(); }
  bool at_end() const { return t_[p_].type == TT::End; }
  bool peek_name(const char* n) const { return t_[p_].type == TT::Name && t_[p_].s == n; }
  bool peek_op(const char* o) const { return t_[p_].type == TT::Op && t_[p_].s == o; }
  void expect_end() {
    if (!at_end()) terr("unexpected '{}' in '{}'", t_[p_].s, src_);
  }
  std::string name() {
    if (t_[p_].type != TT::Name) terr("expected a name in '{}'", src_);
    return t_[p_++].s;
  }
  void expect_op(const char* o) {
    if (!peek_op(o)) terr("expected '{}' in '{}'", o, src_);
    ++p_;
  }
  bool accept_op(const char* o) {
    if (!peek_op(o)) return false;
    ++p_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++p_;
    return true;
  }

 private:
  static ExprP done(ExprP e);
  ExprP bin(const std::string& op, ExprP a, ExprP b);
  ExprP conditional();
  ExprP or_expr();
  ExprP and_expr();
  ExprP not_expr();
  ExprP compare();
  ExprP math1();
  ExprP concat();
  ExprP math2();
  ExprP pow();
  ExprP unary();
  void call_args(Expr& e);
  ExprP postfix(ExprP a);
  ExprP filters(ExprP a);
  ExprP primary();

  std::vector<Token> t_;
  size_t p_ = 0;
  std::string src_;
  int nest_ = 0;
};

}  // namespace moeflow::jinja
