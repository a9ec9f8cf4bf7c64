#pragma once
// Chunk transfers into device slots (a VRAM expert cache), from one of two slow tiers:
//   Ram   the mapped model file in host RAM. Page-locked once (DeviceLink::pin over every split's
//         expert bytes) so that each chunk is one DMA copy at full bus speed; when the driver
//         refuses to pin (locked-memory limits, more than the machine can lock), chunks go
//         through pinned staging buffers instead and pin_refusal() says why.
//   File  the model file on disk, when host RAM cannot hold the experts either (the third
//         tier): O_DIRECT reads into pinned staging, then device copies.
// Staged copies use two staging buffers per copy lane, so the read (or memcpy) of one piece
// overlaps the device copy of the previous one. Every copy runs on a lane of its own (one per
// I/O worker at a time) and the worker waits for its last copy before the chunk is reported
// ready: a chunk marked ready has landed in device memory.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/device_link.h"
#include "experts/chunk_transfer.h"

namespace moeflow {

enum class DeviceSource : uint8_t { Ram, File };

struct DeviceTransferOptions {
  DeviceSource source = DeviceSource::Ram;
  bool pin = true;                      // Ram: try to page-lock the mapped experts
  uint64_t staging_bytes = 4ull << 20;  // per staging buffer (two per lane), a multiple of 4 KiB
};

class DeviceChunkTransfer final : public ChunkTransfer {
 public:
  // `maps`: every split file's mapping (Ram source; may be empty for File). `link` and the
  // mappings must outlive the transfer. Throws moeflow::Error for a Ram source without
  // mappings or a bad staging size.
  DeviceChunkTransfer(DeviceLink& link, std::vector<std::span<const uint8_t>> maps,
                      const ExpertStore& store, const DeviceTransferOptions& opt);
  ~DeviceChunkTransfer() override;

  void copy(const ExpertStore& store, const ChunkPart& part, uint8_t* slot) override;
  const char* name() const override;
  DeviceSource source() const { return opt_.source; }
  bool pinned() const { return !pins_.empty(); }
  // Why the mapped experts could not be page-locked ("" when they are, or were not asked to be).
  const std::string& pin_refusal() const { return pin_refusal_; }
  // Bytes page-locked for the Ram source.
  uint64_t pinned_bytes() const { return pinned_bytes_; }

 private:
  struct Lane {
    std::unique_ptr<CopyLane> queue;
    Buffer staging[2];
    uint64_t ticket[2] = {0, 0};  // the copy still reading staging[i] (0: none)
  };
  void pin_experts(const ExpertStore& store);
  Lane& take_lane();
  void give_lane(Lane& l);
  void copy_direct(Lane& l, const uint8_t* src, uint8_t* dst, uint64_t n);
  // Waits until the lane's copies out of its staging buffers have landed (copies on a lane
  // complete in order: the later ticket covers both) and clears the tickets.
  static void land(Lane& l);
  // Copies pieces [lo, hi) of a chunk through staging; fill(buf, off, n) writes bytes
  // [off, off + n) of the chunk to buf.
  template <typename Fill>
  void copy_staged(Lane& l, uint8_t* slot, uint64_t lo, uint64_t hi, Fill&& fill);

  DeviceLink& link_;
  std::vector<std::span<const uint8_t>> maps_;
  DeviceTransferOptions opt_;
  std::vector<std::unique_ptr<PinnedRange>> pins_;
  std::string pin_refusal_;
  uint64_t pinned_bytes_ = 0;
  std::mutex mu_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // every lane made so far
  std::vector<Lane*> idle_;                   // lanes no worker holds now
};

}  // namespace moeflow
