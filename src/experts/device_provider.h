#pragma once
// ExpertProvider for a model whose experts all fit in the fast tier of a device backend: every
// expert (and every low-precision copy of one) is copied into the backend's memory (VRAM) once,
// at load; acquire is a lookup. It is to the CUDA backend what ResidentExpertProvider is to the
// CPU one.
//
// The seam for the VRAM tier that does not hold every expert: a cache of expert slots in
// backend memory, filled by the prefetcher from the slow tier through pinned host buffers, is
// another ExpertProvider over the same protocol (like CachedExpertProvider over RAM): the MoE
// block only sees ExpertViews in a memory space the backend reads.
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "experts/expert_view_table.h"
#include "model/moe/expert_provider.h"

namespace moeflow {

class GgufFile;

class DeviceExpertProvider : public ExpertProvider {
 public:
  // Copies the experts of `file` into `backend`'s memory; both must outlive the provider.
  // Throws moeflow::Error (naming the size) when the memory runs out.
  DeviceExpertProvider(const GgufFile& file, Backend& backend);

  ExpertView acquire(int layer, int expert, Precision p = Precision::High) override;
  bool has_low_precision() const override { return table_.has_low; }
  // The backend's memory: the MoE block checks that its backend can read the experts there.
  MemSpace memory_space() const override { return space_; }
  // Bytes of expert weights held in device memory.
  uint64_t device_bytes() const { return device_bytes_; }

 private:
  std::vector<Buffer> buffers_;
  ExpertViewTable table_;
  uint64_t device_bytes_ = 0;
  MemSpace space_;
};

}  // namespace moeflow
