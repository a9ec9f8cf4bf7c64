#pragma once
// A GBNF-style text form of grammars (the notation llama.cpp's users know), for `moeflow run
// --grammar FILE` and for writing grammars in tests:
//   root  ::= "{" ws pair ("," ws pair)* "}"     # the start rule is `root`
//   pair  ::= [a-z]+ ":" ws [0-9]{1,3}
//   ws    ::= [ \t\n]*
// Literals "..." and classes [...] / [^...] hold UTF-8 text and escapes (\n \t \r \\ \" \]
// \xHH \uHHHH \UHHHHHHHH); `.` is any character; ( ) group; | separates alternatives; postfix
// * + ? {m} {m,} {m,n} repeat. A rule ends where the next `name ::=` begins; # comments to the
// end of the line.
#include <memory>
#include <string_view>

#include "grammar/grammar.h"

namespace moeflow {

// Throws GrammarError with the line and column of a syntax error, or what build() finds.
std::shared_ptr<const Grammar> parse_gbnf(std::string_view text);

}  // namespace moeflow
