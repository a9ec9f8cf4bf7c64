#pragma once
// CUDA graphs for the decode step. The MoE block protocol decides on the host in the middle of
// every layer (the router's choice goes to the planner, which orders the experts), so a whole
// decode step cannot be one graph. What can: each stretch of work between two host decisions
// (from one layer's route to the next layer's router logits: the experts' FFNs, the combine,
// the residual, the norms, the whole attention block, the router product). The backend starts
// a capture at the first op of such a stretch and ends it at the next synchronising call
// (route, read_f32, a copy to the host, synchronize), or before memory is allocated or freed.
// The captured graph replaces the previous one of the same shape (key: the ops and their
// shapes) through cudaGraphExecUpdate, which takes the new pointers and positions, or is
// instantiated when no graph of that shape exists yet; then it is launched.
#include <cstdint>
#include <unordered_map>

#include <cuda_runtime_api.h>

namespace moeflow::cuda {

struct GraphStats {
  uint64_t launches = 0;        // segments launched as graphs
  uint64_t instantiations = 0;  // new executable graphs
  uint64_t updates = 0;         // executable graphs reused with new parameters
  uint64_t ops = 0;             // ops captured
};

class GraphSegments {
 public:
  GraphSegments(cudaStream_t stream, bool enabled) : stream_(stream), enabled_(enabled) {}
  ~GraphSegments();
  GraphSegments(const GraphSegments&) = delete;
  GraphSegments& operator=(const GraphSegments&) = delete;

  bool enabled() const { return enabled_; }
  bool capturing() const { return capturing_; }
  // Before an op is issued: `capturable` ops join (or start) the capture; any other op ends it
  // first. `key` describes the op and its shapes.
  void before_op(bool capturable, uint64_t key);
  // Ends the capture (if any) and launches it.
  void end();
  // Drops a capture that failed half way (the ops in it are not run).
  void abort();
  const GraphStats& stats() const { return stats_; }

 private:
  cudaStream_t stream_;
  bool enabled_;
  bool capturing_ = false;
  uint64_t key_ = 0;
  std::unordered_map<uint64_t, cudaGraphExec_t> execs_;
  GraphStats stats_;
};

// Order-dependent mix of op descriptions into a segment key.
inline uint64_t mix_key(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace moeflow::cuda
