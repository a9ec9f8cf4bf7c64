#pragma once
// ExpertProvider that serves every expert straight from the mmap'ed GGUF: always resident,
// acquire is a pointer lookup. The baseline the offloading tier is compared against, and the
// reference the exactness tests check other providers against.
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_view_table.h"
#include "gguf/expert_index.h"
#include "model/moe/expert_provider.h"

namespace moeflow {

class GgufFile;

class ResidentExpertProvider : public ExpertProvider {
 public:
  // `file` must outlive the provider.
  explicit ResidentExpertProvider(const GgufFile& file);

  ExpertView acquire(int layer, int expert, Precision p = Precision::High) override;
  // Files packed with --low also serve the low-precision copies ("blk.N.ffn_*_exps.low").
  bool has_low_precision() const override { return table_.has_low; }
  const ExpertIndex& index() const { return index_; }
  // Every expert's views into the mapping (a CPU/GPU hybrid computes misses from them).
  const ExpertViewTable& table() const { return table_; }

 private:
  // views[layer][expert] of the tensors with the given name suffix.
  static std::vector<std::vector<ExpertView>> make_views(const GgufFile& file,
                                                         const ExpertIndex& index,
                                                         const std::string& suffix);
  ExpertIndex index_;
  ExpertViewTable table_;
};

}  // namespace moeflow
