#pragma once
// Internal to src/chat_template/: the two lexing steps of a template. segment() cuts the
// template text into text, {{ expression }} and {% statement %} pieces, applying Jinja's
// whitespace control as transformers configures it (trim_blocks, lstrip_blocks, "-"/"+"
// markers, the final newline dropped, comments removed); lex_expr() cuts the text of one
// expression into tokens.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::jinja {

struct Segment {
  enum Kind { Text, Var, Block } kind;
  std::string s;
};

std::vector<Segment> segment(const std::string& src);

enum class TT { Name, String, Int, Float, Op, End };
struct Token {
  TT type;
  std::string s;
  int64_t i = 0;
  double f = 0;
};

// Ends with one TT::End token.
std::vector<Token> lex_expr(std::string_view src);

}  // namespace moeflow::jinja
