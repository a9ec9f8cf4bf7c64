#include "experts/chunk_transfer.h"

namespace moeflow {
namespace {

class HostChunkTransfer final : public ChunkTransfer {
 public:
  void copy(const ExpertStore& store, const ChunkPart& p, uint8_t* slot) override {
    store.read_part(p.layer, p.expert, p.proj, slot, p.begin, p.end, p.prec);
  }
  const char* name() const override { return "pread"; }
};

}  // namespace

std::unique_ptr<ChunkTransfer> make_host_chunk_transfer() {
  return std::make_unique<HostChunkTransfer>();
}

}  // namespace moeflow
