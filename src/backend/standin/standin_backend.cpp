// The stand-in device's backend: the CPU backend's arithmetic behind a GPU's rules (memory it
// can read, an allocator of device memory, work on a stream). See standin_device.h.
#include <cstring>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/standin/standin_device.h"
#include "backend/standin/standin_memory.h"
#include "backend/standin/stream.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace moeflow {
namespace standin {
namespace {

bool host_side(MemSpace s) { return s != MemSpace::Device; }

// The same memory as the CPU backend reads it (the stand-in's device memory is host memory).
TensorView cpu_view(TensorView v) {
  if (v.space == MemSpace::Device) v.space = MemSpace::Host;
  return v;
}

class StandInBackend final : public Backend {
 public:
  explicit StandInBackend(int threads)
      : pool_(threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr), cpu_(pool_.get()) {}
  ~StandInBackend() override {
    try {
      stream_.drain();
    } catch (...) {  // a failure nobody read: the destructor does not throw
    }
  }

  std::string name() const override { return "standin"; }
  MemSpace space() const override { return MemSpace::Device; }
  bool can_read(MemSpace s) const override { return s != MemSpace::Host; }
  Allocator& allocator() override { return DeviceAllocator::instance(); }

  TensorView adopt_weight(const TensorView& w) override {
    if (!w) return w;
    if (w.space == MemSpace::Device) {
      need("adopt_weight", "weight", w);
      return w;
    }
    const uint64_t bytes = w.nbytes();
    auto it = adopted_.find(w.data);
    if (it == adopted_.end() || it->second.size() < bytes) {
      Buffer b = allocator().allocate(bytes);
      std::memcpy(b.data(), w.data, bytes);
      count(&StandInCounts::uploads);
      count(&StandInCounts::upload_bytes, bytes);
      // A smaller copy of the same host range may still be pointed at by earlier views: keep it.
      if (it != adopted_.end()) retired_.push_back(std::move(it->second));
      it = adopted_.insert_or_assign(w.data, std::move(b)).first;
    }
    TensorView v = w;
    v.data = it->second.data();
    v.space = MemSpace::Device;
    return v;
  }

  void copy(TensorView dst, const TensorView& src) override {
    if (host_side(dst.space) && host_side(src.space)) {
      sync();  // the device may still be writing pinned memory
      cpu_.copy(dst, src);
      return;
    }
    if (!host_side(dst.space)) need("copy", "destination", dst);
    if (!host_side(src.space)) need("copy", "source", src);
    if (!host_side(dst.space) && !host_side(src.space)) {
      enqueue([this, dst, src] { cpu_.copy(cpu_view(dst), cpu_view(src)); });
      return;
    }
    if (host_side(src.space)) {  // to the device: the caller may reuse its memory on return
      count(&StandInCounts::uploads);
      count(&StandInCounts::upload_bytes, src.nbytes());
      enqueue([this, dst, src] { cpu_.copy(cpu_view(dst), src); });
      sync();
      return;
    }
    sync();  // to the host: the contents must be there on return
    cpu_.copy(dst, cpu_view(src));
  }

  const float* read_f32(const TensorView& v, std::vector<float>& staging) override {
    if (v.type != GgmlType::F32)
      fail("stand-in device: read_f32 needs a float32 tensor, got {}", type_name(v.type));
    if (!v.rows_contiguous()) fail("stand-in device: read_f32 needs rows back to back");
    if (host_side(v.space)) {
      sync();
      return v.as<const float>();
    }
    need("read_f32", "tensor", v);
    sync();
    staging.resize((size_t)v.rows() * v.cols());
    std::memcpy(staging.data(), v.data, staging.size() * sizeof(float));
    return staging.data();
  }

  void synchronize() override { sync(); }

