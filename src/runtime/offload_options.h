#pragma once
// The offloading options as typed values: byte sizes are bytes, the expert mode an enum, the
// VRAM cache's source an enum. The CLI edge (cli/offload_flags.h) parses the flags into this
// once; check_offload_options() holds every rule between options that needs no model file, so a
// command refuses a bad combination before it opens anything. Rules that need the model (a
// hobbit mode needs low-precision copies, a trace must match the model's shape) are checked when
// the session is made (runtime/offload_session.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experts/device_transfer.h"
#include "model/moe/precision_mode.h"
#include "runtime/backend_choice.h"

namespace moeflow {

struct OffloadOptions {
  // --expert-cache in bytes; nullopt: auto, decided by auto-fit (runtime/offload_plan.h), which
  // fills in the bytes before make_offload sees the options.
  std::optional<uint64_t> expert_cache;
  double cache_rate = 0;        // fraction of all expert bytes
  std::string policy = "auto";  // an eviction policy's name, or auto (runtime/offload_auto.h)
  // --preset: the paper configuration (trace/presets.h) the policy and predictor were set from,
  // named in the statistics; "" when they were given one by one.
  std::string preset;
  // Routing trace (moeflow trace, or an imported one) whose per-expert counts calibrate the
  // placement policies (static, daop); they refuse to start without one.
  std::string policy_calib;
  bool per_layer = false;
  int io_threads = 0;  // 0: auto (runtime/offload_auto.h)
  std::string prefetch =
      "lookahead";              // none | lookahead | a policy/ predictor (promoe, token, ...)
  std::string predictor_model;  // trained weights (--prefetch promoe)
  int lookahead = 1;            // layers ahead (lookahead and gate predictors)
  bool no_early_preemption = false;
  bool prefetch_always = false;  // also issue prefetches that cannot arrive in time
  // Every prefetch is read before the forward pass goes on (implies prefetch_always): the
  // logical model the simulator's `instant` profile replays (docs/simulator.md).
  bool prefetch_wait = false;
  int prefill_slots = 0;  // DuoServe's prefill pipeline: stream slots (0: off)
  bool buffered_io = false;
  // Lossy modes (all opt-in).
  ExpertMode mode = ExpertMode::Exact;
  std::optional<double> hobbit_t1, hobbit_t2;  // default 0.6 / 0.9 (HOBBIT's Mixtral values)
  std::optional<double> skip_threshold;        // default kDefaultSkipThreshold
  bool precalc = false;                        // DAOP stale-input pre-calculation (lossy)
  // The hobbit modes split the expert budget between the two precisions: the low-precision
  // cache takes one of these out of it, the high-precision cache the rest.
  std::optional<uint64_t> low_cache;  // low-precision cache budget, bytes
  double low_cache_rate = 0;          // ... as a fraction of all low-copy bytes
  std::optional<double> low_share;    // ... as a fraction of the expert budget
  bool no_offload = false;            // every expert resident (the mmap) whatever the memory
  // --mmap: where auto-fit finds that the whole model fits, read the weights from the file's
  // mapping (the page cache: shared with other processes, evictable) instead of a copy in the
  // process's memory with huge pages (GgufFile::read_into_memory; runtime/engine_assembly.cpp).
  bool mmap = false;
  // --no-repack: a model read into memory keeps its GGUF layout instead of the CPU kernels' own
  // for the weights that have one (runtime/cpu_repack.h; the same results either way).
  bool no_repack = false;
  // --repack-offloaded: an offloaded model gets those layouts too: the non-expert weights'
  // copies at load, and every expert as it arrives in its cache slot (experts/slot_rewrite.h;
  // the same results). Off by default: measured no faster offloaded (docs/bigger-than-ram.md,
  // "The CPU's layouts when offloading").
  bool repack_offloaded = false;
  // A device backend (runtime/vram_plan.h): a VRAM expert cache of this size, or of what leaves
  // vram_free of VRAM free; planned as if the device had at most vram_limit.
  std::optional<uint64_t> vram_budget, vram_free, vram_limit;
  std::optional<DeviceSource> expert_source;  // where a VRAM cache copies from; nullopt: auto
  bool cpu_experts = false;  // --cpu-experts auto: the CPU/GPU hybrid (experts/hybrid_rule.h)
  std::optional<uint64_t> mem_limit;  // auto-fit plans for at most this much memory
  // --routing-trace: recorded routing the engine replays instead of its routers' choice
  // (trace/routing_replay.h); several files for a trace logged one layer per file. Empty: the
  // model routes. --routing-request: which of the trace's requests.
  std::vector<std::string> routing_trace;
  int routing_request = 0;

  bool is_auto() const { return !expert_cache; }
  // A budget is given (explicitly or filled in by auto-fit).
  bool enabled() const { return expert_cache.has_value() || cache_rate > 0; }
};

constexpr double kDefaultSkipThreshold = 0.1;
// Share of the expert budget the hobbit modes give the low-precision cache by default
// (measured in docs/lossy-modes.md: the low copies are used on some misses only, so a small
// cache of them holds their working set).
constexpr double kDefaultLowShare = 0.1;

// The first rule between the options that `o` breaks for a forward pass on `backend`, as one
// message naming the options at fault; nullopt when there is none. Needs no file: the CLI
// calls it before it opens the model (a usage error), make_offload again for library callers
// (without a backend: the rules about which backend an option belongs to are then skipped, as
// the engine assembly fills in a device cache's budget itself).
std::optional<std::string> check_offload_options(const OffloadOptions& o,
                                                 std::optional<BackendKind> backend = std::nullopt);
// The expert mode and its thresholds the options ask for (defaults filled in), unchecked.
PrecisionModeConfig mode_config(const OffloadOptions& o);
// Throws moeflow::Error with check_offload_options' message.
void validate(const OffloadOptions& o, std::optional<BackendKind> backend = std::nullopt);

// "3GiB", "1.5G", "512MiB", "800MB", "4096" -> bytes. Throws naming `option`.
uint64_t parse_byte_size(const std::string& text, const std::string& option);
// --expert-source's names: auto (nullopt), ram, file. Throws naming the choices.
std::optional<DeviceSource> parse_expert_source(const std::string& name);
const char* expert_source_name(const std::optional<DeviceSource>& s);

}  // namespace moeflow
