#include "experts/resident_provider.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"

namespace moeflow {

std::vector<std::vector<ExpertView>> ResidentExpertProvider::make_views(const GgufFile& file,
                                                                        const ExpertIndex& index,
                                                                        const std::string& suffix) {
  std::vector<std::vector<ExpertView>> views(index.layers.size());
  for (size_t li = 0; li < index.layers.size(); ++li) {
    const ExpertLayerIndex& L = index.layers[li];
    if (L.n_expert == 0) continue;
    const int layer = L.layer >= 0 ? L.layer : (int)li;
    // Slices carry absolute file offsets; translate them through the stacked tensor's own
    // mapping so that split files need no separate base pointer.
    const GgufTensorInfo* tensors[kNumExpertProj] = {};
    for (int p = 0; p < kNumExpertProj; ++p) {
      const ExpertTensor kind =
          p == (int)ExpertProj::Gate && L.fused_gate_up ? ExpertTensor::GateUp : (ExpertTensor)p;
      const std::string name = expert_tensor_name(layer, kind, suffix);
      if (p == (int)ExpertProj::Up && L.fused_gate_up) continue;
      tensors[p] = &file.tensor(name);
    }
    auto& vs = views[li];
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
        v.proj[p] =
            matrix_view(file.data(t) + (s.file_offset - t.file_offset), s.type, s.cols, s.rows);
      }
    }
  }
  return views;
}

ResidentExpertProvider::ResidentExpertProvider(const GgufFile& file)
    : index_(build_expert_index(file)) {
  table_.views[0] = make_views(file, index_, "weight");
  const ExpertIndex low = build_expert_index(file, "low");
  for (const ExpertLayerIndex& l : low.layers) table_.has_low |= l.n_expert > 0;
  if (!table_.has_low) return;
  for (size_t l = 0; l < index_.layers.size(); ++l) {
    const int want = index_.layers[l].n_expert;
    const int got = l < low.layers.size() ? low.layers[l].n_expert : 0;
    if (want != got)
      fail("{}: layer {} has {} experts but {} low-precision copies (re-run moeflow pack --low)",
           file.path(), l, want, got);
    for (int e = 0; e < want; ++e)
      for (int p = 0; p < kNumExpertProj; ++p) {
        const ExpertSlice& a = index_.layers[l].slices[e][p];
        const ExpertSlice& b = low.layers[l].slices[e][p];
        if (a.rows != b.rows || a.cols != b.cols)
          fail(
              "{}: layer {}: the low-precision copy of expert {} has shape {}x{}, the expert "
              "{}x{}",
              file.path(), l, e, b.rows, b.cols, a.rows, a.cols);
      }
  }
  table_.views[1] = make_views(file, low, "low");
}

ExpertView ResidentExpertProvider::acquire(int layer, int expert, Precision p) {
  return table_.at(layer, expert, p);
}

}  // namespace moeflow