  void matmul(const TensorView& w, const TensorView& x, TensorView y) override {
    need("matmul", "weight", w), need("matmul", "input", x), need("matmul", "output", y);
    enqueue([this, w, x, y] { cpu_.matmul(cpu_view(w), cpu_view(x), cpu_view(y)); });
  }
  void get_rows(const TensorView& table, std::span<const int32_t> ids, TensorView out) override {
    need("get_rows", "table", table), need("get_rows", "output", out);
    enqueue([this, table, i = vec(ids), out] { cpu_.get_rows(cpu_view(table), i, cpu_view(out)); });
  }
  void rms_norm(const TensorView& x, const float* weight, TensorView out, float eps) override {
    need("rms_norm", "input", x), need("rms_norm", "output", out);
    need_ptr("rms_norm", "weight", weight, x.cols() * sizeof(float));
    enqueue([=, this] { cpu_.rms_norm(cpu_view(x), weight, cpu_view(out), eps); });
  }
  void layer_norm(const TensorView& x, const float* weight, const float* bias, TensorView out,
                  float eps) override {
    need("layer_norm", "input", x), need("layer_norm", "output", out);
    need_ptr("layer_norm", "weight", weight, x.cols() * sizeof(float));
    need_ptr("layer_norm", "bias", bias, x.cols() * sizeof(float));
    enqueue([=, this] { cpu_.layer_norm(cpu_view(x), weight, bias, cpu_view(out), eps); });
  }
  void rope(TensorView x, int n_head, int64_t head_dim, int64_t pos0,
            const RopeParams& p) override {
    need("rope", "tensor", x);
    need_ptr("rope", "frequency factors", p.freq_factors, p.n_rot / 2 * sizeof(float));
    enqueue([=, this] { cpu_.rope(cpu_view(x), n_head, head_dim, pos0, p); });
  }
  void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                 int64_t pos0, const AttentionParams& p) override {
    need("attention", "queries", q), need("attention", "keys", k), need("attention", "values", v);
    need("attention", "output", out);
    need_ptr("attention", "sinks", p.sinks, p.n_head * sizeof(float));
    enqueue([=, this] {
      cpu_.attention(cpu_view(q), cpu_view(k), cpu_view(v), cpu_view(out), pos0, p);
    });
  }
  void glu(const TensorView& gate, const TensorView& up, TensorView out,
           const GluParams& p) override {
    need("glu", "gate", gate), need("glu", "up", up), need("glu", "output", out);
    enqueue([=, this] { cpu_.glu(cpu_view(gate), cpu_view(up), cpu_view(out), p); });
  }
  void add(TensorView x, const TensorView& y) override {
    need("add", "accumulator", x), need("add", "addend", y);
    enqueue([=, this] { cpu_.add(cpu_view(x), cpu_view(y)); });
  }
  void scale_add(TensorView acc, const TensorView& x, float s) override {
    need("scale_add", "accumulator", acc), need("scale_add", "addend", x);
    enqueue([=, this] { cpu_.scale_add(cpu_view(acc), cpu_view(x), s); });
  }
  void scale(TensorView x, float s) override {
    need("scale", "input", x);
    enqueue([=, this] { cpu_.scale(cpu_view(x), s); });
  }
  void softcap(TensorView x, float cap) override {
    need("softcap", "input", x);
    enqueue([=, this] { cpu_.softcap(cpu_view(x), cap); });
  }
  void gated_add(TensorView acc, const TensorView& x, const TensorView& gate, GateFn f) override {
    need("gated_add", "accumulator", acc), need("gated_add", "addend", x),
        need("gated_add", "gate", gate);
    enqueue([=, this] { cpu_.gated_add(cpu_view(acc), cpu_view(x), cpu_view(gate), f); });
  }
  void sigmoid_mul(TensorView x, const TensorView& gate) override {
    need("sigmoid_mul", "tensor", x), need("sigmoid_mul", "gate", gate);
    enqueue([=, this] { cpu_.sigmoid_mul(cpu_view(x), cpu_view(gate)); });
  }
  bool has_recurrent_ops() const override { return true; }
  void conv1d_silu(const TensorView& x, TensorView state, const TensorView& w,
                   TensorView out) override {
    need("conv1d_silu", "input", x), need("conv1d_silu", "state", state);
    need("conv1d_silu", "kernel", w), need("conv1d_silu", "output", out);
    enqueue(
        [=, this] { cpu_.conv1d_silu(cpu_view(x), cpu_view(state), cpu_view(w), cpu_view(out)); });
  }
  void gated_delta_net(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& a, const TensorView& b, TensorView state, TensorView out,
                       const DeltaNetParams& p) override {
    need("gated_delta_net", "queries", q), need("gated_delta_net", "keys", k);
    need("gated_delta_net", "values", v), need("gated_delta_net", "decay logits", a);
    need("gated_delta_net", "beta logits", b), need("gated_delta_net", "state", state);
    need("gated_delta_net", "output", out);
    need_ptr("gated_delta_net", "A", p.A, p.n_v_heads * sizeof(float));
    need_ptr("gated_delta_net", "dt_bias", p.dt_bias, p.n_v_heads * sizeof(float));
    enqueue([=, this] {
      cpu_.gated_delta_net(cpu_view(q), cpu_view(k), cpu_view(v), cpu_view(a), cpu_view(b),
                           cpu_view(state), cpu_view(out), p);
    });
  }
  void gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) override {
    need("gather_rows", "source", src), need("gather_rows", "destination", dst);
    enqueue([this, src, i = vec(idx), dst] { cpu_.gather_rows(cpu_view(src), i, cpu_view(dst)); });
  }
  void scatter_rows(TensorView dst, std::span<const int32_t> idx, const TensorView& src) override {
    need("scatter_rows", "destination", dst), need("scatter_rows", "source", src);
    enqueue([this, dst, i = vec(idx), src] { cpu_.scatter_rows(cpu_view(dst), i, cpu_view(src)); });
  }
  void moe_combine(TensorView out, const TensorView& slots, std::span<const float> weights,
                   std::span<const uint8_t> keep, int k) override {
    need("moe_combine", "output", out), need("moe_combine", "expert outputs", slots);
    enqueue([this, out, slots, w = vec(weights), kp = vec(keep), k] {
      cpu_.moe_combine(cpu_view(out), cpu_view(slots), w, kp, k);
    });
  }

