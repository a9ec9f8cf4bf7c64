#pragma once
// Automatic fit (`--expert-cache auto`, the default): decides from what the machine lets this
// process use (runtime/memory_facts.h) and what the model needs whether every expert can stay
// resident (the mmap, as before) or expert offloading must be on, and with which budget.
//
// The rule (docs/bigger-than-ram.md):
//   fixed  = non-expert weights + KV cache for the context + recurrent state (and its snapshots)
//            + activations for the batch, less a
//            token embedding the output head does not share: it is read a row per token where
//            it lies in the file (backend/cpu adopt_lookup_table), never held whole
//   margin = 64 MiB + available / 16 (the runtime's own heap, code and thread stacks, and room
//            for the rest of the machine to breathe)
//   fixed + all experts + margin <= available  ->  all resident
//   otherwise budget = available - fixed - margin; below the smallest budget moeflow runs with
//   (one layer's top-k experts per cache partition) the run is refused with a message naming
//   every term.
// The decision is a pure function of those byte counts, tested on synthetic inputs.
#include <cstdint>
#include <string>

namespace moeflow {

class GgufFile;

// What one run of a model needs besides the expert budget.
struct ModelMemory {
  uint64_t non_expert_bytes = 0;  // every weight but the routed experts
  // Of non_expert_bytes: the token embedding when the output head has a tensor of its own. The
  // CPU tier leaves it in the file's mapping (a token reads one row), so it takes no RAM of
  // the plan; a GPU keeps it in VRAM like every other weight.
  uint64_t table_bytes = 0;
  uint64_t expert_bytes = 0;  // all routed experts
  uint64_t kv_bytes = 0;  // KV cache for n_ctx (each layer's own rows; none for DeltaNet layers)
  // The recurrent state of gated DeltaNet layers, in the backend's memory (VRAM on a GPU)
  uint64_t state_bytes = 0;
  // Its snapshots (FitContext::state_snapshots), always in host memory (model/state_snapshots.h)
  uint64_t snapshot_bytes = 0;
  uint64_t scratch_bytes = 0;  // activations for the batch (estimate)
  uint64_t min_budget = 0;     // smallest expert budget the cache accepts
  int64_t n_ctx = 0;
  int top_k = 0;
  // What the computing backend's memory holds besides the experts (VRAM on a GPU).
  uint64_t fixed() const { return non_expert_bytes + kv_bytes + state_bytes + scratch_bytes; }
  // What host memory holds besides the experts when the CPU computes: the same, less the
  // embedding left in the mapping, plus the snapshots.
  uint64_t fixed_host() const { return fixed() - table_bytes + snapshot_bytes; }
};

struct FitDecision {
  bool offload = false;
  uint64_t budget = 0;  // expert budget when offload
  uint64_t available = 0, margin = 0;
  std::string source;  // where `available` came from
  std::string reason;  // one line: what was chosen and why
};

// 64 MiB + available / 16.
uint64_t fit_margin(uint64_t available);
// " + recurrent state SIZE" for a model that has one, else "" (the plans' accounts); with
// snapshots " + recurrent state SIZE (N snapshots SIZE in host memory)" when `snapshots_apart`
// (the VRAM plan, whose device does not hold them), else the sum of both.
std::string state_term(const ModelMemory& m, bool snapshots_apart = false);

// The decision. available == 0 means unknown (no /proc/meminfo): everything stays resident, as
// before auto-fit. Throws moeflow::Error with the whole account when even min_budget does not fit.
FitDecision auto_fit(const ModelMemory& m, uint64_t available, const std::string& source);

// The run the memory is planned for.
struct FitContext {
  int64_t n_ctx = 0;  // resolved context size (see resolve_n_ctx in engine.h)
  int batch = 256;    // prefill chunk
  int threads = 1;
  int logits_rows = 1;      // rows of logits one forward keeps (batch for perplexity)
  bool per_layer = false;   // --cache-per-layer: every MoE layer needs its own top-k slots
  int state_snapshots = 0;  // recurrent state snapshots kept (EngineOptions::state_snapshots)
};

// Byte counts of `file` for a run in `ctx`.
ModelMemory model_memory(const GgufFile& file, const FitContext& ctx);

}  // namespace moeflow
