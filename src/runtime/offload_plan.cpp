#include "runtime/offload_plan.h"

#include <fmt/format.h>

#include "core/error.h"

namespace moeflow {

OffloadPlan plan_offload(const OffloadOptions& o, const GgufFile& file, const FitContext& ctx,
                         const MemoryFacts& facts) {
  OffloadPlan p;
  p.options = o;
  validate(o, BackendKind::Cpu);
  const bool explicit_budget = o.enabled();
  p.memory = model_memory(file, ctx);
  if (o.no_offload) {
    p.how = "off";
    p.fit.reason = "all experts resident (--no-offload)";
    return p;
  }
  if (explicit_budget) {
    p.how = "explicit";
    p.fit.offload = true;
    p.fit.budget = resolve_budget(o, p.memory.expert_bytes);
    p.fit.reason = fmt::format("expert offloading on, budget {} of {} of experts ({})",
                               format_bytes(p.fit.budget), format_bytes(p.memory.expert_bytes),
                               o.is_auto() ? "--cache-rate" : "--expert-cache");
    return p;
  }
  p.how = "auto";
  uint64_t available = facts.available();
  std::string source = facts.source();
  if (o.mem_limit) {
    const uint64_t limit = *o.mem_limit;
    if (available == 0 || limit < available) {
      available = limit;
      source = "--mem-limit";
    }
  }
  if (p.memory.expert_bytes == 0) {
    p.fit.available = available;
    p.fit.source = source;
    p.fit.reason = "all weights resident (auto: the model has no routed experts to offload)";
    return p;
  }
  p.fit = auto_fit(p.memory, available, source);
  if (p.fit.offload) {
    p.options.expert_cache = p.fit.budget;
    p.options.mem_limit.reset();  // spent on this budget; an explicit budget takes no limit
  }
  return p;
}

nlohmann::json memory_json(const OffloadPlan& plan) {
  const ProcessMemory pm = read_process_memory();
  const ModelMemory& m = plan.memory;
  return {{"plan", plan.how},
          {"offload", plan.offload()},
          {"reason", plan.fit.reason},
          {"weights_read_into_memory", plan.read_into_memory},
          {"weights_repacked_bytes", plan.repacked_bytes},
          {"available_bytes", plan.fit.available},
          {"available_source", plan.fit.source},
          {"margin_bytes", plan.fit.margin},
          {"budget_bytes", plan.fit.budget},
          {"non_expert_bytes", m.non_expert_bytes},
          {"table_bytes", m.table_bytes},
          {"expert_bytes", m.expert_bytes},
          {"kv_bytes", m.kv_bytes},
          {"state_bytes", m.state_bytes},
          {"snapshot_bytes", m.snapshot_bytes},
          {"scratch_bytes", m.scratch_bytes},
          {"n_ctx", m.n_ctx},
          {"vm_rss_bytes", pm.vm_rss},
          {"vm_hwm_bytes", pm.vm_hwm},
          {"rss_anon_bytes", pm.rss_anon},
          {"rss_file_bytes", pm.rss_file}};
}

}  // namespace moeflow
