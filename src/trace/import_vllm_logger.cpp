#include <algorithm>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "trace/importers.h"

namespace moeflow::trace {

namespace {

struct LoggerRow {
  std::vector<int> ids;
  std::vector<float> w;
};

struct LayerLog {
  int layer = -1;
  int top_k = 0;
  std::string model;
  std::vector<std::vector<LoggerRow>> batches;
};

LayerLog read_layer(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("trace '{}': cannot open", path);
  LayerLog log;
  std::string line;
  size_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      auto j = nlohmann::json::parse(line);
      std::string type = j.value("type", "");
      if (type == "meta") {
        log.top_k = j.value("top_k", 0);
        log.model = j.value("model_id", "");
        continue;
      }
      if (type != "route") continue;
      int layer = j.at("layer").get<int>();
      MOEFLOW_CHECK(layer >= 0 && layer < 65536, "trace '{}' line {}: bad layer {}", path, lineno,
                    layer);
      if (log.layer < 0) log.layer = layer;
      MOEFLOW_CHECK(
          layer == log.layer,
          "trace '{}' line {}: layer {} in a file of layer {} (one layer per file expected)", path,
          lineno, layer, log.layer);
      int idx = j.at("token_idx").get<int>();
      LoggerRow r{j.at("topk_ids").get<std::vector<int>>(),
                  j.value("topk_weights", std::vector<float>{})};
      MOEFLOW_CHECK(!r.ids.empty(), "trace '{}' line {}: empty topk_ids", path, lineno);
      for (int e : r.ids)
        MOEFLOW_CHECK(e >= 0 && e < 65536, "trace '{}' line {}: bad expert id {}", path, lineno, e);
      if (!r.w.empty() && r.w.size() != r.ids.size())
        fail("trace '{}' line {}: weights/ids length mismatch", path, lineno);
      if (idx == 0 || log.batches.empty()) log.batches.emplace_back();
      MOEFLOW_CHECK(idx == (int)log.batches.back().size(),
                    "trace '{}' line {}: token_idx {} out of sequence (expected {})", path, lineno,
                    idx, log.batches.back().size());
      log.batches.back().push_back(std::move(r));
    } catch (const nlohmann::json::exception& e) {
      fail("trace '{}' line {}: bad JSON or field ({})", path, lineno, e.what());
    }
  }
  if (log.batches.empty()) fail("trace '{}': no route rows", path);
  // vLLM's warm-up runs dummy inputs: every row of the batch routes identically.
  size_t drop = 0;
  while (drop < log.batches.size() && log.batches[drop].size() > 1 &&
         std::all_of(log.batches[drop].begin(), log.batches[drop].end(),
                     [&](const LoggerRow& r) { return r.ids == log.batches[drop][0].ids; }))
    ++drop;
  log.batches.erase(log.batches.begin(), log.batches.begin() + (long)drop);
  if (log.batches.empty()) fail("trace '{}': only warm-up rows", path);
  return log;
}

}  // namespace

Trace import_vllm_logger(const std::vector<std::string>& files, int n_layers, int n_experts) {
  if (files.empty()) fail("vllm logger import: no files given");
  std::vector<LayerLog> logs;
  for (auto& f : files) logs.push_back(read_layer(f));
  std::sort(logs.begin(), logs.end(), [](auto& a, auto& b) { return a.layer < b.layer; });
  for (size_t i = 1; i < logs.size(); ++i) {
    MOEFLOW_CHECK(logs[i].layer != logs[i - 1].layer, "vllm logger import: layer {} given twice",
                  logs[i].layer);
    bool same = logs[i].batches.size() == logs[0].batches.size();
    for (size_t b = 0; same && b < logs[0].batches.size(); ++b)
      same = logs[i].batches[b].size() == logs[0].batches[b].size();
    MOEFLOW_CHECK(same,
                  "vllm logger import: layer {} file has a different batch structure than layer {}",
                  logs[i].layer, logs[0].layer);
  }
  const auto& B = logs[0].batches;
  // Decode starts at the first batch followed by one of the same size from which sizes never grow.
  size_t dstart = B.size();
  for (size_t b = 0; b + 1 < B.size(); ++b) {
    bool ok = B[b].size() == B[b + 1].size();
    for (size_t c = b + 1; ok && c < B.size(); ++c) ok = B[c].size() <= B[c - 1].size();
    if (ok) {
      dstart = b;
      break;
    }
  }
  Trace t;
  t.model = logs[0].model.empty() ? "Qwen1.5-MoE-A2.7B" : logs[0].model;
  t.source = files[0];
  int max_e = -1;
  size_t k = 0;
  for (auto& lg : logs)
    for (auto& b : lg.batches)
      for (auto& r : b) {
        k = std::max(k, r.ids.size());
        for (int e : r.ids) max_e = std::max(max_e, e);
      }
  t.n_layers = n_layers > 0 ? n_layers : logs.back().layer + 1;
  t.n_experts = n_experts > 0 ? n_experts : max_e + 1;
  t.top_k = logs[0].top_k > 0 ? logs[0].top_k : (int)k;
  auto add = [&](size_t b, size_t i, uint32_t req, Phase ph, uint32_t pos) {
    TokenStep s;
    s.request = req;
    s.phase = ph;
    s.pos = pos;
    for (auto& lg : logs)
      s.routes.push_back({lg.layer, lg.batches[b][i].ids, lg.batches[b][i].w, {}});
    t.steps.push_back(std::move(s));
  };
  // Prefill batches mix several prompts whose boundaries the log does not record: each becomes
  // one request of its own. Decode slot i of every batch is taken as request i.
  uint32_t n_dec_req = dstart < B.size() ? (uint32_t)B[dstart].size() : 0;
  for (size_t b = 0; b < dstart; ++b)
    for (size_t i = 0; i < B[b].size(); ++i)
      add(b, i, n_dec_req + (uint32_t)b, Phase::prefill, (uint32_t)i);
  for (uint32_t slot = 0; slot < n_dec_req; ++slot)
    for (size_t b = dstart; b < B.size(); ++b)
      if (slot < B[b].size()) add(b, slot, slot, Phase::decode, (uint32_t)(b - dstart));
  t.validate(files[0]);
  return t;
}

Trace load_any(const std::vector<std::string>& paths) {
  if (paths.empty()) fail("no trace file given");
  std::ifstream f(paths[0], std::ios::binary);
  if (!f) fail("trace '{}': cannot open", paths[0]);
  char head[512] = {};
  f.read(head, sizeof(head) - 1);
  std::string h(head, (size_t)f.gcount());
  if (h.rfind("MFTRACE", 0) == 0) {
    MOEFLOW_CHECK(paths.size() == 1, "binary trace '{}': give one file", paths[0]);
    return read_trace(paths[0]);
  }
  if (h.find("\"type\"") != std::string::npos &&
      (h.find("\"meta\"") != std::string::npos || h.find("\"route\"") != std::string::npos))
    return import_vllm_logger(paths);
  MOEFLOW_CHECK(paths.size() == 1, "trace '{}': speculative-moe JSONL takes one file", paths[0]);
  return import_speculative_moe(paths[0]);
}

}  // namespace moeflow::trace
