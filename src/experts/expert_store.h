#pragma once
// ExpertStore: the slow tier. Knows where every expert's bytes live in the model file(s) and
// reads one projection ("chunk") of one expert into a caller-owned 4 KiB-aligned buffer.
//
// Reads use O_DIRECT so expert bytes never enter the page cache (otherwise the RAM budget
// of the expert cache would be a lie). GGUF only aligns tensor data to 32 bytes, so each read
// covers the 4 KiB-aligned superset of the slice and the caller points into it at
// `inner_offset`. If the filesystem refuses O_DIRECT (tmpfs), the store falls back to
// buffered reads, warns once on stderr and reports direct_io() == false in the statistics.
//
// A file packed with `moeflow pack --low TYPE` also holds a low-precision copy of every
// expert (tensors "blk.N.ffn_*_exps.low"); the store then knows both precisions' byte ranges
// and every accessor takes the precision (default: the model's own, high).
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gguf/expert_index.h"
#include "model/moe/expert_provider.h"

namespace moeflow {

class GgufFile;

constexpr uint64_t kDirectAlign = 4096;

// One aligned read that yields one expert slice.
struct ChunkLoc {
  uint32_t split = 0;
  uint64_t aligned_offset = 0;  // file offset of the read, multiple of 4 KiB
  uint64_t aligned_len = 0;     // bytes read, multiple of 4 KiB (0: projection absent)
  uint64_t inner_offset = 0;    // where the slice starts inside the read buffer
  uint64_t nbytes = 0;          // slice size
  // The read is the slice itself, no aligned superset around it (a `moeflow pack`ed file).
  bool exact() const { return inner_offset == 0 && aligned_len == nbytes; }
};

// Passed to the fault hook after every read, so tests can inject I/O errors and short reads
// at exactly the point where real ones would surface.
struct ReadEvent {
  int layer = -1;
  int expert = -1;
  int proj = -1;
  const ChunkLoc* loc = nullptr;
  Precision precision = Precision::High;
  uint64_t begin = 0;  // the part of the aligned chunk this read covered: [begin, end)
  uint64_t end = 0;
};
// `result` is the byte count read (or -errno); the hook may overwrite it.
using FaultHook = std::function<void(const ReadEvent&, int64_t& result)>;

struct StoreOptions {
  bool direct_io = true;  // false: buffered reads on purpose (benchmarks of the page-cache path)
};

class ExpertStore {
 public:
  // `paths` are the split files in order; `index` their expert byte ranges, `low` those of the
  // low-precision copies (an index without experts: none). Throws if `low` does not have the
  // layers, experts and shapes of `index`.
  ExpertStore(std::vector<std::string> paths, ExpertIndex index, StoreOptions opt = {},
              ExpertIndex low = {});
  // Convenience for a model opened with GgufFile (uses build_expert_index for both).
  static std::unique_ptr<ExpertStore> open(const GgufFile& f, StoreOptions opt = {});
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  const ExpertIndex& index(Precision p = Precision::High) const { return tier(p).index; }
  bool has_low() const { return has_low_; }
  const std::string& path(uint32_t split = 0) const { return paths_.at(split); }
  int n_layers() const { return tiers_[0].index.n_layers; }
  int n_experts(int layer) const;
  int max_experts() const { return max_experts_; }
  bool is_moe_layer(int layer) const { return n_experts(layer) > 0; }

  const ChunkLoc& chunk(int layer, int expert, int proj, Precision p = Precision::High) const;
  // Offset of projection `proj` inside an expert slot (4 KiB-aligned regions back to back).
  uint64_t slot_region(int layer, int expert, int proj, Precision p = Precision::High) const;
  // Bytes one slot needs to hold the largest expert (sum of its aligned chunk reads).
  uint64_t slot_bytes(Precision p = Precision::High) const { return tier(p).slot_bytes; }
  // Sum of every expert's slice bytes (what --cache-rate / --low-cache-rate are fractions of).
  uint64_t total_expert_bytes(Precision p = Precision::High) const { return tier(p).total_bytes; }

  // Reads the chunk into `dst` (4 KiB-aligned, >= aligned_len bytes). Thread-safe. Throws
  // moeflow::Error naming the file, expert and offset on an I/O error or a short read.
  void read(int layer, int expert, int proj, uint8_t* dst, Precision p = Precision::High) const;
  // Reads bytes [begin, end) of the aligned chunk into dst + begin (begin a multiple of 4 KiB,
  // end too or the chunk's end), so a speculative load can stop between parts and let a
  // demand load take the disk. Same errors as read().
  void read_part(int layer, int expert, int proj, uint8_t* dst, uint64_t begin, uint64_t end,
                 Precision p = Precision::High) const;
  // The same bytes [begin, end) written to out[0, end - begin) (out 4 KiB-aligned): a staging
  // buffer smaller than the chunk, on the way to a device slot.
  void read_range(int layer, int expert, int proj, uint8_t* out, uint64_t begin, uint64_t end,
                  Precision p = Precision::High) const;

  // Every present slice of `p` is read exactly, no aligned superset around it: what
  // `moeflow pack` makes of a file (GGUF's default 32-byte alignment puts slices off 4 KiB).
  bool slices_aligned(Precision p = Precision::High) const;

  bool direct_io() const { return direct_; }
  void set_fault_hook(FaultHook hook);

 private:
  // One precision's byte ranges.
  struct Tier {
    ExpertIndex index;
    // locs[layer][expert * 3 + proj], regions likewise
    std::vector<std::vector<ChunkLoc>> locs;
    std::vector<std::vector<uint64_t>> regions;
    uint64_t slot_bytes = 0;
    uint64_t total_bytes = 0;
  };
  void build_tier(Tier& t, const char* what);
  const Tier& tier(Precision p) const;
  void open_files(bool want_direct);

  std::vector<std::string> paths_;
  Tier tiers_[2];
  bool has_low_ = false;
  int max_experts_ = 0;

  // Fixed after construction (O_DIRECT support is probed once), so reads need no lock.
  std::vector<int> fds_;
  bool direct_ = true;
  mutable std::mutex hook_mu_;
  FaultHook hook_;
};

}  // namespace moeflow
