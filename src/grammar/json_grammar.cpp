#include "grammar/json_grammar.h"

#include "grammar/utf8_ranges.h"

namespace moeflow {

void add_json_rules(GrammarBuilder& b) {
  if (b.defined("json-value")) return;
  using E = Expr;
  auto lit = [](const char* s) { return E::literal(s); };
  auto ref = [](const char* s) { return E::rule(s); };
  auto bytes = [](const char* s) {
    ByteSet set;
    for (const char* p = s; *p; ++p) set.add((uint8_t)*p);
    return E::byte_set(set);
  };
  const E digit = E::byte_set(ByteSet::range('0', '9'));
  // One space or tab, or a line break and its indentation: what compact and pretty-printed JSON
  // write, without letting a model pad every gap with whitespace.
  b.define(
      "json-ws",
      E::optional(E::alt({bytes(" \t"), E::seq({lit("\n"), E::repeat(bytes(" \t"), 0, kMaxWs)})})));
  // A character of a string: anything but '"', '\' and the controls, or an escape. A \u escape
  // is a code point outside the surrogates, or a high surrogate and then a low one: a lone
  // surrogate is not a character (RFC 8259 allows it; nlohmann and strict parsers refuse it).
  const E hex = bytes("0123456789abcdefABCDEF");
  const E d = bytes("dD");
  b.define(
      "json-unicode-escape",
      E::alt({E::seq({bytes("0123456789abcefABCEF"), hex, hex, hex}),
              E::seq({d, bytes("01234567"), hex, hex}),
              E::seq({d, bytes("89abAB"), hex, hex, lit("\\u"), d, bytes("cdefCDEF"), hex, hex})}));
  b.define("json-char",
           E::alt({utf8_class({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}),
                   E::seq({lit("\\"), E::alt({bytes("\"\\/bfnrt"),
                                              E::seq({lit("u"), ref("json-unicode-escape")})})})}));
  b.define("json-string", E::seq({lit("\""), E::repeat(ref("json-char"), 0, -1), lit("\"")}));
  b.define("json-integer", E::seq({E::optional(lit("-")),
                                   E::alt({lit("0"), E::seq({E::byte_set(ByteSet::range('1', '9')),
                                                             E::repeat(digit, 0, 15)})})}));
  b.define("json-number",
           E::seq({ref("json-integer"), E::optional(E::seq({lit("."), E::repeat(digit, 1, 16)})),
                   E::optional(
                       E::seq({bytes("eE"), E::optional(bytes("+-")), E::repeat(digit, 1, 2)}))}));
  // Values are followed by json-ws where they sit inside an object or array, not here.
  b.define("json-value", E::alt({ref("json-object"), ref("json-array"), ref("json-string"),
                                 ref("json-number"), lit("true"), lit("false"), lit("null")}));
  b.define("json-member", E::seq({ref("json-string"), ref("json-ws"), lit(":"), ref("json-ws"),
                                  ref("json-value"), ref("json-ws")}));
  b.define("json-object",
           E::seq({lit("{"), ref("json-ws"),
                   E::optional(E::seq(
                       {ref("json-member"),
                        E::repeat(E::seq({lit(","), ref("json-ws"), ref("json-member")}), 0, -1)})),
                   lit("}")}));
  b.define("json-element", E::seq({ref("json-value"), ref("json-ws")}));
  b.define(
      "json-array",
      E::seq({lit("["), ref("json-ws"),
              E::optional(E::seq(
                  {ref("json-element"),
                   E::repeat(E::seq({lit(","), ref("json-ws"), ref("json-element")}), 0, -1)})),
              lit("]")}));
}

std::shared_ptr<const Grammar> json_object_grammar() {
  GrammarBuilder b;
  add_json_rules(b);
  b.define("root", Expr::seq({Expr::rule("json-ws"), Expr::rule("json-object")}));
  return b.build("root");
}

}  // namespace moeflow
