#include "grammar/matcher.h"

#include <algorithm>

#include <fmt/format.h>

namespace moeflow {

size_t GrammarMatcher::ConfigHash::operator()(const std::vector<uint32_t>& v) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (uint32_t x : v) h = (h ^ x) * 0x100000001B3ull;
  return (size_t)(h ^ (h >> 29));
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g, size_t max_states)
    : g_(std::move(g)), syms_(g_->symbols()), max_states_(max_states) {
  nodes_.push_back({UINT32_MAX, 0});  // id 0: the empty stack
  std::vector<uint32_t> start;
  seen_.clear();
  for (uint32_t a : g_->alternatives(g_->root())) closure(a, 0, start);
  intern(start);  // state 0, even when empty (a grammar that matches nothing)
}

uint32_t GrammarMatcher::node(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t)pos << 32 | parent;
  auto [it, added] = node_ids_.try_emplace(key, (uint32_t)nodes_.size());  // no alloc if known
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

void GrammarMatcher::closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out) {
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    const auto [p, par] = work_.back();
    work_.pop_back();
    const uint64_t key = (uint64_t)p << 32 | par;
    if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) continue;
    seen_.push_back(key);
    const Symbol& s = syms_[p];
    if (s.kind == Symbol::Bytes) {
      out.push_back(node(p, par));
    } else if (s.kind == Symbol::End) {
      if (par == 0)
        out.push_back(0);
      else
        work_.emplace_back(nodes_[par].pos, nodes_[par].parent);
    } else {
      // A reference last in its alternative returns straight to the parent (a tail call): the
      // stack of x* or of a long x{0,k} chain does not grow with the repetitions.
      const uint32_t cont = syms_[p + 1].kind == Symbol::End ? par : node(p + 1, par);
      for (uint32_t a : g_->alternatives(s.arg)) work_.emplace_back(a, cont);
    }
  }
}

GrammarMatcher::State GrammarMatcher::intern(std::vector<uint32_t>& config) {
  std::sort(config.begin(), config.end());
  config.erase(std::unique(config.begin(), config.end()), config.end());
  auto it = config_ids_.find(config);
  if (it != config_ids_.end()) return it->second;
  if (configs_.size() >= max_states_)
    throw GrammarError(fmt::format(
        "grammar: more than {} matcher states (the grammar or the output is too complex)",
        max_states_));
  const State id = (State)configs_.size();
  configs_.push_back(config);
  config_ids_.emplace(config, id);
  trans_.resize(trans_.size() + 256, kUnknown);
  return id;
}

GrammarMatcher::State GrammarMatcher::compute(State s, uint8_t byte) {
  next_.clear();
  seen_.clear();
  for (size_t i = 0; i < configs_[s].size(); ++i) {
    const uint32_t n = configs_[s][i];
    if (n == 0) continue;
    const Node nd = nodes_[n];
    if (g_->byte_set(syms_[nd.pos].arg).has(byte)) closure(nd.pos + 1, nd.parent, next_);
  }
  const State t = next_.empty() ? kDead : intern(next_);
  trans_[(size_t)s * 256 + byte] = t;
  return t;
}

}  // namespace moeflow
