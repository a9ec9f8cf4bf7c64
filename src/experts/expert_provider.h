#pragma once
// The seam between the forward pass and wherever expert weights live. The MoE block asks the
// provider for "expert e of layer l in precision p" and never assumes all experts are resident:
// today ResidentExpertProvider serves them straight from the mmap'ed GGUF; the offloading tier
// (ExpertCache + Prefetcher) implements the same interface over a RAM or VRAM budget.
//
// Call order for one MoE layer (the MoE block protocol, see docs/ARCHITECTURE.md):
//   on_route(l, chosen)            exact experts known: raise them to HIGH, drop stale LOW work
//   residency(l, e) for each e     used to reorder: resident -> in flight -> not started
//   acquire(l, e, p) ... release   blocks until the weights are usable; pinned in between
//   prefetch(l', experts, ...)     predictors queue speculative loads for later layers/tokens
// In the lossy modes (HOBBIT) the block asks for (layer, expert, precision) through the
// *_mixed variants; the plain calls mean Precision::High.
#include <cstdint>
#include <span>

#include "gguf/expert_index.h"
#include "quant/ggml_type.h"

namespace moeflow {

enum class Precision : uint8_t { High = 0, Low = 1 };

enum class Residency : uint8_t { Resident = 0, InFlight = 1, NotStarted = 2 };

// Weights of one expert, valid between acquire and release.
struct ExpertView {
  const uint8_t* data[kNumExpertProj] = {nullptr, nullptr, nullptr};  // gate, up, down
  GgmlType type[kNumExpertProj] = {GgmlType::F32, GgmlType::F32, GgmlType::F32};
  int64_t rows[kNumExpertProj] = {0, 0, 0};
  int64_t cols[kNumExpertProj] = {0, 0, 0};
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;

  // Protocol step 1: the router's exact choice for `layer` in the current step (union over the
  // step's tokens, in rank order).
  virtual void on_route(int layer, std::span<const int> experts) {}

  // Protocol step 3: where the expert is now.
  virtual Residency residency(int layer, int expert) const { return Residency::Resident; }

  // Protocol step 4: block until usable, pin until release(). Throws moeflow::Error if the
  // weights cannot be produced (I/O error, truncated file).
  virtual ExpertView acquire(int layer, int expert, Precision p = Precision::High) = 0;
  virtual void release(int layer, int expert, Precision p = Precision::High) {}

  // Protocol step 5: speculative load, lower priority than any on_route() expert.
  virtual void prefetch(int layer, std::span<const int> experts, float confidence = 1.0f) {}

  // Mixed precision (docs/lossy-modes.md). A provider that holds low-precision copies of the
  // experts says so here and overrides the *_mixed calls; the defaults serve providers with
  // one precision, which the lossless mode is all that ever asks for.
  virtual bool has_low_precision() const { return false; }
  // Protocol step 1 when some experts are wanted in low precision: experts[i] in
  // precisions[i] (an expert may appear twice, once per precision, in a prefill step).
  virtual void on_route_mixed(int layer, std::span<const int> experts,
                              std::span<const Precision> precisions) {
    on_route(layer, experts);
  }
  virtual Residency residency_mixed(int layer, int expert, Precision p) const {
    return residency(layer, expert);
  }
  // Precision-aware speculative load (HOBBIT's prefetch of the copy the rule will ask for).
  virtual void prefetch_mixed(int layer, std::span<const int> experts, float confidence,
                              Precision p) {
    if (p == Precision::High) prefetch(layer, experts, confidence);
  }

  // Step boundaries (one decode token or one prefill chunk).
  virtual void begin_step() {}
  virtual void end_step() {}
};

}  // namespace moeflow
