#include "experts/device_transfer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "experts/expert_store.h"

namespace moeflow {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

DeviceChunkTransfer::DeviceChunkTransfer(DeviceLink& link,
                                         std::vector<std::span<const uint8_t>> maps,
                                         const ExpertStore& store, const DeviceTransferOptions& opt)
    : link_(link), maps_(std::move(maps)), opt_(opt) {
  MOEFLOW_CHECK(opt_.staging_bytes >= kPage && opt_.staging_bytes % kPage == 0,
                "device transfer: staging buffers must be a positive multiple of 4 KiB (got {})",
                opt_.staging_bytes);
  if (opt_.source == DeviceSource::Ram) {
    MOEFLOW_CHECK(!maps_.empty(), "device transfer: copying from RAM needs the mapped model file");
    if (opt_.pin) pin_experts(store);
  }
}

DeviceChunkTransfer::~DeviceChunkTransfer() = default;

// One range per split file from its first expert byte to its last (experts are stored back to
// back; what lies between them is alignment padding or a few small tensors).
void DeviceChunkTransfer::pin_experts(const ExpertStore& store) {
  std::vector<uint64_t> lo(maps_.size(), UINT64_MAX), hi(maps_.size(), 0);
  for (const Precision p : {Precision::High, Precision::Low}) {
    if (p == Precision::Low && !store.has_low()) continue;
    for (int l = 0; l < store.n_layers(); ++l)
      for (int e = 0; e < store.n_experts(l); ++e)
        for (int k = 0; k < kNumExpertProj; ++k) {
          const ChunkLoc& c = store.chunk(l, e, k, p);
          if (c.nbytes == 0) continue;
          MOEFLOW_CHECK(c.split < maps_.size(),
                        "device transfer: expert {} of layer {} is in "
                        "split {}, but only {} mapping(s) were given",
                        e, l, c.split, maps_.size());
          const uint64_t a = c.aligned_offset + c.inner_offset;
          lo[c.split] = std::min(lo[c.split], a);
          hi[c.split] = std::max(hi[c.split], a + c.nbytes);
        }
  }
  for (size_t s = 0; s < maps_.size(); ++s) {
    if (hi[s] == 0) continue;
    const uint64_t a = lo[s] / kPage * kPage;
    const uint64_t b = std::min<uint64_t>((hi[s] + kPage - 1) / kPage * kPage, maps_[s].size());
    std::string why;
    std::unique_ptr<PinnedRange> r = link_.pin(maps_[s].data() + a, b - a, why);
    if (!r) {
      pin_refusal_ = fmt::format("page-locking {:.1f} MiB of mapped experts failed: {}",
                                 double(b - a) / (1 << 20), why);
      pins_.clear();
      pinned_bytes_ = 0;
      return;
    }
    pins_.push_back(std::move(r));
    pinned_bytes_ += b - a;
  }
}

const char* DeviceChunkTransfer::name() const {
  if (opt_.source == DeviceSource::File) return "file->staging->device";
  return pinned() ? "pinned ram->device" : "ram->staging->device";
}

DeviceChunkTransfer::Lane& DeviceChunkTransfer::take_lane() {
  std::lock_guard lk(mu_);
  if (!idle_.empty()) {
    Lane* l = idle_.back();
    idle_.pop_back();
    return *l;
  }
  auto l = std::make_unique<Lane>();
  l->queue = link_.open_lane();
  if (opt_.source == DeviceSource::File || !pinned())
    for (Buffer& b : l->staging) b = link_.pinned_allocator().allocate(opt_.staging_bytes, kPage);
  lanes_.push_back(std::move(l));
  return *lanes_.back();
}

void DeviceChunkTransfer::give_lane(Lane& l) {
  std::lock_guard lk(mu_);
  idle_.push_back(&l);
}

void DeviceChunkTransfer::copy_direct(Lane& l, const uint8_t* src, uint8_t* dst, uint64_t n) {
  l.queue->wait(l.queue->copy_async(dst, src, n));
}

void DeviceChunkTransfer::land(Lane& l) {
  const uint64_t last = std::max(l.ticket[0], l.ticket[1]);
  l.ticket[0] = l.ticket[1] = 0;
  if (last) l.queue->wait(last);
}

template <typename Fill>
void DeviceChunkTransfer::copy_staged(Lane& l, uint8_t* slot, uint64_t lo, uint64_t hi,
                                      Fill&& fill) {
  int b = 0;
  for (uint64_t off = lo; off < hi; off += opt_.staging_bytes, b ^= 1) {
    const uint64_t n = std::min(opt_.staging_bytes, hi - off);
    if (l.ticket[b]) l.queue->wait(l.ticket[b]);  // the buffer's previous copy has left it
    l.ticket[b] = 0;
    fill(l.staging[b].data(), off, n);
    l.ticket[b] = l.queue->copy_async(slot + off, l.staging[b].data(), n);
  }
  land(l);
}

void DeviceChunkTransfer::copy(const ExpertStore& store, const ChunkPart& p, uint8_t* slot) {
  const ChunkLoc& c = store.chunk(p.layer, p.expert, p.proj, p.prec);
  Lane& lane = take_lane();
  try {
    if (opt_.source == DeviceSource::File) {
      // O_DIRECT reads whole aligned pieces; the padding around the slice lands in the slot's
      // padding.
      copy_staged(lane, slot, p.begin, p.end, [&](uint8_t* buf, uint64_t off, uint64_t n) {
        store.read_range(p.layer, p.expert, p.proj, buf, off, off + n, p.prec);
      });
    } else {
      // Only the slice's own bytes: the aligned superset may run past the end of the mapping.
      const uint64_t lo = std::max(p.begin, c.inner_offset);
      const uint64_t hi = std::min(p.end, c.inner_offset + c.nbytes);
      if (lo < hi) {
        MOEFLOW_CHECK(c.split < maps_.size() && c.aligned_offset + hi <= maps_[c.split].size(),
                      "{}: expert {} of layer {} lies outside the mapped file", store.path(c.split),
                      p.expert, p.layer);
        const uint8_t* src = maps_[c.split].data() + c.aligned_offset;
        if (pinned())
          copy_direct(lane, src + lo, slot + lo, hi - lo);
        else
          copy_staged(lane, slot, lo, hi, [&](uint8_t* buf, uint64_t off, uint64_t n) {
            std::memcpy(buf, src + off, n);
          });
      }
    }
  } catch (...) {
    // The lane may still hold copies in flight from the staging buffers: let them land before
    // another worker reuses it (the error being reported is the first one).
    try {
      land(lane);
    } catch (...) {}
    give_lane(lane);
    throw;
  }
  give_lane(lane);
}

}  // namespace moeflow
