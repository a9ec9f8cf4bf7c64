#pragma once
// The seam between the forward pass and wherever expert weights live. The MoE block asks the
// provider for "expert e of layer l in precision p" and never assumes all experts are resident:
// today ResidentExpertProvider serves them straight from the mmap'ed GGUF; the offloading tier
// (ExpertCache + Prefetcher) implements the same interface over a RAM or VRAM budget.
//
// Call order for one MoE layer (the MoE block protocol, see docs/ARCHITECTURE.md):
//   on_tokens_routed(l, ...)       every token's choice (counts, step length)
//   on_route(l, chosen, precs)     exact experts known: raise them to HIGH, drop stale LOW work
//   residency(l, e, p) for each e  used to reorder: resident -> in flight -> not started
//   acquire(l, e, p) ... release   blocks until the weights are usable; pinned in between
//                                  (or acquire_streamed + await_matrix per matrix)
//   expect(l', experts, p)         predictors name every expert they expect, then
//   prefetch(l', experts, c, p)    queue speculative loads for later layers/tokens
// Every call names (layer, expert, precision): the lossy modes (HOBBIT) ask for low-precision
// copies through the same calls, and a precision left out means Precision::High.
#include <cstdint>
#include <span>

#include "core/ggml_type.h"
#include "core/tensor.h"
#include "gguf/expert_index.h"

namespace moeflow {

class Backend;

enum class Precision : uint8_t { High = 0, Low = 1 };

enum class Residency : uint8_t { Resident = 0, InFlight = 1, NotStarted = 2 };

// Weights of one expert, valid between acquire and release: the gate, up and down matrices in
// the memory space the provider keeps them in. A fused gate_up expert has a gate matrix of
// 2 * n_ff rows (gate rows first) and no up matrix.
struct ExpertView {
  TensorView proj[kNumExpertProj];
  // The expert's bias rows (one float row each, gate/up/down), or empty. Biases are small and
  // stay resident with the layer's other weights: the MoE block fills these in after acquire,
  // providers leave them empty.
  TensorView bias[kNumExpertProj];
  const TensorView& gate() const { return proj[(int)ExpertProj::Gate]; }
  const TensorView& up() const { return proj[(int)ExpertProj::Up]; }
  const TensorView& down() const { return proj[(int)ExpertProj::Down]; }
  bool fused_gate_up() const { return !up(); }
  // Intermediate size (rows of gate, or half of fused gate_up).
  int64_t n_ff() const { return fused_gate_up() ? gate().rows() / 2 : gate().rows(); }
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;

  // Where acquire()'s views point; the forward pass's backend must be able to read it.
  virtual MemSpace memory_space() const { return MemSpace::Host; }
  // The backend that will read the views, told once by the forward context before its first
  // forward. A device backend runs ops after the host issued them, so a provider that reuses
  // the memory of released experts must wait for it (CachedExpertProvider does).
  virtual void attach_backend(Backend& backend) {}

  // Protocol step 1: the router's exact choice for `layer` in the current step (union over the
  // step's tokens, in rank order): experts[i] in precisions[i] (an expert may appear twice,
  // once per precision, in a prefill step). Empty `precisions`: every expert in High.
  virtual void on_route(int layer, std::span<const int> experts,
                        std::span<const Precision> precisions = {}) {}

  // Protocol step 3: where the expert's copy in precision `p` is now.
  virtual Residency residency(int layer, int expert, Precision p = Precision::High) const {
    return Residency::Resident;
  }

  // Protocol step 4: block until usable, pin until release(). Throws moeflow::Error if the
  // weights cannot be produced (I/O error, truncated file).
  virtual ExpertView acquire(int layer, int expert, Precision p = Precision::High) = 0;
  virtual void release(int layer, int expert, Precision p = Precision::High) {}

  // Protocol step 4, streamed: as acquire (pinned until release), but it may return while the
  // expert's matrices are still being read; the caller calls await_matrix(layer, expert, proj,
  // p) before its first op on matrix `proj` (0 gate, 1 up, 2 down), which blocks until that
  // matrix is usable and throws what acquire would. The compute of the matrices that arrived
  // first then runs under the read of the rest. A provider that cannot stream acquires.
  virtual ExpertView acquire_streamed(int layer, int expert, Precision p = Precision::High) {
    return acquire(layer, expert, p);
  }
  virtual void await_matrix(int layer, int expert, int proj, Precision p = Precision::High) {}

  // The expert's weights in host memory that costs no read to touch (the mapped model in RAM),
  // for a host backend to compute it beside a device (DAOP's CPU pre-calculation); valid as
  // long as the provider. False: the provider has no such copy (its slow tier is the file).
  virtual bool host_view(int layer, int expert, ExpertView& out) const { return false; }

  // Protocol step 5: speculative load of the copies in precision `p` (HOBBIT's prefetch of the
  // copy its rule will ask for), lower priority than any on_route() expert.
  virtual void prefetch(int layer, std::span<const int> experts, float confidence = 1.0f,
                        Precision p = Precision::High) {}
  // Before a batch of prefetch() calls, every expert the predictor expects (for a later layer
  // of this token when layer is after the one routed last, else for the next token): no
  // prefetch evicts one of them until its layer has routed, so a batch never evicts what it
  // (or the batch before) predicts ("do no harm", the simulator's rule).
  virtual void expect(int layer, std::span<const int> experts, Precision p = Precision::High) {}

  // Mixed precision (docs/lossy-modes.md): a provider that holds low-precision copies of the
  // experts says so here. One that does not is asked for Precision::High only: the MoE block
  // refuses a lossy mode that needs low copies without them, and no other mode asks for one.
  virtual bool has_low_precision() const { return false; }

  // Step boundary (one decode token or one prefill chunk): the forward pass has run every
  // layer of the step. (No call marks its start: a provider that needs it sees the step's
  // first on_tokens_routed.)
  virtual void end_step() {}

  // A new sequence starts: the forward pass runs at position 0 (before the step's first route).
  virtual void begin_sequence() {}
  // The router's choice for every token of the step at `layer`, just before on_route:
  // n_tokens x top_k experts and gate weights, token-major. Caches count per-token uses here
  // (a placement policy's prefill counts) and learn the step's length.
  virtual void on_tokens_routed(int layer, int n_tokens, int top_k,
                                std::span<const int32_t> experts, std::span<const float> weights) {}
};

}  // namespace moeflow
