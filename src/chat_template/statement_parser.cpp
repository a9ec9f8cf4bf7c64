// Segments -> statement tree (statement_parser.h).
#include "chat_template/statement_parser.h"

#include <algorithm>
#include <cctype>

#include "chat_template/lexer.h"
#include "chat_template/limits.h"
#include "chat_template/value.h"

namespace moeflow::jinja {
namespace {

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse() {
    std::string end;
    Body b = body({}, &end);
    if (!end.empty()) terr("unexpected '{{% {} %}}'", end);
    return b;
  }

 private:
  static std::string keyword(const std::string& block, std::string* rest) {
    size_t i = block.find_first_not_of(kWhitespace);
    if (i == std::string::npos) terr("empty block tag");
    size_t j = i;
    while (j < block.size() && (std::isalnum((unsigned char)block[j]) || block[j] == '_')) ++j;
    *rest = block.substr(j);
    return block.substr(i, j - i);
  }

  // Parses until one of `ends` (a block keyword); *found gets it ("" at the end of input).
  Body body(const std::vector<std::string>& ends, std::string* found) {
    Body out;
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_++];
      if (s.kind == Segment::Text) {
        auto n = std::make_unique<TemplateNode>(TemplateNode::Text);
        n->text = s.s;
        out.push_back(std::move(n));
        continue;
      }
      if (s.kind == Segment::Var) {
        ExprParser p(lex_expr(s.s), s.s);
        auto n = std::make_unique<TemplateNode>(TemplateNode::Output);
        n->expr = p.parse_expr();
        p.expect_end();
        out.push_back(std::move(n));
        continue;
      }
      std::string rest;
      const std::string kw = keyword(s.s, &rest);
      if (std::find(ends.begin(), ends.end(), kw) != ends.end()) {
        *found = kw;
        rest_ = rest;
        return out;
      }
      out.push_back(statement(kw, rest, s.s));
    }
    if (!ends.empty()) terr("missing '{{% {} %}}'", ends.back());
    found->clear();
    return out;
  }

  NodeP statement(const std::string& kw, const std::string& rest, const std::string& src) {
    struct Nest {
      explicit Nest(int& n) : n_(n) {
        if (++n_ > kMaxNesting) terr("blocks nested deeper than {} levels", kMaxNesting);
      }
      ~Nest() { --n_; }
      int& n_;
    } nest(nest_);
    if (kw == "if") {
      auto n = std::make_unique<TemplateNode>(TemplateNode::If);
      std::string cond_src = rest;
      for (;;) {
        ExprP cond;
        if (cond_src.find_first_not_of(kWhitespace) != std::string::npos) {
          ExprParser p(lex_expr(cond_src), cond_src);
          cond = p.parse_expr();
          p.expect_end();
        }
        std::string end;
        Body b = body({"elif", "else", "endif"}, &end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "endif") break;
        if (end == "else") {
          std::string end2;
          Body eb = body({"endif"}, &end2);
          n->branches.emplace_back(nullptr, std::move(eb));
          break;
        }
        cond_src = rest_;  // elif condition
        if (cond_src.find_first_not_of(kWhitespace) == std::string::npos)
          terr("'elif' without a condition");
      }
      if (!n->branches.front().first) terr("'if' without a condition");
      return n;
    }
    if (kw == "for") {
      auto n = std::make_unique<TemplateNode>(TemplateNode::For);
      ExprParser p(lex_expr(rest), src);
      n->targets.push_back(p.name());
      while (p.accept_op(",")) n->targets.push_back(p.name());
      if (!p.accept_name("in")) terr("expected 'in' in '{}'", src);
      n->expr = p.parse_or_expr();
      if (p.accept_name("if")) n->cond = p.parse_or_expr();
      p.accept_name("recursive");
      p.expect_end();
      std::string end;
      n->body = body({"else", "endfor"}, &end);
      if (end == "else") n->else_body = body({"endfor"}, &end);
      return n;
    }
    if (kw == "set") {
      ExprParser p(lex_expr(rest), src);
      std::vector<std::string> target{p.name()};
      if (p.accept_op(".")) target.push_back(p.name());
      if (p.at_end()) {  // {% set x %}...{% endset %}
        auto n = std::make_unique<TemplateNode>(TemplateNode::SetBlock);
        n->targets = target;
        std::string end;
        n->body = body({"endset"}, &end);
        return n;
      }
      p.expect_op("=");
      auto n = std::make_unique<TemplateNode>(TemplateNode::Set);
      n->targets = target;
      n->expr = p.parse_expr();
      p.expect_end();
      return n;
    }
    if (kw == "break" || kw == "continue")
      return std::make_unique<TemplateNode>(kw == "break" ? TemplateNode::Break
                                                          : TemplateNode::Continue);
    if (kw == "generation") {  // transformers' assistant-mask marker: renders its body
      auto n = std::make_unique<TemplateNode>(TemplateNode::Scope);
      std::string end;
      n->body = body({"endgeneration"}, &end);
      return n;
    }
    if (kw == "macro") {  // {% macro name(a, b=default) %}...{% endmacro %}
      auto n = std::make_unique<TemplateNode>(TemplateNode::Macro);
      ExprParser p(lex_expr(rest), src);
      n->text = p.name();
      p.expect_op("(");
      if (!p.accept_op(")")) {
        do {
          const std::string param = p.name();
          if (std::find(n->targets.begin(), n->targets.end(), param) != n->targets.end())
            terr("duplicate parameter '{}' in '{}'", param, src);
          n->targets.push_back(param);
          n->defaults.push_back(p.accept_op("=") ? p.parse_expr() : nullptr);
        } while (p.accept_op(","));
        p.expect_op(")");
      }
      p.expect_end();
      std::string end;
      n->body = body({"endmacro"}, &end);
      return n;
    }
    terr("unsupported tag '{{% {} %}}'", kw);
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  std::string rest_;
  int nest_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) { return TemplateParser(segment(source)).parse(); }

}  // namespace moeflow::jinja
