#include "experts/device_provider.h"

#include <algorithm>

#include "core/error.h"
#include "experts/resident_provider.h"

namespace moeflow {
namespace {

// Expert matrices closer than this in the file are copied as one range (the projections of a
// layer's experts are back to back in both the stacked and the packed layouts): few large
// copies and allocations instead of one per matrix.
constexpr uint64_t kMaxGap = 1 << 20;

struct Piece {
  const uint8_t* data;
  uint64_t bytes;
  TensorView* view;  // the view to point into the device copy
};

}  // namespace

DeviceExpertProvider::DeviceExpertProvider(const GgufFile& file, Backend& backend) {
  if (backend.space() == MemSpace::Host)
    fail("DeviceExpertProvider: the {} backend keeps weights in host memory; use the resident "
         "provider",
         backend.name());
  ResidentExpertProvider host(file);
  has_low_ = host.has_low_precision();
  const int n_layers = (int)host.index().layers.size();
  for (int p = 0; p < (has_low_ ? 2 : 1); ++p) {
    views_[p].resize(n_layers);
    for (int l = 0; l < n_layers; ++l) {
      const int n_expert = host.index().layers[l].n_expert;
      if (n_expert == 0) continue;
      std::vector<ExpertView>& vs = views_[p][l];
      vs.resize(n_expert);
      std::vector<Piece> pieces;
      for (int e = 0; e < n_expert; ++e) {
        vs[e] = host.acquire(l, e, (Precision)p);
        for (TensorView& v : vs[e].proj)
          if (v) pieces.push_back({v.data, v.nbytes(), &v});
      }
      std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.data < b.data; });
      for (size_t i = 0; i < pieces.size();) {
        // One run of nearby matrices -> one device buffer.
        const uint8_t* lo = pieces[i].data;
        const uint8_t* hi = lo + pieces[i].bytes;
        size_t j = i + 1;
        while (j < pieces.size() && pieces[j].data <= hi + kMaxGap) {
          hi = std::max(hi, pieces[j].data + pieces[j].bytes);
          ++j;
        }
        const uint64_t bytes = (uint64_t)(hi - lo);
        Buffer buf = backend.allocator().allocate(bytes, 256);
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
  if (p == Precision::Low && !has_low_)
    fail("expert {} of layer {} was asked for in low precision, but the model has no "
         "low-precision copies (pack it with `moeflow pack --low TYPE`)",
         expert, layer);
  const auto& views = views_[p == Precision::Low ? 1 : 0];
  if (layer < 0 || layer >= (int)views.size() || expert < 0 || expert >= (int)views[layer].size())
    fail("no expert {} in layer {}", expert, layer);
  return views[layer][expert];
}

}  // namespace moeflow
