#include "toolcall/text_grammar.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/utf8_ranges.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;
using E = Expr;

// The controls other than tab and newline, which no raw value holds.
const CodepointRanges kControls = {{0x00, 0x08}, {0x0B, 0x1F}, {0x7F, 0x7F}};

}  // namespace

Expr text_without(GrammarBuilder& b, std::string_view stop) {
  if (stop.empty()) fail("text_without: an empty stop string");
  for (char c : stop)
    if ((unsigned char)c >= 0x80 || (unsigned char)c < 0x20)
      fail("text_without: the stop string must be printable ASCII");
  std::string base = "text-without-";
  for (char c : stop) base += fmt::format("{:02x}", (unsigned char)c);
  auto name = [&](size_t i) { return fmt::format("{}-{}", base, i); };
  if (b.defined(name(0))) return E::rule(name(0));
  const size_t n = stop.size();
  // Knuth-Morris-Pratt: fail_[i] is the longest proper border of stop[0..i].
  std::vector<size_t> border(n, 0);
  for (size_t i = 1, k = 0; i < n; ++i) {
    while (k > 0 && stop[i] != stop[k]) k = border[k - 1];
    if (stop[i] == stop[k]) ++k;
    border[i] = k;
  }
  auto next = [&](size_t i, char c) {
    for (;;) {
      if (stop[i] == c) return i + 1;
      if (i == 0) return size_t{0};
      i = border[i - 1];
    }
  };
  std::string chars(stop);
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  CodepointRanges excluded = kControls;
  for (char c : chars) excluded.push_back({(uint32_t)c, (uint32_t)c});
  const E other = utf8_class(complement(excluded));
  for (size_t i = 0; i < n; ++i) {
    std::vector<E> alts{E::empty(), E::seq({other, E::rule(name(0))})};
    for (char c : chars) {
      const size_t j = next(i, c);
      if (j < n) alts.push_back(E::seq({E::literal(std::string(1, c)), E::rule(name(j))}));
    }
    b.define(name(i), E::alt(std::move(alts)));
  }
  return E::rule(name(0));
}

Expr raw_string_value(GrammarBuilder& b, const ojson& s, const std::string& path,
                      std::string_view stop) {
  for (auto it = s.begin(); it != s.end(); ++it) {
    static const char* const kKnown[] = {
        "type",    "enum",     "const",    "minLength",  "maxLength", "title",     "description",
        "default", "examples", "$comment", "deprecated", "readOnly",  "writeOnly", "nullable"};
    const std::string& k = it.key();
    if (k.rfind("x-", 0) == 0 ||
        std::find(std::begin(kKnown), std::end(kKnown), k) != std::end(kKnown))
      continue;
    throw SchemaError(fmt::format("{}: '{}' cannot be enforced on a string written as raw text",
                                  path.empty() ? "/" : path, k),
                      k, path);
  }
  if (auto c = s.find("const"); c != s.end() && c->is_string())
    return E::literal(c->get<std::string>());
  if (auto e = s.find("enum"); e != s.end() && e->is_array()) {
    std::vector<E> alts;
    for (const ojson& v : *e)
      if (v.is_string()) alts.push_back(E::literal(v.get<std::string>()));
    if (alts.empty()) throw SchemaError(path + ": an enum without strings", "enum", path);
    return E::alt(std::move(alts));
  }
  if (s.contains("minLength") || s.contains("maxLength")) {
    CodepointRanges excluded = kControls;
    excluded.push_back({'<', '<'});
    for (const char* k : {"minLength", "maxLength"})
      if (s.contains(k) && !s[k].is_number_unsigned())
        throw SchemaError(fmt::format("{}: {} must be a non-negative integer", path, k), k, path);
    const int lo = (int)std::min<uint64_t>(s.value("minLength", uint64_t{0}), 1u << 30);
    const int hi = s.contains("maxLength")
                       ? (int)std::min<uint64_t>(s["maxLength"].get<uint64_t>(), 1u << 30)
                       : -1;
    if (hi >= 0 && hi < lo) throw SchemaError(path + ": maxLength < minLength", "maxLength", path);
    if (lo > GrammarBuilder::kMaxRepeat || hi > GrammarBuilder::kMaxRepeat)
      throw SchemaError(path + ": a length bound over 10000", "maxLength", path);
    return E::repeat(utf8_class(complement(excluded)), lo, hi);
  }
  return text_without(b, stop);
}

}  // namespace moeflow
