#pragma once
// The CPU/GPU hybrid's cost-model inputs (experts/hybrid_rule.h), measured on this machine once
// per run: the CPU backend computing real experts of the model (rotating over up to 8 of the
// first MoE layer's, so their weights stream from RAM rather than the CPU's caches) on 1 and 8
// tokens, and the pinned host -> device bandwidth of the link.
#include <string>

#include "backend/device_link.h"
#include "core/thread_pool.h"
#include "experts/expert_view_table.h"
#include "experts/hybrid_rule.h"

namespace moeflow {

HybridCosts measure_hybrid_costs(const ExpertViewTable& host, ThreadPool* pool, DeviceLink& link);

// "CPU expert 1.20 ms (+0.31 ms per further token), host -> device 24.1 GB/s"
std::string describe(const HybridCosts& c);

}  // namespace moeflow
