#pragma once
// How a chunk of an expert's bytes gets from the slow tier into its cache slot: the I/O half of
// the prefetcher's ChunkSink, kept apart from the cache bookkeeping so that the destination can
// change without touching the protocol. Today: file -> host slot (O_DIRECT straight into the
// slot). A VRAM tier plugs in file -> pinned staging -> device copy here, with the slot memory
// coming from the cache's Allocator.
#include <cstdint>
#include <memory>

#include "experts/expert_store.h"

namespace moeflow {

// One piece of one chunk: bytes [begin, end) of expert (layer, expert)'s projection `proj` at
// precision `prec`, to be placed at slot + begin.
struct ChunkPart {
  int layer = 0, expert = 0, proj = 0;
  Precision prec = Precision::High;
  uint64_t begin = 0, end = 0;
};

class ChunkTransfer {
 public:
  virtual ~ChunkTransfer() = default;
  // Copies the part into `slot` (the chunk's region of the slot, in the cache's memory space).
  // Called concurrently from the prefetcher's workers, each on its own chunk. Throws
  // moeflow::Error naming the file and expert on an I/O error or a short read.
  virtual void copy(const ExpertStore& store, const ChunkPart& part, uint8_t* slot) = 0;
  // "pread" (file -> host slot), or what a device transfer calls itself; for the statistics.
  virtual const char* name() const = 0;
};

// File -> host slot: the store's read straight into the slot (host memory, 4 KiB aligned).
std::unique_ptr<ChunkTransfer> make_host_chunk_transfer();

}  // namespace moeflow
