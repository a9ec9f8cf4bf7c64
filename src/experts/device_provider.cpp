#include "experts/device_provider.h"

#include <algorithm>
#include <functional>

#include "backend/device_rules.h"
#include "core/error.h"
#include "experts/resident_provider.h"
#include "gguf/expert_index.h"

namespace moeflow {
namespace {

// Expert matrices of one split file closer than this are copied as one range (a layer's
// experts are back to back in both the stacked and the packed layouts; between tensors lies
// only alignment padding): few large copies and allocations instead of one per matrix.
constexpr uint64_t kMaxGap = 64 << 10;

struct Piece {
  const uint8_t* data;
  uint64_t bytes;
  uint32_t split;    // runs never cross split files (separate mappings)
  TensorView* view;  // the view to point into the device copy
};

}  // namespace

DeviceExpertProvider::DeviceExpertProvider(const GgufFile& file, Backend& backend)
    : space_(backend.space()) {
  if (backend.space() == MemSpace::Host)
    fail(
        "DeviceExpertProvider: the {} backend keeps weights in host memory; use the resident "
        "provider",
        backend.name());
  ResidentExpertProvider host(file);
  table_.has_low = host.has_low_precision();
  const int n_layers = (int)host.index().layers.size();
  for (int p = 0; p < (table_.has_low ? 2 : 1); ++p) {
    const ExpertIndex index = p == 0 ? host.index() : build_expert_index(file, "low");
    table_.views[p].resize(n_layers);
    for (int l = 0; l < n_layers; ++l) {
      const int n_expert = host.index().layers[l].n_expert;
      if (n_expert == 0) continue;
      std::vector<ExpertView>& vs = table_.views[p][l];
      vs.resize(n_expert);
      std::vector<Piece> pieces;
      for (int e = 0; e < n_expert; ++e) {
        vs[e] = host.acquire(l, e, (Precision)p);
        for (int k = 0; k < kNumExpertProj; ++k)
          if (TensorView& v = vs[e].proj[k])
            pieces.push_back({v.data, v.nbytes(), index.layers[l].slices[e][k].split, &v});
      }
      std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
        return a.split != b.split ? a.split < b.split : std::less<const uint8_t*>()(a.data, b.data);
      });
      for (size_t i = 0; i < pieces.size();) {
        // One run of nearby matrices -> one device buffer.
        const uint8_t* lo = pieces[i].data;
        uint64_t bytes = pieces[i].bytes;  // of the run starting at lo
        size_t j = i + 1;
        while (j < pieces.size() && pieces[j].split == pieces[i].split &&
               (uint64_t)(pieces[j].data - lo) <= bytes + kMaxGap) {
          bytes = std::max(bytes, (uint64_t)(pieces[j].data - lo) + pieces[j].bytes);
          ++j;
        }
        Buffer buf = backend.allocator().allocate(bytes, kDeviceMaxAlignment);
        backend.copy(matrix_view(buf.data(), GgmlType::I8, (int64_t)bytes, 1, buf.space()),
                     matrix_view(lo, GgmlType::I8, (int64_t)bytes, 1, MemSpace::Host));
        for (size_t k = i; k < j; ++k) {
          pieces[k].view->data = buf.data() + (pieces[k].data - lo);
          pieces[k].view->space = buf.space();
        }
        device_bytes_ += bytes;
        buffers_.push_back(std::move(buf));
        i = j;
      }
    }
  }
}

ExpertView DeviceExpertProvider::acquire(int layer, int expert, Precision p) {
  return table_.at(layer, expert, p);
}

}  // namespace moeflow
