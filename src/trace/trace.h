#pragma once
// In-memory routing trace and its compact binary file format (docs/traces.md).
// A trace is a list of token steps in execution order; each step holds the routing decision of
// every recorded layer (experts in rank order, gate weights) and optionally the hidden state
// that entered the layer's MoE block (for training predictors and gate lookahead).
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow::trace {

enum class Phase : uint8_t { prefill = 0, decode = 1 };

struct LayerRoute {
  int layer = 0;
  std::vector<int> experts;    // rank order
  std::vector<float> weights;  // same length, or empty when unknown
  std::vector<float> hidden;   // hidden_dim values, or empty
};

struct TokenStep {
  uint32_t request = 0;  // sequence id; steps of one request are contiguous
  Phase phase = Phase::decode;
  uint32_t pos = 0;       // token position inside the request's phase (prompt index / decode step)
  int32_t token_id = -1;  // -1 when unknown
  std::vector<LayerRoute> routes;  // ascending layer order
};

struct Trace {
  std::string model;   // free text, e.g. "Mixtral-8x7B-Instruct-v0.1"
  std::string source;  // where it came from
  int n_layers = 0;    // layer ids are 0..n_layers-1 (not all need to be recorded)
  int n_experts = 0;
  int top_k = 0;
  int hidden_dim = 0;  // 0 when no hidden states
  // Optional router matrices for gate lookahead: per layer n_experts x hidden_dim row-major,
  // empty or n_layers entries (an entry may be empty).
  std::vector<std::vector<float>> routers;
  std::vector<TokenStep> steps;

  // Layers that appear in at least one step, ascending.
  std::vector<int> recorded_layers() const;
  size_t n_routes() const;
  bool has_hidden() const { return hidden_dim > 0; }
  // Throws moeflow::Error naming `what` if ids are out of range or shapes disagree.
  void validate(const std::string& what) const;
};

void write_trace(const Trace& t, const std::string& path);
Trace read_trace(const std::string& path);

// Keeps only the steps for which keep(step) is true (e.g. decode only).
Trace filter_steps(const Trace& t, bool keep_prefill, bool keep_decode);

}  // namespace moeflow::trace
