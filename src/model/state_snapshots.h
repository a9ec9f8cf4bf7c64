#pragma once
// Snapshots of a sequence's recurrent state (model/recurrent_state.h) at chosen positions: the
// one way a model with gated DeltaNet layers can go back to an earlier position. The KV cache
// rows before a position never change, so restoring the recurrent state copied there and
// truncating the cache to it is the exact state of that prefix, and recomputing from there
// gives the bits of a cold run (the prefix cache's divergence inside a previous reply,
// runtime/prefix_cache.h). At most `limit` snapshots are kept, each as large as the state; when
// all are taken the one of the lowest position goes. Their memory is allocated on first use and
// then reused (planned up front: Model::recurrent_state_bytes() x limit). ForwardContext gives
// them host memory whatever the backend: on a GPU the 8 default snapshots of a real qwen3next
// (~75 MiB each) would take ~600 MiB of VRAM from the expert cache, for a copy made once per
// prompt (a few ms over PCIe).
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/allocator.h"
#include "model/layer_spec.h"
#include "model/recurrent_state.h"

namespace moeflow {

class StateSnapshots {
 public:
  StateSnapshots() = default;
  // `specs` and `alloc` must outlive the snapshots.
  StateSnapshots(const std::vector<LayerSpec>& specs, Allocator& alloc, int limit);

  int limit() const { return limit_; }
  // Copies `state`, the state after `pos` tokens, through `be`; replaces a snapshot of the same
  // position, and the lowest position's when `limit` are kept. Nothing with limit 0.
  void take(const RecurrentState& state, int64_t pos, Backend& be);
  // The highest position <= p with a snapshot, or -1.
  int64_t latest_at_or_before(int64_t p) const;
  // Copies the snapshot of position `pos` (which must exist) into `state`.
  void restore(int64_t pos, RecurrentState& state, Backend& be) const;
  // Forgets the snapshots of positions > p (the tokens after p are about to change).
  void drop_after(int64_t p);
  void clear() { drop_after(-1); }
  // Positions with a snapshot, ascending.
  std::vector<int64_t> positions() const;

 private:
  struct Snapshot {
    int64_t pos = -1;  // -1: free (its memory kept for the next take)
    RecurrentState state;
  };
  const std::vector<LayerSpec>* specs_ = nullptr;
  Allocator* alloc_ = nullptr;
  int limit_ = 0;
  std::vector<Snapshot> slots_;
};

}  // namespace moeflow
