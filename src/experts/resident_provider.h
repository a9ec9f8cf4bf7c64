#pragma once
// ExpertProvider that serves every expert straight from the mmap'ed GGUF: always resident,
// acquire is a pointer lookup. The baseline the offloading tier is compared against, and the
// reference the exactness tests check other providers against.
#include <cstdint>
#include <vector>

#include "experts/expert_provider.h"
#include "gguf/expert_index.h"

namespace moeflow {

class GgufFile;

class ResidentExpertProvider : public ExpertProvider {
 public:
  // `file` must outlive the provider.
  explicit ResidentExpertProvider(const GgufFile& file);

  ExpertView acquire(int layer, int expert, Precision p = Precision::High) override;
  const ExpertIndex& index() const { return index_; }

 private:
  ExpertIndex index_;
  // views_[layer][expert], precomputed so acquire never allocates or searches.
  std::vector<std::vector<ExpertView>> views_;
};

}  // namespace moeflow
