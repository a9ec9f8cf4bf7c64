#include "runtime/vram_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/memory_facts.h"
#include "runtime/offload_session.h"

namespace moeflow {

VramPlan plan_vram(const OffloadOptions& o, const ModelMemory& m, uint64_t free_vram,
                   uint64_t total_vram, uint64_t host_available) {
  validate(o, BackendKind::Cuda);
  if (o.vram_limit) {
    free_vram = std::min(free_vram, *o.vram_limit);
    total_vram = std::min(total_vram, *o.vram_limit);
  }
  VramPlan p;
  p.free_vram = free_vram;
  p.total_vram = total_vram;
  const uint64_t fixed = m.fixed();
  const std::string rest =
      fmt::format("non-expert weights {} + KV cache {} (-c {}){} + activations {}",
                  format_bytes(m.non_expert_bytes), format_bytes(m.kv_bytes), m.n_ctx,
                  state_term(m, true), format_bytes(m.scratch_bytes));
  const std::string vram =
      fmt::format("{} of {} VRAM free{}", format_bytes(free_vram), format_bytes(total_vram),
                  o.vram_limit ? " (--vram-limit)" : "");
  if (o.vram_budget) {
    p.cache = true;
    p.budget = *o.vram_budget;
    p.reason = fmt::format("VRAM expert cache {} (--vram-budget) for {} of experts; {}",
                           format_bytes(p.budget), format_bytes(m.expert_bytes), vram);
  } else {
    p.reserve = o.vram_free ? *o.vram_free : kVramReserve + total_vram / 20;
    const uint64_t room = free_vram > fixed + p.reserve ? free_vram - fixed - p.reserve : 0;
    if (!o.vram_free && m.expert_bytes <= room) {
      p.reason = fmt::format("every expert in VRAM ({} + experts {} + reserve {} fit {})", rest,
                             format_bytes(m.expert_bytes), format_bytes(p.reserve), vram);
      return p;
    }
    p.cache = true;
    p.budget = std::min(room, m.expert_bytes);
    p.reason =
        fmt::format("VRAM expert cache {} of {} of experts ({}: {} - {} - {} left free{})",
                    format_bytes(p.budget), format_bytes(m.expert_bytes),
                    o.vram_free ? "--vram-free" : "auto", vram, rest, format_bytes(p.reserve),
                    o.vram_free ? "" : "; --vram-budget or --vram-free override");
  }
  if (p.budget < m.min_budget)
    fail(
        "the VRAM expert cache would get {}, less than one layer's top-{} experts ({}): {}; {}. "
        "Free VRAM, lower -c, or give a larger --vram-budget / smaller --vram-free",
        format_bytes(p.budget), m.top_k, format_bytes(m.min_budget), vram, rest);
  // The mapped file is the better slow tier when host memory can hold (and lock) the experts,
  // beside the state snapshots kept there.
  const bool host_fits =
      host_available == 0 ||
      m.expert_bytes + m.snapshot_bytes + fit_margin(host_available) <= host_available;
  if (o.expert_source == DeviceSource::File || (!o.expert_source && !host_fits))
    p.source = DeviceSource::File;
  p.reason +=
      p.source == DeviceSource::Ram
          ? "; experts copied from the mapped file in RAM"
          : fmt::format("; experts read from the file (O_DIRECT -> pinned staging -> VRAM){}",
                        o.expert_source ? "" : ": host memory cannot hold them");
  return p;
}

}  // namespace moeflow
