#pragma once
#include <memory>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace moeflow::test {

// The whole of `s` is a sentence of g.
inline bool matches(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  const GrammarMatcher::State st = m.walk(m.start(), s);
  return st != GrammarMatcher::kDead && m.accepting(st);
}

// `s` can be continued into a sentence of g (or is one).
inline bool is_prefix(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  return m.walk(m.start(), s) != GrammarMatcher::kDead;
}

}  // namespace moeflow::test
