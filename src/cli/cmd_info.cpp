// `moeflow info`: what a GGUF model holds (architecture, hyper-parameters, tensor types, how
// many bytes are experts), as text or JSON. Also the hidden `gguf-selftest-write` used by the
// gguf-py interoperability test.
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_selftest.h"
#include "model/model.h"

namespace moeflow::cli {
namespace {

using ojson = nlohmann::ordered_json;

// Arrays longer than this are summarised unless --full (vocabularies have 100k+ entries).
constexpr size_t kShortArray = 16;
// Numeric arrays up to this long are printed whole in the text form (one entry per layer).
constexpr size_t kPerLayerArray = 256;

ojson value_json(const GgufValue& v, bool full) {
  switch (v.type) {
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
    case GgufType::UINT64: return v.u;
    case GgufType::INT8:
    case GgufType::INT16:
    case GgufType::INT32:
    case GgufType::INT64: return v.i;
    case GgufType::FLOAT32:
    case GgufType::FLOAT64: return v.f;
    case GgufType::BOOL: return v.b;
    case GgufType::STRING: return v.s;
    case GgufType::ARRAY: {
      ojson a = ojson::array();
      const size_t n = full ? v.arr.size() : std::min(v.arr.size(), kShortArray);
      for (size_t k = 0; k < n; ++k) a.push_back(value_json(v.arr[k], full));
      return a;
    }
  }
  return nullptr;
}

ojson kv_json(const GgufValue& v, bool full) {
  ojson o;
  o["type"] = gguf_type_name(v.type);
  if (v.type == GgufType::ARRAY) {
    o["elem_type"] = gguf_type_name(v.elem_type);
    o["length"] = v.arr.size();
    o["truncated"] = !full && v.arr.size() > kShortArray;
  }
  o["value"] = value_json(v, full);
  return o;
}

std::string value_text(const GgufValue& v) {
  switch (v.type) {
    case GgufType::STRING: {
      std::string s = v.s.size() > 60 ? v.s.substr(0, 60) + "..." : v.s;
      for (char& c : s)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
      return "\"" + s + "\"";
    }
    case GgufType::ARRAY: {
      // Per-layer values (kv heads, which layers slide) are short: shown; vocabularies are not.
      if (v.elem_type == GgufType::STRING || v.elem_type == GgufType::ARRAY ||
          v.arr.size() > kPerLayerArray)
        return fmt::format("[{} x {}]", gguf_type_name(v.elem_type), v.arr.size());
      std::string s = "[";
      for (size_t k = 0; k < v.arr.size(); ++k) s += (k ? ", " : "") + value_text(v.arr[k]);
      return s + "]";
    }
    case GgufType::BOOL: return v.b ? "true" : "false";
    case GgufType::FLOAT32:
    case GgufType::FLOAT64: return fmt::format("{}", v.f);
    default: return value_json(v, false).dump();
  }
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024 && u < 4) {
    x /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", x, units[u]);
}

struct InfoOptions {
  std::string model;
  bool json = false;
  bool tensors = false;
  bool full = false;
};

int run_info(const InfoOptions& o) {
  auto f = GgufFile::open(o.model);
  const ExpertIndex idx = build_expert_index(*f);
  const uint64_t expert_bytes = idx.total_expert_bytes();
  uint64_t tensor_bytes = 0;
  std::map<std::string, size_t> types;
  for (const auto& t : f->tensors()) {
    tensor_bytes += t.nbytes;
    ++types[type_name(t.type)];
  }
  int moe_layers = 0, max_experts = 0;
  for (const auto& l : idx.layers) {
    if (l.n_expert > 0) ++moe_layers;
    max_experts = std::max(max_experts, l.n_expert);
  }
  std::string arch;
  if (const GgufValue* a = f->find("general.architecture"); a && a->type == GgufType::STRING)
    arch = a->s;
  // Hyper-parameters are the "<arch>.*" keys: whatever the architecture defines, per-layer
  // arrays included (Gemma 4's head_count_kv and sliding_window_pattern; the text form
  // summarises them as [type x length]).
  std::vector<const GgufKV*> hparams;
  if (!arch.empty())
    for (const auto& kv : f->metadata())
      if (kv.key.rfind(arch + ".", 0) == 0) hparams.push_back(&kv);
  uint64_t total_size = 0;
  for (uint32_t s = 0; s < f->split_paths().size(); ++s) total_size += f->file_size(s);
  // The KV cache a run would keep, when moeflow can load the model (info also inspects files
  // it cannot run).
  uint64_t kv_token = 0, kv_token_per_head = 0, recurrent_bytes = 0;
  int recurrent_layers = 0, trunk_layers = 0, nextn_layers = 0;
  std::string load_error;
  try {
    Model m(*f);
    kv_token = m.kv_bytes_per_token();
    kv_token_per_head = m.kv_bytes_per_token_per_head();
    // Hybrid models: the gated DeltaNet layers keep a fixed-size state per sequence instead of
    // cache rows; MTP blocks after the trunk are loaded by nobody and never run.
    recurrent_bytes = m.recurrent_state_bytes();
    for (const LayerSpec& s : m.specs())
      recurrent_layers += s.attn.kind == AttentionKind::GatedDeltaNet;
    trunk_layers = m.hparams().n_layer;
    nextn_layers = m.hparams().n_layer_nextn;
  } catch (const Error& e) {
    load_error = e.what();
  }

  if (o.json) {
    ojson j;
    j["path"] = f->path();
    j["version"] = f->version();
    j["alignment"] = f->alignment();
    j["split_count"] = f->split_paths().size();
    j["split_paths"] = f->split_paths();
    j["file_size"] = total_size;
    j["architecture"] = arch;
    ojson hp = ojson::object();
    for (const GgufKV* kv : hparams) hp[kv->key] = value_json(kv->value, false);
    j["hparams"] = hp;
    ojson md = ojson::object();
    for (const auto& kv : f->metadata()) md[kv.key] = kv_json(kv.value, o.full);
    j["metadata"] = md;
    j["tensor_count"] = f->tensors().size();
    j["types"] = types;
    j["tensor_bytes"] = tensor_bytes;
    j["expert_bytes"] = expert_bytes;
    j["other_bytes"] = tensor_bytes - expert_bytes;
    j["moe_layers"] = moe_layers;
    j["n_layers"] = idx.n_layers;
    j["max_experts"] = max_experts;
    if (load_error.empty()) {
      j["kv_bytes_per_token"] = kv_token;
      j["kv_bytes_per_token_per_head"] = kv_token_per_head;
      j["recurrent_layers"] = recurrent_layers;
      j["recurrent_state_bytes"] = recurrent_bytes;
      j["nextn_layers_skipped"] = nextn_layers;
    } else {
      j["load_error"] = load_error;
    }
    if (o.tensors) {
      ojson ts = ojson::array();
      for (const auto& t : f->tensors()) {
        ts.push_back({{"name", t.name},
                      {"type", type_name(t.type)},
                      {"dims", t.dims},
                      {"offset", t.offset},
                      {"file_offset", t.file_offset},
                      {"nbytes", t.nbytes},
                      {"split", t.split}});
      }
      j["tensors"] = ts;
    }
    // File strings need not be valid UTF-8; replace bad bytes instead of failing the dump.
    std::printf("%s\n", j.dump(1, ' ', false, ojson::error_handler_t::replace).c_str());
    return 0;
  }

  std::printf("file:         %s\n", f->path().c_str());
  std::printf("format:       GGUF v%u, alignment %llu, %zu split file(s), %s\n", f->version(),
              static_cast<unsigned long long>(f->alignment()), f->split_paths().size(),
              human_bytes(total_size).c_str());
  std::printf("architecture: %s\n", arch.empty() ? "(none)" : arch.c_str());
  for (const GgufKV* kv : hparams)
    std::printf("  %-44s %s\n", kv->key.c_str(), value_text(kv->value).c_str());
  std::printf("metadata:     %zu keys\n", f->metadata().size());
  std::printf("tensors:      %zu, %s\n", f->tensors().size(), human_bytes(tensor_bytes).c_str());
  std::string hist;
  for (const auto& [name, n] : types)
    hist += fmt::format("{}{} x{}", hist.empty() ? "" : ", ", name, n);
  std::printf("types:        %s\n", hist.empty() ? "(no tensors)" : hist.c_str());
  std::printf("experts:      %s in %d MoE layer(s) of %d (up to %d experts each)\n",
              human_bytes(expert_bytes).c_str(), moe_layers, idx.n_layers, max_experts);
  std::printf("other:        %s\n", human_bytes(tensor_bytes - expert_bytes).c_str());
  if (load_error.empty())
    std::printf("kv cache:     %s per token (%s with every head's keys and values)\n",
                human_bytes(kv_token).c_str(), human_bytes(kv_token_per_head).c_str());
  if (load_error.empty() && recurrent_layers > 0)
    std::printf(
        "recurrent:    %d gated DeltaNet layer(s) of %d (no KV cache rows), %s of state per "
        "sequence and as much per state snapshot (chat / serve --state-snapshots: what the "
        "prefix cache goes back to)\n",
        recurrent_layers, trunk_layers, human_bytes(recurrent_bytes).c_str());
  if (load_error.empty() && nextn_layers > 0)
    std::printf("mtp:          %d next-token-prediction block(s) after the trunk, not run\n",
                nextn_layers);
  if (!load_error.empty()) std::printf("model:        not loadable: %s\n", load_error.c_str());
  if (o.tensors) {
    std::printf("\n%-48s %-8s %-28s %14s %14s\n", "name", "type", "dims", "offset", "bytes");
    for (const auto& t : f->tensors()) {
      std::string dims;
      for (size_t d = 0; d < t.dims.size(); ++d)
        dims += fmt::format("{}{}", d ? " x " : "", t.dims[d]);
      std::printf("%-48s %-8s %-28s %14llu %14llu\n", t.name.c_str(), type_name(t.type),
                  dims.c_str(), static_cast<unsigned long long>(t.file_offset),
                  static_cast<unsigned long long>(t.nbytes));
    }
  }
  return 0;
}

const bool info_registered = register_command(
    "info", "Describe a GGUF model: metadata, tensors, expert bytes", [](CLI::App& sub) {
      auto o = std::make_shared<InfoOptions>();
      sub.add_option("-m,--model", o->model, "GGUF file (first part of a split model)")->required();
      sub.add_flag("--json", o->json, "Print JSON");
      sub.add_flag("--tensors", o->tensors, "List every tensor");
      sub.add_flag("--full", o->full, "Print whole metadata arrays in JSON");
      return CommandMain([o] { return run_info(*o); });
    });

const bool selftest_registered = register_command(
    "gguf-selftest-write", "Write the GGUF interoperability test file", [](CLI::App& sub) {
      auto path = std::make_shared<std::string>();
      sub.group("");  // hidden: a test fixture, not a user command
      sub.add_option("file", *path, "output path")->required();
      return CommandMain([path] {
        write_gguf_selftest(*path);
        return 0;
      });
    });

}  // namespace
}  // namespace moeflow::cli
