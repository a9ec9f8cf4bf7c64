#pragma once
// The CPU/GPU hybrid, decided per expert (Fiddler, DAOP, llama.cpp's --n-cpu-moe made dynamic):
// an expert that is not in VRAM when its layer runs is either waited for — its copy over the bus
// — or computed by the CPU from host RAM on the tokens routed to it, whichever the cost model
// says is done first. Its inputs are measured once per run (runtime/hybrid_costs.h): how long
// the CPU takes for one expert on one token and for each further token, and the pinned
// host -> device bandwidth.
#include <cstdint>

namespace moeflow {

struct HybridCosts {
  double cpu_expert_s = 0;     // one expert, one token, on the CPU (weights read from RAM)
  double cpu_token_s = 0;      // each further token routed to the same expert
  double h2d_bytes_per_s = 0;  // pinned host -> device
  bool valid() const { return cpu_expert_s > 0 && h2d_bytes_per_s > 0; }
};

// The CPU's time for an expert on n_tokens tokens.
double cpu_expert_seconds(const HybridCosts& c, int n_tokens);
// True when the CPU is done with the expert on n_tokens tokens before `bytes_left` (the rest
// of its copy and the copies queued ahead of it) have crossed the bus.
bool prefer_cpu(const HybridCosts& c, int n_tokens, uint64_t bytes_left);

}  // namespace moeflow
