#pragma once
// A device backend without a GPU: memory tagged PinnedHost (so views are "not host" to the code
// under test), every op computed by the CPU backend, copies and synchronisations counted.
// Not the production stand-in (backend/standin/standin_device.h, which tests/gpu and the op
// suite use): these tests need what that one does not offer — per-instance counts of copy() and
// synchronize() calls alone (standin_counts() is process-wide and counts every host wait), the
// live buffer map (views lie inside the backend's own buffers), a device that may read host
// memory (reads_host) beside one that refuses it, and synchronous ops, so exact sync counts and
// host views stay meaningful.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/allocator.h"
#include "core/error.h"

namespace moeflow::test {

// Host memory that says it is pinned: what a device backend's allocator hands out, minus the GPU.
class TaggedAllocator final : public Allocator {
 public:
  MemSpace space() const override { return MemSpace::PinnedHost; }
  std::string name() const override { return "tagged host"; }
  Buffer allocate(size_t bytes, size_t alignment = 64) override {
    const size_t a = std::max<size_t>(alignment, 64), n = (bytes + a - 1) / a * a;
    void* p = std::aligned_alloc(a, n == 0 ? a : n);
    if (!p) fail("tagged allocator: out of memory");
    live[static_cast<uint8_t*>(p)] = bytes;
    return make(static_cast<uint8_t*>(p), bytes);
  }
  std::map<uint8_t*, size_t> live;  // buffers handed out and not yet released

 protected:
  void release(uint8_t* data, size_t) override {
    live.erase(data);
    std::free(data);
  }
};

// A backend whose memory space is not the host's, computing with the CPU backend.
class StandInDevice final : public Backend {
 public:
  std::string name() const override { return "stand-in device"; }
  MemSpace space() const override { return MemSpace::PinnedHost; }
  // reads_host = false: like a GPU, it cannot read pageable host memory (experts served from
  // the mapped file must then run on a host backend).
  bool can_read(MemSpace s) const override {
    return (reads_host || s != MemSpace::Host) && cpu_.can_read(s);
  }
  bool reads_host = true;
  Allocator& allocator() override { return alloc_; }
  TensorView adopt_weight(const TensorView& w) override { return cpu_.adopt_weight(w); }
  void copy(TensorView dst, const TensorView& src) override {
    ++copies;
    cpu_.copy(dst, src);
  }
  const float* read_f32(const TensorView& v, std::vector<float>& s) override {
    return cpu_.read_f32(v, s);
  }
  void synchronize() override { ++syncs; }
  void matmul(const TensorView& w, const TensorView& x, TensorView y) override {
    cpu_.matmul(w, x, y);
  }
  void get_rows(const TensorView& t, std::span<const int32_t> ids, TensorView out) override {
    cpu_.get_rows(t, ids, out);
  }
  void rms_norm(const TensorView& x, const float* w, TensorView out, float eps) override {
    cpu_.rms_norm(x, w, out, eps);
  }
  void layer_norm(const TensorView& x, const float* w, const float* b, TensorView out,
                  float eps) override {
    cpu_.layer_norm(x, w, b, out, eps);
  }
  void rope(TensorView x, int nh, int64_t hd, int64_t pos0, const RopeParams& p) override {
    cpu_.rope(x, nh, hd, pos0, p);
  }
  void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                 int64_t pos0, const AttentionParams& p) override {
    cpu_.attention(q, k, v, out, pos0, p);
  }
  void glu(const TensorView& g, const TensorView& u, TensorView out, const GluParams& p) override {
    cpu_.glu(g, u, out, p);
  }
  void add(TensorView x, const TensorView& y) override { cpu_.add(x, y); }
  void scale_add(TensorView acc, const TensorView& x, float s) override {
    cpu_.scale_add(acc, x, s);
  }
  void scale(TensorView x, float s) override { cpu_.scale(x, s); }
  void softcap(TensorView x, float cap) override { cpu_.softcap(x, cap); }
  void gated_add(TensorView acc, const TensorView& x, const TensorView& g, GateFn f) override {
    cpu_.gated_add(acc, x, g, f);
  }
  void gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) override {
    cpu_.gather_rows(src, idx, dst);
  }
  void scatter_rows(TensorView dst, std::span<const int32_t> idx, const TensorView& src) override {
    cpu_.scatter_rows(dst, idx, src);
  }
  void moe_combine(TensorView out, const TensorView& slots, std::span<const float> w,
                   std::span<const uint8_t> keep, int k) override {
    cpu_.moe_combine(out, slots, w, keep, k);
  }
  TaggedAllocator alloc_;
  int copies = 0;
  int syncs = 0;

 private:
  CpuBackend cpu_;
};

}  // namespace moeflow::test
