#pragma once
// Importers for the real routing traces in shared/data/traces (see its README and
// docs/traces.md for how each source maps onto the trace model).
#include <string>
#include <vector>

#include "trace/trace.h"

namespace moeflow::trace {

// speculative-moe JSONL (Mixtral-8x7B): rows {"problem_id","layer","experts","gating_probs"} with
// either "token_idx" (decode step; humaneval_*_routing.jsonl) or "token_pos" (routing_raw.jsonl:
// prefill positions 0..N-1, then decode rows carrying token_pos 0, in file order per layer).
// One request per problem_id. n_experts defaults to the largest id seen + 1 unless given.
Trace import_speculative_moe(const std::string& path, int n_layers = 0, int n_experts = 0);

// vLLM-MoE-Logger JSONL (Qwen1.5-MoE), one file per logged layer. Rows {"type":"route",
// "token_idx","layer","topk_ids","topk_weights"} grouped into forward batches (token_idx restarts
// at 0). Leading warm-up batches (every row the same ids) are dropped; batches before the first
// run of equal-sized batches are prefill, the rest decode, with batch slot i taken as request i.
Trace import_vllm_logger(const std::vector<std::string>& layer_files, int n_layers = 0,
                         int n_experts = 0);

// Picks the importer from the file contents (binary trace, speculative-moe, vLLM logger).
Trace load_any(const std::vector<std::string>& paths);

}  // namespace moeflow::trace
