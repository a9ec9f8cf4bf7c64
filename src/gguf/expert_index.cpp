#include "gguf/expert_index.h"

#include <map>
#include <regex>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"

namespace moeflow {
namespace {

// Slot 3 is the fused gate+up tensor; it ends up in proj Gate.
constexpr int kFused = (int)ExpertTensor::GateUp;
// More layers than any model has (the largest published ones have ~160); block_count is only
// metadata, so it must not size the index beyond this (a few hundred KiB of empty layers).
constexpr int64_t kMaxLayers = 65536;

struct LayerTensors {
  const GgufTensorInfo* t[4] = {nullptr, nullptr, nullptr, nullptr};
};

const char* slot_name(int s) { return expert_tensor_base((ExpertTensor)s); }

ExpertLayerIndex index_layer(const GgufFile& f, int layer, const LayerTensors& lt,
                             const std::string& suffix) {
  const std::string& path = f.path();
  for (int s = 0; s < 4; ++s) {
    const GgufTensorInfo* t = lt.t[s];
    if (t && t->dims.size() != 3)
      fail("{}: expert tensor '{}' has {} dimensions, expected 3 [cols, rows, n_expert]", path,
           t->name, t->dims.size());
  }
  const bool fused = lt.t[kFused] != nullptr;
  const GgufTensorInfo* down = lt.t[int(ExpertProj::Down)];
  const GgufTensorInfo* gate = lt.t[fused ? kFused : int(ExpertProj::Gate)];
  const GgufTensorInfo* up = lt.t[int(ExpertProj::Up)];
  if (fused && (lt.t[int(ExpertProj::Gate)] || up))
    fail("{}: layer {} has both a fused ffn_gate_up_exps and separate gate/up expert tensors", path,
         layer);
  for (int s : {int(ExpertProj::Gate), int(ExpertProj::Up), int(ExpertProj::Down)}) {
    if (fused && s != int(ExpertProj::Down)) continue;
    if (!lt.t[s])
      fail("{}: layer {} has expert tensors but no blk.{}.{}.{}", path, layer, layer, slot_name(s),
           suffix);
  }

  const int64_t n_expert = down->dims[2];
  const GgufTensorInfo* all[3] = {gate, fused ? nullptr : up, down};
  for (const GgufTensorInfo* t : all) {
    if (t && t->dims[2] != n_expert)
      fail("{}: layer {}: '{}' has {} experts but '{}' has {}", path, layer, t->name, t->dims[2],
           down->name, n_expert);
  }
  if (n_expert > INT32_MAX) fail("{}: layer {}: {} experts is too many", path, layer, n_expert);
  // gate/up map n_embd -> n_ff, down maps n_ff -> n_embd.
  const int64_t n_ff = down->dims[0];
  const int64_t n_embd = down->dims[1];
  if (gate->dims[0] != n_embd || gate->dims[1] != (fused ? 2 * n_ff : n_ff))
    fail("{}: layer {}: '{}' has shape [{}, {}] but '{}' implies [{}, {}]", path, layer, gate->name,
         gate->dims[0], gate->dims[1], down->name, n_embd, fused ? 2 * n_ff : n_ff);
  if (!fused && (up->dims[0] != gate->dims[0] || up->dims[1] != gate->dims[1]))
    fail("{}: layer {}: '{}' and '{}' have different shapes", path, layer, gate->name, up->name);

  ExpertLayerIndex li;
  li.layer = layer;
  li.n_expert = static_cast<int>(n_expert);
  li.fused_gate_up = fused;
  li.slices.resize(static_cast<size_t>(n_expert));
  for (int p = 0; p < kNumExpertProj; ++p) {
    const GgufTensorInfo* t = all[p];
    if (!t) continue;
    // The parser checked nbytes == rows * row_bytes(cols) * n_expert without overflow.
    const uint64_t slice_bytes = t->nbytes / static_cast<uint64_t>(n_expert);
    for (int64_t e = 0; e < n_expert; ++e) {
      ExpertSlice& s = li.slices[static_cast<size_t>(e)][static_cast<size_t>(p)];
      s.type = t->type;
      s.cols = t->dims[0];
      s.rows = t->dims[1];
      s.file_offset = t->file_offset + static_cast<uint64_t>(e) * slice_bytes;
      s.nbytes = slice_bytes;
      s.split = t->split;
    }
  }
  return li;
}

}  // namespace

uint64_t ExpertIndex::total_expert_bytes() const {
  uint64_t total = 0;
  for (const auto& l : layers)
    for (const auto& e : l.slices)
      for (const auto& s : e) total += s.nbytes;
  return total;
}

uint64_t ExpertIndex::expert_bytes(int layer, int expert) const {
  if (layer < 0 || static_cast<size_t>(layer) >= layers.size())
    fail("expert index: layer {} out of range (model has {})", layer, layers.size());
  const auto& l = layers[static_cast<size_t>(layer)];
  if (expert < 0 || expert >= l.n_expert)
    fail("expert index: expert {} out of range for layer {} ({} experts)", expert, layer,
         l.n_expert);
  uint64_t total = 0;
  for (const auto& s : l.slices[static_cast<size_t>(expert)]) total += s.nbytes;
  return total;
}

ExpertIndex build_expert_index(const GgufFile& f, const std::string& suffix) {
  MOEFLOW_CHECK(!suffix.empty() && std::regex_match(suffix, std::regex("[a-z_]+")),
                "expert index: bad tensor suffix '{}'", suffix);
  static const std::regex blk(R"(^blk\.([0-9]{1,6})\.)");
  std::map<int, LayerTensors> found;
  int max_layer = -1;
  for (const auto& t : f.tensors()) {
    std::smatch m;
    if (!std::regex_search(t.name, m, blk)) continue;
    const int layer = std::stoi(m[1].str());
    max_layer = std::max(max_layer, layer);
    const auto parsed = parse_expert_tensor_name(t.name);
    if (!parsed || parsed->suffix != suffix) continue;
    const int slot = (int)parsed->kind;  // Gate, Up, Down, or kFused
    found[layer].t[slot] = &t;
  }

  if (max_layer >= kMaxLayers)
    fail("{}: a tensor of layer {} (a model has at most {} layers)", f.path(), max_layer,
         kMaxLayers);
  int64_t n_layers = max_layer + 1;
  if (const GgufValue* arch = f.find("general.architecture");
      arch && arch->type == GgufType::STRING) {
    const std::string key = arch->s + ".block_count";
    if (f.has(key)) {
      n_layers = f.get_int(key);
      if (n_layers < 0 || n_layers > kMaxLayers)
        fail("{}: metadata key '{}' = {} is out of range 0..{}", f.path(), key, n_layers,
             kMaxLayers);
      if (max_layer >= n_layers)
        fail("{}: tensor of layer {} but '{}' = {}", f.path(), max_layer, key, n_layers);
      // Next-token-prediction blocks come after the trunk and are counted in block_count;
      // their experts are never run, so they are not experts of the model.
      const int64_t nextn = f.get_int(arch->s + ".nextn_predict_layers", 0);
      if (nextn < 0 || nextn >= n_layers)
        fail("{}: metadata key '{}.nextn_predict_layers' = {} is out of range", f.path(), arch->s,
             nextn);
      n_layers -= nextn;
    }
  }

  ExpertIndex idx;
  idx.n_layers = static_cast<int>(n_layers);
  idx.layers.resize(static_cast<size_t>(n_layers));
  for (int l = 0; l < idx.n_layers; ++l) idx.layers[static_cast<size_t>(l)].layer = l;
  for (const auto& [layer, lt] : found)
    if (layer < n_layers)
      idx.layers[static_cast<size_t>(layer)] = index_layer(f, layer, lt, suffix);
  return idx;
}

}  // namespace moeflow
