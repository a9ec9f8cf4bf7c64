// The expression parser (expr_parser.h).
#include "chat_template/expr_parser.h"

#include <algorithm>

namespace moeflow::jinja {
namespace {

ExprP mk(Expr::Kind k) { return std::make_unique<Expr>(k); }

}  // namespace

// Every finished node goes through here: its tree's depth is bounded, so evaluating and
// destroying it (both recursive) stay within the stack whatever the template says.
ExprP ExprParser::done(ExprP e) {
  int d = 0;
  for (const Expr* c : {e->a.get(), e->b.get(), e->c.get()})
    if (c) d = std::max(d, c->depth);
  for (const ExprP& c : e->args)
    if (c) d = std::max(d, c->depth);
  for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
  e->depth = d + 1;
  if (e->depth > kMaxExprDepth) terr("expression deeper than {} levels", kMaxExprDepth);
  return e;
}

ExprP ExprParser::bin(const std::string& op, ExprP a, ExprP b) {
  auto e = mk(Expr::Bin);
  e->name = op;
  e->a = std::move(a);
  e->b = std::move(b);
  return done(std::move(e));
}

ExprP ExprParser::conditional() {
  Nest nest(*this);
  ExprP a = or_expr();
  while (accept_name("if")) {
    auto e = mk(Expr::Cond);
    e->b = or_expr();  // condition
    if (accept_name("else")) e->c = or_expr();
    e->a = std::move(a);
    a = done(std::move(e));
  }
  return a;
}

ExprP ExprParser::or_expr() {
  ExprP a = and_expr();
  while (accept_name("or")) {
    auto e = mk(Expr::Or);
    e->a = std::move(a);
    e->b = and_expr();
    a = done(std::move(e));
  }
  return a;
}

ExprP ExprParser::and_expr() {
  ExprP a = not_expr();
  while (accept_name("and")) {
    auto e = mk(Expr::And);
    e->a = std::move(a);
    e->b = not_expr();
    a = done(std::move(e));
  }
  return a;
}

ExprP ExprParser::not_expr() {
  if (accept_name("not")) {
    Nest nest(*this);
    auto e = mk(Expr::Not);
    e->a = not_expr();
    return done(std::move(e));
  }
  return compare();
}

ExprP ExprParser::compare() {
  ExprP a = math1();
  for (;;) {
    static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
    bool done = true;
    for (const char* op : ops) {
      if (accept_op(op)) {
        a = bin(op, std::move(a), math1());
        done = false;
        break;
      }
    }
    if (!done) continue;
    if (accept_name("in")) {
      a = bin("in", std::move(a), math1());
    } else if (peek_name("not") && t_[p_ + 1].type == TT::Name && t_[p_ + 1].s == "in") {
      p_ += 2;
      a = bin("not in", std::move(a), math1());
    } else {
      return a;
    }
  }
}

ExprP ExprParser::math1() {
  ExprP a = concat();
  for (;;) {
    if (accept_op("+"))
      a = bin("+", std::move(a), concat());
    else if (accept_op("-"))
      a = bin("-", std::move(a), concat());
    else
      return a;
  }
}

ExprP ExprParser::concat() {
  ExprP a = math2();
  while (accept_op("~")) a = bin("~", std::move(a), math2());
  return a;
}

ExprP ExprParser::math2() {
  ExprP a = pow();
  for (;;) {
    if (accept_op("*"))
      a = bin("*", std::move(a), pow());
    else if (accept_op("//"))
      a = bin("//", std::move(a), pow());
    else if (accept_op("/"))
      a = bin("/", std::move(a), pow());
    else if (accept_op("%"))
      a = bin("%", std::move(a), pow());
    else
      return a;
  }
}

ExprP ExprParser::pow() {
  ExprP a = unary();
  while (accept_op("**")) a = bin("**", std::move(a), unary());
  return a;
}

ExprP ExprParser::unary() {
  if (accept_op("-")) {
    Nest nest(*this);
    auto e = mk(Expr::Neg);
    e->a = unary();
    return filters(done(std::move(e)));
  }
  if (accept_op("+")) {
    Nest nest(*this);
    return unary();
  }
  return filters(postfix(primary()));
}

void ExprParser::call_args(Expr& e) {
  // after '('
  if (accept_op(")")) return;
  do {
    if (t_[p_].type == TT::Name && t_[p_ + 1].type == TT::Op && t_[p_ + 1].s == "=") {
      std::string k = t_[p_].s;
      p_ += 2;
      e.kwargs.emplace_back(k, parse_expr());
    } else {
      e.args.push_back(parse_expr());
    }
  } while (accept_op(","));
  expect_op(")");
}

ExprP ExprParser::postfix(ExprP a) {
  for (;;) {
    if (accept_op(".")) {
      auto e = mk(Expr::Attr);
      e->name = name();
      e->a = std::move(a);
      a = done(std::move(e));
    } else if (accept_op("[")) {
      ExprP lo, hi, step;
      bool slice = false;
      if (!peek_op(":")) lo = parse_expr();
      if (accept_op(":")) {
        slice = true;
        if (!peek_op("]") && !peek_op(":")) hi = parse_expr();
        if (accept_op(":") && !peek_op("]")) step = parse_expr();
      }
      expect_op("]");
      auto e = mk(slice ? Expr::Slice : Expr::Index);
      e->a = std::move(a);
      e->b = std::move(lo);
      e->c = std::move(hi);
      if (slice) e->args.push_back(std::move(step));
      a = done(std::move(e));
    } else if (accept_op("(")) {
      auto e = mk(Expr::Call);
      e->a = std::move(a);
      call_args(*e);
      a = done(std::move(e));
    } else {
      return a;
    }
  }
}

ExprP ExprParser::filters(ExprP a) {
  for (;;) {
    if (accept_op("|")) {
      auto e = mk(Expr::Filter);
      e->name = name();
      e->a = std::move(a);
      if (accept_op("(")) call_args(*e);
      a = done(std::move(e));
    } else if (accept_name("is")) {
      auto e = mk(Expr::Test);
      e->negate = accept_name("not");
      e->name = name();
      e->a = std::move(a);
      if (accept_op("(")) {
        call_args(*e);
      } else {
        const Token& t = t_[p_];
        const bool arg = t.type == TT::String || t.type == TT::Int || t.type == TT::Float ||
                         (t.type == TT::Name && t.s != "and" && t.s != "or" && t.s != "else" &&
                          t.s != "if" && t.s != "not" && t.s != "in" && t.s != "is");
        if (arg) e->args.push_back(postfix(primary()));
      }
      a = done(std::move(e));
    } else {
      return a;
    }
  }
}

ExprP ExprParser::primary() {
  const Token t = t_[p_];
  if (t.type == TT::End) terr("unexpected end of expression in '{}'", src_);
  ++p_;
  auto lit = [](json v) {
    auto e = mk(Expr::Lit);
    e->lit = std::move(v);
    return e;
  };
  switch (t.type) {
    case TT::String: {
      std::string s = t.s;
      while (t_[p_].type == TT::String) s += t_[p_++].s;  // adjacent literals concatenate
      return lit(s);
    }
    case TT::Int: return lit(t.i);
    case TT::Float: return lit(t.f);
    case TT::Name: {
      if (t.s == "true" || t.s == "True") return lit(true);
      if (t.s == "false" || t.s == "False") return lit(false);
      if (t.s == "none" || t.s == "None") return lit(nullptr);
      auto e = mk(Expr::Name);
      e->name = t.s;
      return e;
    }
    default: break;
  }
  if (t.s == "(") {
    ExprP e = parse_expr();
    if (accept_op(",")) {  // tuple -> list
      auto l = mk(Expr::List);
      l->args.push_back(std::move(e));
      while (!peek_op(")")) {
        l->args.push_back(parse_expr());
        if (!accept_op(",")) break;
      }
      expect_op(")");
      return done(std::move(l));
    }
    expect_op(")");
    return e;
  }
  if (t.s == "[") {
    auto l = mk(Expr::List);
    while (!peek_op("]")) {
      l->args.push_back(parse_expr());
      if (!accept_op(",")) break;
    }
    expect_op("]");
    return done(std::move(l));
  }
  if (t.s == "{") {
    auto d = mk(Expr::Dict);
    while (!peek_op("}")) {
      ExprP k = parse_expr();
      expect_op(":");
      d->args.push_back(std::move(k));
      d->args.push_back(parse_expr());
      if (!accept_op(",")) break;
    }
    expect_op("}");
    return done(std::move(d));
  }
  terr("unexpected '{}' in '{}'", t.s, src_);
}

}  // namespace moeflow::jinja
