#include "experts/resident_provider.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"

namespace moeflow {

ResidentExpertProvider::ResidentExpertProvider(const GgufFile& file)
    : index_(build_expert_index(file)) {
  views_.resize(index_.layers.size());
  static const char* kProjName[kNumExpertProj] = {"gate", "up", "down"};
  for (size_t li = 0; li < index_.layers.size(); ++li) {
    const ExpertLayerIndex& L = index_.layers[li];
    if (L.n_expert == 0) continue;
    const int layer = L.layer >= 0 ? L.layer : (int)li;
    // Slices carry absolute file offsets; translate them through the stacked tensor's own
    // mapping so that split files need no separate base pointer.
    const GgufTensorInfo* tensors[kNumExpertProj] = {};
    for (int p = 0; p < kNumExpertProj; ++p) {
      std::string name = fmt::format("blk.{}.ffn_{}_exps.weight", layer, kProjName[p]);
      if (p == (int)ExpertProj::Gate && L.fused_gate_up)
        name = fmt::format("blk.{}.ffn_gate_up_exps.weight", layer);
      if (p == (int)ExpertProj::Up && L.fused_gate_up) continue;
      tensors[p] = &file.tensor(name);
    }
    auto& vs = views_[li];
    vs.resize(L.n_expert);
    for (int e = 0; e < L.n_expert; ++e) {
      for (int p = 0; p < kNumExpertProj; ++p) {
        const ExpertSlice& s = L.slices[e][p];
        if (!tensors[p] || s.nbytes == 0) continue;
        const GgufTensorInfo& t = *tensors[p];
        if (s.split != t.split || s.file_offset < t.file_offset ||
            s.file_offset + s.nbytes > t.file_offset + t.nbytes)
          fail("{}: expert {} of layer {} lies outside tensor '{}'", file.path(), e, layer, t.name);
        ExpertView& v = vs[e];
        v.data[p] = file.data(t) + (s.file_offset - t.file_offset);
        v.type[p] = s.type;
        v.rows[p] = s.rows;
        v.cols[p] = s.cols;
      }
    }
  }
}

ExpertView ResidentExpertProvider::acquire(int layer, int expert, Precision) {
  if (layer < 0 || layer >= (int)views_.size() || expert < 0 ||
      expert >= (int)views_[layer].size())
    fail("no expert {} in layer {}", expert, layer);
  return views_[layer][expert];
}

}  // namespace moeflow
