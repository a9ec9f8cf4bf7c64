#include "runtime/auto_fit.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "experts/expert_store.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"
#include "model/hparams.h"
#include "model/model.h"
#include "runtime/memory_facts.h"

namespace moeflow {

uint64_t fit_margin(uint64_t available) { return (64ull << 20) + available / 16; }

std::string state_term(const ModelMemory& m, bool snapshots_apart) {
  if (m.state_bytes == 0) return "";
  if (m.snapshot_bytes == 0)
    return fmt::format(" + recurrent state {}", format_bytes(m.state_bytes));
  const uint64_t n = m.snapshot_bytes / m.state_bytes;
  if (snapshots_apart)
    return fmt::format(" + recurrent state {} ({} snapshot{} {} in host memory)",
                       format_bytes(m.state_bytes), n, n == 1 ? "" : "s",
                       format_bytes(m.snapshot_bytes));
  return fmt::format(" + recurrent state and {} snapshot{} {}", n, n == 1 ? "" : "s",
                     format_bytes(m.state_bytes + m.snapshot_bytes));
}

FitDecision auto_fit(const ModelMemory& m, uint64_t available, const std::string& source) {
  FitDecision d;
  d.available = available;
  d.source = source;
  const uint64_t all = m.fixed_host() + m.expert_bytes;
  if (available == 0) {
    d.reason = fmt::format(
        "all experts resident (auto: the free memory is unknown here; the model "
        "needs {})",
        format_bytes(all));
    return d;
  }
  d.margin = fit_margin(available);
  const std::string table =
      m.table_bytes == 0
          ? std::string()
          : fmt::format(" (token embedding {} read from the file)", format_bytes(m.table_bytes));
  const std::string parts =
      fmt::format("non-expert weights {}{} + KV cache {} (-c {}){} + activations {}",
                  format_bytes(m.non_expert_bytes - m.table_bytes), table, format_bytes(m.kv_bytes),
                  m.n_ctx, state_term(m), format_bytes(m.scratch_bytes));
  if (all + d.margin <= available) {
    d.reason = fmt::format(
        "all experts resident (auto: the model needs {} ({} + experts {}) + "
        "margin {}; {} available, {})",
        format_bytes(all), parts, format_bytes(m.expert_bytes), format_bytes(d.margin),
        format_bytes(available), source);
    return d;
  }
  const uint64_t reserved = m.fixed_host() + d.margin;
  const uint64_t budget = available > reserved ? available - reserved : 0;
  if (budget < m.min_budget)
    fail(
        "the model does not fit in memory: {} available ({}), but running it with expert "
        "offloading needs at least {}: {} + the smallest expert budget {} (top-{} experts of a "
        "layer) + margin {}. Free memory, lower -c, or give --expert-cache SIZE to try anyway",
        format_bytes(available), source, format_bytes(reserved + m.min_budget), parts,
        format_bytes(m.min_budget), m.top_k, format_bytes(d.margin));
  d.offload = true;
  d.budget = budget;
  d.reason = fmt::format(
      "expert offloading on, budget {} of {} of experts (auto: {} available, {}; "
      "all resident would need {} ({} + experts) + margin {}; "
      "--expert-cache SIZE or --no-offload override)",
      format_bytes(budget), format_bytes(m.expert_bytes), format_bytes(available), source,
      format_bytes(all), parts, format_bytes(d.margin));
  return d;
}

namespace {

// Float32 activations the forward pass keeps for a batch (model/model.cpp, layers/, moe/): the
// residual stream and its two scratch copies, attention's q/k/v/output and one row of scores
// per thread, the widest gated FFN's gate+up and hidden, the MoE slot rows and gathered rows,
// router probabilities, and the logits.
uint64_t activation_bytes(const HParams& hp, const FitContext& c) {
  const uint64_t B = static_cast<uint64_t>(std::max(1, c.batch));
  const uint64_t d = static_cast<uint64_t>(hp.n_embd);
  const uint64_t ff = static_cast<uint64_t>(std::max({hp.n_ff, hp.n_ff_exp, hp.n_ff_shexp}));
  const uint64_t k = static_cast<uint64_t>(std::max(1, hp.n_expert_used));
  uint64_t floats = 3 * d * B;
  floats += static_cast<uint64_t>(hp.q_dim() + hp.k_dim() + hp.v_dim() + hp.attn_out_dim()) * B;
  floats += static_cast<uint64_t>(std::max(1, c.threads)) * static_cast<uint64_t>(c.n_ctx);
  floats += 3 * ff * B;
  floats += (k + 2) * d * B + static_cast<uint64_t>(hp.n_expert) * B;
  floats += static_cast<uint64_t>(hp.n_vocab) * static_cast<uint64_t>(std::max(1, c.logits_rows));
  return floats * sizeof(float);
}

}  // namespace

ModelMemory model_memory(const GgufFile& file, const FitContext& c) {
  ModelMemory m;
  const HParams hp = load_hparams(file);
  HParams h = hp;
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (h.n_vocab == 0 && embd) h.n_vocab = embd->rows();
  for (const GgufTensorInfo& t : file.tensors())
    (parse_expert_tensor_name(t.name) ? m.expert_bytes : m.non_expert_bytes) += t.nbytes;
  // The loader ties the output head to the embedding when the file has no output.weight.
  if (embd && file.find_tensor("output.weight")) m.table_bytes = embd->nbytes;
  // The low-precision copies (pack --low) are expert bytes too, but only the model's own
  // precision decides the fit.
  m.expert_bytes = build_expert_index(file).total_expert_bytes();
  m.n_ctx = c.n_ctx;
  // The layers' own cache rows and recurrent state, as the forward pass allocates them.
  const Model model(file);
  m.kv_bytes = KvCache::bytes_for(model.kv_layer_widths(), c.n_ctx);
  m.state_bytes = model.recurrent_state_bytes();
  m.snapshot_bytes = m.state_bytes * static_cast<uint64_t>(std::max(0, c.state_snapshots));
  m.scratch_bytes = activation_bytes(h, c);
  m.top_k = hp.n_expert_used;
  if (m.expert_bytes > 0) {
    const ExpertStore store(file.split_paths(), build_expert_index(file), StoreOptions{false});
    int moe_layers = 0;
    for (int l = 0; l < store.n_layers(); ++l) moe_layers += store.is_moe_layer(l);
    m.min_budget = store.slot_bytes() * static_cast<uint64_t>(std::max(1, hp.n_expert_used)) *
                   static_cast<uint64_t>(c.per_layer ? std::max(1, moe_layers) : 1);
  }
  return m;
}

}  // namespace moeflow
