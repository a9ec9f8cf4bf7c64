#pragma once
// The CUDA backend's class (internal to backend/cuda; users include cuda_backend.h). Its ops
// are split by group: cuda_backend.cpp (memory, copies, synchronisation, graphs),
// cuda_matmul.cpp (matvec / GEMM), cuda_ops.cpp (everything else). Each op checks its views on
// the host, then enqueues kernels (kernels.h) on the backend's one stream.
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_alloc.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {

// A device buffer that grows to the largest size asked for (contents not kept on growth).
struct DeviceScratch {
  Buffer buf;
  void* get(DeviceAllocator& a, size_t bytes);
};

class CudaBackend final : public Backend, private AllocListener {
 public:
  explicit CudaBackend(const CudaOptions& opt);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  MemSpace space() const override { return MemSpace::Device; }
  // Kernels read device memory and (slowly, over the bus) pinned host memory.
  bool can_read(MemSpace s) const override { return s != MemSpace::Host; }
  Allocator& allocator() override { return alloc_; }
  TensorView adopt_weight(const TensorView& w) override;

  void copy(TensorView dst, const TensorView& src) override;
  const float* read_f32(const TensorView& v, std::vector<float>& staging) override;
  void synchronize() override;

  void matmul(const TensorView& w, const TensorView& x, TensorView y) override;
  void get_rows(const TensorView& table, std::span<const int32_t> ids, TensorView out) override;
  void rms_norm(const TensorView& x, const float* weight, TensorView out, float eps) override;
  void layer_norm(const TensorView& x, const float* weight, const float* bias, TensorView out,
                  float eps) override;
  void rope(TensorView x, int n_head, int64_t head_dim, int64_t pos0, const RopeParams& p) override;
  void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                 int64_t pos0, const AttentionParams& p) override;
  void glu(const TensorView& gate, const TensorView& up, TensorView out,
           const GluParams& p) override;
  void add(TensorView x, const TensorView& y) override;
  void scale_add(TensorView acc, const TensorView& x, float s) override;
  void scale(TensorView x, float s) override;
  void softcap(TensorView x, float cap) override;
  void gated_add(TensorView acc, const TensorView& x, const TensorView& gate, GateFn f) override;
  void sigmoid_mul(TensorView x, const TensorView& gate) override;
  bool has_recurrent_ops() const override { return true; }
  void conv1d_silu(const TensorView& x, TensorView state, const TensorView& w,
                   TensorView out) override;
  void gated_delta_net(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& a, const TensorView& b, TensorView state, TensorView out,
                       const DeltaNetParams& p) override;
  void route(const TensorView& logits, const RoutingSpec& spec, const float* bias, int k,
             int32_t* experts, float* weights, float* probs) override;
  void gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) override;
  void scatter_rows(TensorView dst, std::span<const int32_t> idx, const TensorView& src) override;
  void moe_combine(TensorView out, const TensorView& slots, std::span<const float> weights,
                   std::span<const uint8_t> keep, int k) override;

  const GraphStats& graph_stats() const { return graphs_.stats(); }
  uint64_t sync_points() const { return sync_points_; }
  uint64_t host_registrations() const { return registrations_; }
  int device() const { return device_; }

 private:
  // Enqueues `launch` as one op: joins the decode step's graph capture when `capturable` and the
  // step is a decode step, else runs it directly (ending a capture first).
  template <typename F>
  void op(bool capturable, uint64_t key, F&& launch) {
    issuer_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    graphs_.before_op(capturable && step_tokens_ == 1, key);
    try {
      launch();
    } catch (...) {
      graphs_.abort();
      throw;
    }
  }
  // A host array for a kernel: inline when small, else through the staging ring.
  template <typename T>
  HostArray<T> host_array(std::span<const T> v);
  // Copies host bytes to device memory now (staged through pinned memory); returns when the
  // source may be reused.
  void upload(void* dst, const void* src, size_t bytes);
  // Host bytes to a device copy valid for the ops enqueued before the next synchronisation.
  const void* stage(const void* src, size_t bytes);
  // Ends any capture and waits for the stream (a host decision or read follows).
  void sync_point();
  void before_device_memory_change() override;
  void gemm(const TensorView& w, const TensorView& x, TensorView y);

  int device_;
  DeviceAllocator& alloc_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  GraphSegments graphs_;
  int64_t step_tokens_ = 0;  // tokens of the step in progress (from its embedding lookup)

  Buffer cublas_ws_;
  DeviceScratch act_, x16_, tile_, attn_, route_;
  // Staging of host arrays: pinned ring and its device mirror, reset at every sync point.
  Buffer stage_host_, stage_dev_;
  size_t stage_used_ = 0;
  Buffer readback_;  // pinned, for device -> host reads
  Buffer bounce_[2];
  cudaEvent_t bounce_done_[2] = {nullptr, nullptr};
  bool warned_pin_ = false;
  // The thread that issues ops (captures are thread-local: only it may end one).
  std::atomic<std::thread::id> issuer_{};
  uint64_t sync_points_ = 0;    // host waits for the stream
  uint64_t registrations_ = 0;  // cudaHostRegister calls by upload()
  // Adopted weights: host data pointer -> device copy (tied embeddings are adopted once).
  struct Adopted {
    Buffer buf;
    uint64_t bytes;
  };
  std::unordered_map<const void*, Adopted> adopted_;
  // Smaller copies replaced by a larger adoption of the same host range: earlier views may
  // still point at them, so they live as long as the backend.
  std::vector<Buffer> retired_;
};

// Views to kernel matrices (float32 rows; strides in floats).
Mat mat(const TensorView& v);
CMat cmat(const TensorView& v);

}  // namespace moeflow::cuda