 private:
  // Host arrays are copied when the op is issued (CUDA stages them the same way): the caller
  // may reuse its own at once.
  template <typename T>
  static std::vector<T> vec(std::span<const T> s) {
    return {s.begin(), s.end()};
  }

  void need(const char* op, const char* what, const TensorView& v) const {
    if (!v) return;
    if (v.space == MemSpace::Host)
      fail(
          "stand-in device: {}: the {} ({} {}x{}) is in pageable host memory, which a GPU "
          "cannot read",
          op, what, type_name(v.type), v.rows(), v.cols());
    if (!MemoryMap::instance().holds(v.space, v.data, v.nbytes()))
      fail(
          "stand-in device: {}: the {} ({} {}x{}, {} bytes, tagged {}) does not lie inside live "
          "{} memory: it was freed, or its memory space is wrong",
          op, what, type_name(v.type), v.rows(), v.cols(), v.nbytes(), mem_space_name(v.space),
          v.space == MemSpace::Device ? "device" : "pinned host");
  }
  void need_ptr(const char* op, const char* what, const void* p, size_t n) const {
    if (!p) return;
    const MemoryMap& m = MemoryMap::instance();
    if (!m.holds(MemSpace::Device, p, n) && !m.holds(MemSpace::PinnedHost, p, n))
      fail(
          "stand-in device: {}: the {} ({} bytes) is not in device or pinned memory: a GPU "
          "cannot read it",
          op, what, n);
  }
  void enqueue(std::function<void()> work) {
    count(&StandInCounts::ops);
    stream_.enqueue(std::move(work));
  }
  void sync() {
    count(&StandInCounts::syncs);
    stream_.drain();
  }

  std::unique_ptr<ThreadPool> pool_;
  CpuBackend
      cpu_;  // used by the stream thread only (and by the host for host-side copies after a drain)
  std::unordered_map<const void*, Buffer> adopted_;
  std::vector<Buffer> retired_;
  Stream stream_;  // last: its thread stops (finishing its queue) before the rest goes
};

}  // namespace
}  // namespace standin

std::unique_ptr<Backend> make_standin_backend(int threads) {
  return std::make_unique<standin::StandInBackend>(threads);
}

}  // namespace moeflow
