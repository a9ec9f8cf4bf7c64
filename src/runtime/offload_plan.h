#pragma once
// How much of the model stays in RAM, decided once per run before the engine loads:
//   --no-offload                      every expert resident (the mmap), whatever the memory
//   --expert-cache SIZE / --cache-rate an explicit budget (overrides auto-fit)
//   --expert-cache auto (the default) auto-fit (runtime/auto_fit.h) over the machine's free
//                                     memory and its cgroup limit (runtime/memory_facts.h),
//                                     or --mem-limit when that is smaller
// The plan carries the options make_offload builds from (auto-fit's budget filled in) and one
// line saying what was chosen and why, which run / serve / chat / bench print.
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/auto_fit.h"
#include "runtime/memory_facts.h"
#include "runtime/offload_session.h"

namespace moeflow {

class GgufFile;

struct OffloadPlan {
  OffloadOptions options;  // what make_offload gets
  std::string how;         // "auto", "explicit" or "off"
  FitDecision fit;         // fit.reason: the line to print
  ModelMemory memory;      // the byte counts the decision used
  // The model was read into the process's memory (a model that fits, no --mmap:
  // runtime/engine_assembly.cpp), not read from the file's mapping.
  bool read_into_memory = false;
  // Bytes of those weights rewritten into the CPU kernels' own layouts (runtime/cpu_repack.h).
  uint64_t repacked_bytes = 0;
  bool offload() const { return options.enabled(); }
};

// Throws moeflow::Error for contradicting options (--no-offload with a budget, a bad
// --mem-limit) and when auto-fit finds no budget that fits.
OffloadPlan plan_offload(const OffloadOptions& o, const GgufFile& file, const FitContext& ctx,
                         const MemoryFacts& facts);

// The plan and this process's resident set now (VmRSS, VmHWM) as JSON, for --stats json.
nlohmann::json memory_json(const OffloadPlan& plan);

}  // namespace moeflow
