#include "model/state_snapshots.h"

#include <algorithm>

#include "core/error.h"

namespace moeflow {

StateSnapshots::StateSnapshots(const std::vector<LayerSpec>& specs, Allocator& alloc, int limit)
    : specs_(&specs), alloc_(&alloc), limit_(std::max(0, limit)) {}

void StateSnapshots::take(const RecurrentState& state, int64_t pos, Backend& be) {
  if (limit_ == 0 || state.empty()) return;
  Snapshot* slot = nullptr;
  for (Snapshot& s : slots_)
    if (s.pos == pos) slot = &s;  // the same prefix again (a rewind dropped the ones after it)
  if (!slot)
    for (Snapshot& s : slots_)
      if (s.pos < 0) slot = &s;
  if (!slot && (int)slots_.size() < limit_) {
    slots_.push_back({-1, RecurrentState(*specs_, *alloc_)});
    slot = &slots_.back();
  }
  if (!slot)  // all taken: the lowest position is the least likely to be the one needed
    slot = &*std::min_element(slots_.begin(), slots_.end(),
                              [](const Snapshot& a, const Snapshot& b) { return a.pos < b.pos; });
  slot->state.copy_from(state, be);
  slot->pos = pos;
}

int64_t StateSnapshots::latest_at_or_before(int64_t p) const {
  int64_t best = -1;
  for (const Snapshot& s : slots_)
    if (s.pos >= 0 && s.pos <= p) best = std::max(best, s.pos);
  return best;
}

void StateSnapshots::restore(int64_t pos, RecurrentState& state, Backend& be) const {
  for (const Snapshot& s : slots_)
    if (s.pos == pos && pos >= 0) {
      state.copy_from(s.state, be);
      return;
    }
  fail("state snapshots: none at position {}", pos);
}

void StateSnapshots::drop_after(int64_t p) {
  for (Snapshot& s : slots_)
    if (s.pos > p) s.pos = -1;
}

std::vector<int64_t> StateSnapshots::positions() const {
  std::vector<int64_t> out;
  for (const Snapshot& s : slots_)
    if (s.pos >= 0) out.push_back(s.pos);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace moeflow
