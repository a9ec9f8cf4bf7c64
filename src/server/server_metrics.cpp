#include "server/server_metrics.h"

#include <fmt/format.h>

#include "server/text_generation.h"

namespace moeflow {
namespace {

std::string prom_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

void ServerMetrics::http_request(const std::string& path, int status) {
  std::lock_guard lk(mu_);
  http_requests_[{path, status}]++;
}

void ServerMetrics::generation(const TextGenResult& r, bool error) {
  std::lock_guard lk(mu_);
  finished_[error ? "error" : r.finish_reason]++;
  if (error) return;
  prompt_tokens_ += (uint64_t)r.n_prompt;
  cached_tokens_ += (uint64_t)r.n_cached;
  generated_tokens_ += (uint64_t)r.n_generated;
  prefill_s_ += r.prefill_s;
  decode_s_ += r.decode_s;
}

void ServerMetrics::rejected() {
  std::lock_guard lk(mu_);
  ++rejected_;
}

void ServerMetrics::cancelled(const std::string& reason) {
  std::lock_guard lk(mu_);
  cancelled_[reason]++;
}

void ServerMetrics::connection_dropped(const std::string& reason) {
  std::lock_guard lk(mu_);
  dropped_[reason]++;
}

std::string ServerMetrics::render(const Gauges& g, const std::optional<OffloadStats>& st) const {
  std::string o;
  auto head = [&](const char* name, const char* type, const char* help) {
    o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  {
    std::lock_guard lk(mu_);
    head("moeflow_http_requests_total", "counter",
         "HTTP requests answered, by path and status code.");
    for (const auto& [k, v] : http_requests_)
      o += fmt::format("moeflow_http_requests_total{{path=\"{}\",code=\"{}\"}} {}\n",
                       prom_escape(k.first), k.second, v);
    head("moeflow_http_connections_dropped_total", "counter",
         "Connections closed before a complete request reached a worker, by reason.");
    for (const char* r :
         {"header_timeout", "idle_timeout", "evicted", "too_large", "bad_request"}) {
      auto it = dropped_.find(r);
      o += fmt::format("moeflow_http_connections_dropped_total{{reason=\"{}\"}} {}\n", r,
                       it == dropped_.end() ? 0 : it->second);
    }
    head("moeflow_completions_total", "counter",
         "Generations finished, by finish reason (cancelled: the client went away or the server "
         "stopped).");
    for (const char* r : {"stop", "length", "cancelled", "error"}) {
      auto it = finished_.find(r);
      o += fmt::format("moeflow_completions_total{{finish_reason=\"{}\"}} {}\n", r,
                       it == finished_.end() ? 0 : it->second);
    }
    head("moeflow_requests_rejected_total", "counter",
         "Requests refused with 503 because the queue was full.");
    o += fmt::format("moeflow_requests_rejected_total {}\n", rejected_);
    head("moeflow_requests_cancelled_total", "counter",
         "Generation requests ended before their generation did, by reason (client_gone: the "
         "client disconnected; shutdown: the server stopped).");
    for (const char* r : {"client_gone", "shutdown"}) {
      auto it = cancelled_.find(r);
      o += fmt::format("moeflow_requests_cancelled_total{{reason=\"{}\"}} {}\n", r,
                       it == cancelled_.end() ? 0 : it->second);
    }
    head("moeflow_prompt_tokens_total", "counter", "Prompt tokens of finished generations.");
    o += fmt::format("moeflow_prompt_tokens_total {}\n", prompt_tokens_);
    head("moeflow_prompt_tokens_cached_total", "counter",
         "Prompt tokens served from the prefix cache (not prefilled).");
    o += fmt::format("moeflow_prompt_tokens_cached_total {}\n", cached_tokens_);
    head("moeflow_generated_tokens_total", "counter", "Tokens generated.");
    o += fmt::format("moeflow_generated_tokens_total {}\n", generated_tokens_);
    head("moeflow_prefill_seconds_total", "counter", "Time spent in prompt processing.");
    o += fmt::format("moeflow_prefill_seconds_total {:.6f}\n", prefill_s_);
    head("moeflow_decode_seconds_total", "counter", "Time spent decoding after the first token.");
    o += fmt::format("moeflow_decode_seconds_total {:.6f}\n", decode_s_);
  }
  head("moeflow_queue_length", "gauge", "Requests waiting for the engine.");
  o += fmt::format("moeflow_queue_length {}\n", g.queue_length);
  head("moeflow_busy", "gauge", "1 while the engine is generating.");
  o += fmt::format("moeflow_busy {}\n", g.busy ? 1 : 0);
  head("moeflow_context_size", "gauge", "Context size in tokens.");
  o += fmt::format("moeflow_context_size {}\n", g.n_ctx);
  head("moeflow_http_connections_open", "gauge", "Client connections open.");
  o += fmt::format("moeflow_http_connections_open {}\n", g.open_connections);
  head("moeflow_offload_enabled", "gauge",
       "1 when experts are offloaded to a cache with a RAM budget.");
  o += fmt::format("moeflow_offload_enabled {}\n", st ? 1 : 0);
  if (!st) return o;
  head("moeflow_offload_budget_bytes", "gauge", "Expert cache budget.");
  o += fmt::format("moeflow_offload_budget_bytes {}\n", st->budget_bytes);
  head("moeflow_offload_slots", "gauge", "Expert cache slots.");
  o += fmt::format("moeflow_offload_slots {}\n", st->n_slots);
  struct Col {
    const char* name;
    const char* help;
    uint64_t LayerOffloadStats::*u;
    double LayerOffloadStats::*d;
  };
  const Col cols[] = {
      {"moeflow_expert_acquires_total", "Expert uses by the MoE block.",
       &LayerOffloadStats::acquires, nullptr},
      {"moeflow_expert_hits_total", "Experts resident when first requested.",
       &LayerOffloadStats::hits, nullptr},
      {"moeflow_expert_misses_total",
       "Experts neither resident nor in flight when first requested.", &LayerOffloadStats::misses,
       nullptr},
      {"moeflow_expert_late_total",
       "Experts still in flight (prefetch not done) when first requested.",
       &LayerOffloadStats::late, nullptr},
      {"moeflow_expert_prefetch_issued_total", "Prefetches issued.",
       &LayerOffloadStats::prefetch_issued, nullptr},
      {"moeflow_expert_prefetch_used_total", "Prefetched experts later used.",
       &LayerOffloadStats::prefetch_used, nullptr},
      {"moeflow_expert_prefetch_wasted_total", "Prefetched experts evicted or cancelled unused.",
       &LayerOffloadStats::prefetch_wasted, nullptr},
      {"moeflow_expert_evictions_total", "Expert evictions.", &LayerOffloadStats::evictions,
       nullptr},
      {"moeflow_expert_bytes_read_total", "Bytes read from the model file for experts.",
       &LayerOffloadStats::bytes_read, nullptr},
      {"moeflow_expert_stall_seconds_total",
       "Time the forward pass waited for experts (critical-path stall).", nullptr,
       &LayerOffloadStats::stall_s},
  };
  for (const Col& c : cols) {
    head(c.name, "counter", c.help);
    for (size_t l = 0; l < st->layers.size(); ++l) {
      const LayerOffloadStats& ls = st->layers[l];
      if (c.u)
        o += fmt::format("{}{{layer=\"{}\"}} {}\n", c.name, l, ls.*c.u);
      else
        o += fmt::format("{}{{layer=\"{}\"}} {:.6f}\n", c.name, l, ls.*c.d);
    }
  }
  return o;
}

}  // namespace moeflow
