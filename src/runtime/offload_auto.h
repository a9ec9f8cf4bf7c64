#pragma once
// The offloading settings `auto` resolves to once the budget and the model's expert sizes are
// known (docs/bigger-than-ram.md has the measurements behind each rule):
//   --cache-policy auto  -> lfu, one partition per MoE layer when every layer gets at least its
//                           top-k slots, else lfu-cycle over one global budget (LFU that keeps
//                           the experts of the layers about to run: a decode step visits the
//                           layers in a cycle). On the recorded routing of the benchmark models
//                           and of the real Mixtral and Qwen1.5 traces the simulator ranks them
//                           at or above every other live policy with fixed weights, for their
//                           partitioning; global LRU comes last (it evicts exactly the layer
//                           that comes back next).
//   --io-threads auto    -> enough pread workers to keep ~8 MiB of reads in flight (2..16):
//                           O_DIRECT requests of 4 MiB reach the disk's bandwidth at depth 1-2,
//                           1 MiB requests need depth 8 (pack --measure --sweep); io_uring read
//                           no faster than as many pread threads.
#include <cstdint>
#include <string>

namespace moeflow {

class ExpertStore;

struct AutoPolicy {
  std::string policy;
  bool per_layer = false;
};

// `policy` as given ("auto" resolved), `per_layer` as given (auto may turn it on; never with
// moe_layers == 0).
AutoPolicy resolve_auto_policy(const std::string& policy, bool per_layer, uint64_t budget_bytes,
                               uint64_t slot_bytes, int top_k, int moe_layers);

// `io_threads` as given (<= 0: auto from the store's mean chunk size).
int resolve_io_threads(int io_threads, const ExpertStore& store);

}  // namespace moeflow
