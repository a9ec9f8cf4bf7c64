#include "grammar/grammar.h"

#include <functional>

#include <fmt/format.h>

namespace moeflow {

Expr Expr::byte_set(const ByteSet& s) {
  Expr e;
  e.kind = Kind::Bytes;
  e.bytes = s;
  return e;
}

Expr Expr::literal(std::string_view bytes) {
  Expr e;
  for (char c : bytes) e.items.push_back(byte_set(ByteSet::of((uint8_t)c)));
  return e;
}

Expr Expr::rule(std::string name) {
  Expr e;
  e.kind = Kind::Ref;
  e.ref = std::move(name);
  return e;
}

Expr Expr::seq(std::vector<Expr> items) {
  Expr e;
  e.items = std::move(items);
  return e;
}

Expr Expr::alt(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::Alt;
  e.items = std::move(items);
  return e;
}

Expr Expr::repeat(Expr x, int min, int max) {
  Expr e;
  e.kind = Kind::Repeat;
  e.items.push_back(std::move(x));
  e.min = min;
  e.max = max;
  return e;
}

void GrammarBuilder::define(const std::string& name, Expr e) {
  if (defs_.count(name))
    throw GrammarError(fmt::format("grammar: rule '{}' is defined twice", name));
  defs_.emplace(name, std::move(e));
  order_.push_back(name);
}

std::string GrammarBuilder::fresh_name(std::string_view hint) {
  for (;;) {
    std::string n = fmt::format("{}-{}", hint, ++counter_);
    if (!defs_.count(n)) return n;
  }
}

// Lowers expressions into the flat form. Nested alternatives and repetitions become rules of
// their own; x* becomes S ::= x S | "" and x{0,k} a chain O_k ::= x O_(k-1) | "", both with the
// reference last, so the matcher's tail call keeps the stack flat however often x repeats.
class GrammarLowerer {
 public:
  GrammarLowerer(const std::map<std::string, Expr>& defs, Grammar& g) : defs_(defs), g_(g) {}

  void run(const std::vector<std::string>& order, const std::string& root) {
    for (const std::string& n : order) ids_[n] = new_rule(n);
    auto r = ids_.find(root);
    if (r == ids_.end()) throw GrammarError(fmt::format("grammar: no rule '{}' (the root)", root));
    g_.root_ = r->second;
    for (const std::string& n : order) {
      current_ = n;
      set_rule(ids_[n], defs_.at(n));
    }
    check_left_recursion();
  }

 private:
  uint32_t new_rule(const std::string& name) {
    g_.alts_.emplace_back();
    g_.names_.push_back(name);
    return (uint32_t)g_.alts_.size() - 1;
  }

  uint32_t fresh(const char* what) {
    return new_rule(fmt::format("{}-{}{}", current_, what, ++counter_));
  }

  void write_rule(uint32_t id, const std::vector<std::vector<Symbol>>& alts) {
    if (g_.syms_.size() > GrammarBuilder::kMaxSymbols)
      throw GrammarError(fmt::format(
          "grammar: more than {} symbols (repetition counts multiply the grammar's size)",
          GrammarBuilder::kMaxSymbols));
    for (const auto& a : alts) {
      g_.alts_[id].push_back((uint32_t)g_.syms_.size());
      g_.syms_.insert(g_.syms_.end(), a.begin(), a.end());
      g_.syms_.push_back(Symbol{Symbol::End, 0});
    }
  }

  void set_rule(uint32_t id, const Expr& e) {
    std::vector<std::vector<Symbol>> alts;
    if (e.kind == Expr::Kind::Alt) {
      for (const Expr& item : e.items) append(item, alts.emplace_back());
    } else {
      append(e, alts.emplace_back());
    }
    write_rule(id, alts);
  }

  uint32_t set_index(const ByteSet& s) {
    auto [it, added] = set_ids_.try_emplace(s.bits, (uint32_t)g_.sets_.size());
    if (added) g_.sets_.push_back(s);
    return it->second;
  }

