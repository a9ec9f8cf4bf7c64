#include "trace/routing_replay.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace moeflow::trace {

RoutingReplay::RoutingReplay(const Trace& t, std::string name, ReplayShape model, int request)
    : name_(std::move(name)), model_name_(t.model), shape_(model), request_(request) {
  // The shape first: a trace of another model would replay ids that mean other experts.
  if (t.n_layers != model.n_layer || t.n_experts != model.n_expert || t.top_k != model.top_k)
    fail(
        "--routing-trace {}: recorded on {} layers, {} experts, top-{} ({}); the model has {} "
        "layers, {} experts, top-{}: replay needs a model of the trace's shape",
        name_, t.n_layers, t.n_experts, t.top_k, t.model.empty() ? "model not named" : t.model,
        model.n_layer, model.n_expert, model.top_k);
  if (request < 0) fail("--routing-request must be >= 0, got {}", request);
  std::vector<uint32_t> ids;  // request ids in order of first appearance
  for (const TokenStep& s : t.steps)
    if (std::find(ids.begin(), ids.end(), s.request) == ids.end()) ids.push_back(s.request);
  if (request >= (int)ids.size())
    fail("--routing-request {}: the trace {} has {} request{} (0..{})", request, name_, ids.size(),
         ids.size() == 1 ? "" : "s", (int)ids.size() - 1);
  for (const TokenStep& s : t.steps)
    if (s.request == ids[request]) steps_.push_back(s);
  // Prompt rows before decode rows, each in recorded order (a trace lists a request's steps
  // contiguously in execution order; the stable sort only guards a file that interleaves them).
  std::stable_sort(steps_.begin(), steps_.end(), [](const TokenStep& a, const TokenStep& b) {
    return a.phase == Phase::prefill && b.phase == Phase::decode;
  });
  for (const TokenStep& s : steps_) {
    Row row;
    row.by_layer.assign(model.n_layer, nullptr);
    for (const LayerRoute& r : s.routes) {
      if (r.layer < 0 || r.layer >= model.n_layer)
        fail("--routing-trace {}: a route of layer {} (the model has {} layers)", name_, r.layer,
             model.n_layer);
      if ((int)r.experts.size() != model.top_k)
        fail("--routing-trace {}: a route of layer {} has {} experts, the model routes to {}",
             name_, r.layer, r.experts.size(), model.top_k);
      for (int e : r.experts)
        if (e < 0 || e >= model.n_expert)
          fail("--routing-trace {}: expert id {} at layer {} (the model has {} experts)", name_, e,
               r.layer, model.n_expert);
      row.by_layer[r.layer] = &r;
    }
    row.token_id = s.token_id;
    if (s.phase == Phase::prefill) ++n_prompt_rows_;
    rows_.push_back(std::move(row));
  }
  if (rows_.empty()) fail("--routing-trace {}: request {} has no rows", name_, request);
}

void RoutingReplay::begin_generation(int64_t n_prompt, int64_t n_predict) {
  if (n_prompt_rows_ > 0) {
    if (n_prompt != n_prompt_rows_)
      fail(
          "--routing-trace {}: request {} was recorded with a prompt of {} tokens; this prompt "
          "has {}: replay needs a prompt of the recorded length (e.g. -p \"ids:...\" with {} "
          "ids, or bench -p {})",
          name_, request_, n_prompt_rows_, n_prompt, n_prompt_rows_, n_prompt_rows_);
    first_ = 0;
    own_until_ = 0;
  } else {
    // Decode-only trace: the prompt routes itself, decode rows from the first generated token.
    first_ = n_prompt;
    own_until_ = n_prompt;
  }
  // The last generated token is sampled, never run through the model: n_predict - 1 decode
  // steps follow the prompt.
  const int64_t steps = std::max<int64_t>(0, n_predict - 1);
  if (steps > decode_rows())
    fail("--routing-trace {}: request {} has {} decode rows; -n {} runs {} decode steps", name_,
         request_, decode_rows(), n_predict, steps);
}

void RoutingReplay::begin_decode(int64_t n_decode, const std::string& what) {
  if (n_decode > decode_rows())
    fail("--routing-trace {}: request {} has {} decode rows; {} asks for {}", name_, request_,
         decode_rows(), what, n_decode);
  first_ = -n_prompt_rows_;  // position 0 reads the first decode row
  own_until_ = 0;
}

void RoutingReplay::begin_sequence(int64_t n_positions, const std::string& what) {
  if (n_positions > (int64_t)rows_.size())
    fail("--routing-trace {}: request {} has {} rows ({} prompt + {} decode); {} asks for {}",
         name_, request_, rows_.size(), n_prompt_rows_, decode_rows(), what, n_positions);
  first_ = 0;
  own_until_ = 0;
}

void RoutingReplay::apply(int layer, int64_t pos0, int n, int k, int32_t* experts, float* weights) {
  if (k != shape_.top_k || layer < 0 || layer >= shape_.n_layer)
    fail("--routing-trace {}: layer {} routes to {} experts, the trace has top-{} over {} layers",
         name_, layer, k, shape_.top_k, shape_.n_layer);
  for (int i = 0; i < n; ++i) {
    const int64_t pos = pos0 + i;
    if (pos < own_until_) {
      ++counts_.own;
      continue;
    }
    const int64_t r = pos - first_;
    if (r < 0 || r >= (int64_t)rows_.size())
      fail("--routing-trace {}: position {} needs row {} of request {}, which has {} rows", name_,
           pos, r, request_, rows_.size());
    const LayerRoute* route = rows_[r].by_layer[layer];
    if (!route) {
      ++counts_.own;
      continue;
    }
    std::memcpy(experts + (size_t)i * k, route->experts.data(), sizeof(int32_t) * k);
    // A route recorded without weights keeps the router's weight at each rank.
    if (!route->weights.empty())
      std::memcpy(weights + (size_t)i * k, route->weights.data(), sizeof(float) * k);
    ++counts_.replayed;
  }
}

bool RoutingReplay::observed_tokens(int64_t pos0, int n, int32_t* ids) {
  for (int i = 0; i < n; ++i) {
    const int64_t r = pos0 + i - first_;
    if (pos0 + i < own_until_ || r < 0 || r >= (int64_t)rows_.size()) return false;
    ids[i] = rows_[r].token_id;
  }
  return true;
}

std::string RoutingReplay::describe() const {
  return fmt::format(
      "routing replayed from {} (request {}: {} prompt + {} decode rows) | {} routes replayed, "
      "{} left to the router",
      name_, request_, n_prompt_rows_, decode_rows(), counts_.replayed, counts_.own);
}

nlohmann::json replay_json(const RoutingReplay& r) {
  return {{"file", r.name()},
          {"request", r.request()},
          {"model", r.model()},
          {"prompt_rows", r.prompt_rows()},
          {"decode_rows", r.decode_rows()},
          {"routes_replayed", r.counts().replayed},
          {"routes_own", r.counts().own}};
}

}  // namespace moeflow::trace
