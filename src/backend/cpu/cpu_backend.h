#pragma once
// The reference backend: the SIMD kernels (matmul.h, ops.h, attn_math.h) on host memory, split
// over a ThreadPool by output rows. Every op gives the same bits for any thread count.
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace moeflow {

class CpuBackend final : public Backend {
 public:
  // pool may be null (single thread) and must outlive the backend's ops.
  explicit CpuBackend(ThreadPool* pool = nullptr);

  void set_pool(ThreadPool* pool);
  ThreadPool* pool() const { return pool_; }

  std::string name() const override { return "cpu"; }
  MemSpace space() const override { return MemSpace::Host; }
  bool can_read(MemSpace s) const override { return s != MemSpace::Device; }
  Allocator& allocator() override;
  TensorView adopt_weight(const TensorView& w) override;

  void copy(TensorView dst, const TensorView& src) override;
  const float* read_f32(const TensorView& v, std::vector<float>& staging) override;
  void synchronize() override {}

  void matmul(const TensorView& w, const TensorView& x, TensorView y) override;
  void get_rows(const TensorView& table, std::span<const int32_t> ids, TensorView out) override;
  void rms_norm(const TensorView& x, const float* weight, TensorView out, float eps) override;
  void layer_norm(const TensorView& x, const float* weight, const float* bias, TensorView out,
                  float eps) override;
  void rope(TensorView x, int n_head, int64_t head_dim, int64_t pos0, const RopeParams& p) override;
  void attention(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                 int64_t pos0, const AttentionParams& p) override;
  void glu(const TensorView& gate, const TensorView& up, TensorView out, const GluParams& p) override;
  void add(TensorView x, const TensorView& y) override;
  void scale_add(TensorView acc, const TensorView& x, float s) override;
  void gated_add(TensorView acc, const TensorView& x, const TensorView& gate, GateFn f) override;
  void gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) override;
  void scatter_rows(TensorView dst, std::span<const int32_t> idx, const TensorView& src) override;
  void moe_combine(TensorView out, const TensorView& slots, std::span<const float> weights,
                   std::span<const uint8_t> keep, int k) override;

 private:
  ThreadPool* pool_;
  std::vector<std::vector<float>> scores_;  // attention scratch, one row of positions per thread
  std::vector<float> x_pack_, y_pack_;      // matmul of strided rows
};

}  // namespace moeflow