  Symbol unit(const Expr& x) {
    if (x.kind == Expr::Kind::Bytes) return {Symbol::Bytes, set_index(x.bytes)};
    if (x.kind == Expr::Kind::Ref) return {Symbol::Rule, ref_id(x.ref)};
    const uint32_t r = fresh("group");
    set_rule(r, x);
    return {Symbol::Rule, r};
  }

  uint32_t ref_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it == ids_.end())
      throw GrammarError(
          fmt::format("grammar: rule '{}' refers to '{}', which is not defined", current_, name));
    return it->second;
  }

  void append(const Expr& e, std::vector<Symbol>& out) {
    switch (e.kind) {
      case Expr::Kind::Bytes:
      case Expr::Kind::Ref: out.push_back(unit(e)); return;
      case Expr::Kind::Seq:
        for (const Expr& item : e.items) append(item, out);
        return;
      case Expr::Kind::Alt: {
        const uint32_t r = fresh("alt");
        set_rule(r, e);
        out.push_back({Symbol::Rule, r});
        return;
      }
      case Expr::Kind::Repeat: append_repeat(e, out); return;
    }
  }

  void append_repeat(const Expr& e, std::vector<Symbol>& out) {
    const int lim = GrammarBuilder::kMaxRepeat;
    if (e.min < 0 || e.min > lim || (e.max != -1 && (e.max < e.min || e.max > lim)))
      throw GrammarError(
          fmt::format("grammar: rule '{}' repeats {{{},{}}}: bounds must be 0 <= min <= max <= {}",
                      current_, e.min, e.max, lim));
    if (e.max == 0) return;
    const Symbol x = unit(e.items[0]);
    for (int i = 0; i < e.min; ++i) out.push_back(x);
    if (e.max == -1) {
      const uint32_t s = fresh("star");
      write_rule(s, {{x, {Symbol::Rule, s}}, {}});
      out.push_back({Symbol::Rule, s});
      return;
    }
    Symbol prev{};
    for (int k = 1; k <= e.max - e.min; ++k) {
      const uint32_t o = fresh("upto");
      std::vector<Symbol> more{x};
      if (k > 1) more.push_back(prev);
      write_rule(o, {more, {}});
      prev = {Symbol::Rule, o};
    }
    if (e.max > e.min) out.push_back(prev);
  }

  // A rule that can reach itself again without consuming a byte (through nullable prefixes) would
  // make the matcher expand forever; such grammars are refused here, naming the rule.
  void check_left_recursion() {
    const size_t n = g_.alts_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (uint32_t a : g_.alts_[r]) {
          size_t p = a;
          while (g_.syms_[p].kind == Symbol::Rule && nullable[g_.syms_[p].arg]) ++p;
          if (g_.syms_[p].kind == Symbol::End) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r)
      for (uint32_t a : g_.alts_[r])
        for (size_t p = a; g_.syms_[p].kind == Symbol::Rule; ++p) {
          left[r].push_back(g_.syms_[p].arg);
          if (!nullable[g_.syms_[p].arg]) break;
        }
    std::vector<char> state(n, 0);  // 0 new, 1 on the path, 2 done
    std::function<void(uint32_t)> visit = [&](uint32_t r) {
      state[r] = 1;
      for (uint32_t s : left[r]) {
        if (state[s] == 1)
          throw GrammarError(fmt::format(
              "grammar: rule '{}' is left-recursive (it can reach itself before any byte)",
              g_.names_[s]));
        if (state[s] == 0) visit(s);
      }
      state[r] = 2;
    };
    for (size_t r = 0; r < n; ++r)
      if (state[r] == 0) visit((uint32_t)r);
  }

  const std::map<std::string, Expr>& defs_;
  Grammar& g_;
  std::map<std::string, uint32_t> ids_;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
  std::string current_;
  int counter_ = 0;
};

std::shared_ptr<const Grammar> GrammarBuilder::build(const std::string& root) const {
  auto g = std::make_shared<Grammar>();
  GrammarLowerer(defs_, *g).run(order_, root);
  return g;
}

}  // namespace moeflow
