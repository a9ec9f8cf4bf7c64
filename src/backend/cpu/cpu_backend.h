#pragma once
// The reference backend: the SIMD kernels (matmul.h, ops.h, attn_math.h) on host memory, split
// over a ThreadPool by output rows. Every op gives the same bits for any thread count.
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
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
  // With copies on, adopt_weight copies each weight into memory of the backend's own
  // (anonymous pages) instead of using it where it is (the file's mmap). Offloading needs this:
  // the expert budget is chosen for a machine under memory pressure, where file pages of the
  // non-expert weights would be evicted and re-read on every token. The copy holds the same
  // bytes, so every op gives the same bits. Set before the weights are adopted. `copied` is
  // told each source range once its copy is made (to drop the file pages right away, so the
  // peak never holds both). `matmul_only` (may be empty) says which weights the model only ever
  // multiplies, never reads row by row: their copies are written in the CPU kernels' own layout
  // where one exists (matmul.h: cpu_repacked_type, repack_for_cpu; the same bits), and the
  // adopted view has that layout's type.
  void set_copy_weights(bool on, std::function<void(const void*, uint64_t)> copied = {},
                        std::function<bool(const TensorView&)> matmul_only = {}) {
    copy_weights_ = on;
    on_copied_ = std::move(copied);
    matmul_only_ = std::move(matmul_only);
  }
  uint64_t copied_weight_bytes() const { return copied_bytes_; }
  // Of those, the bytes copied into a layout of the CPU's own.
  uint64_t repacked_weight_bytes() const { return repacked_bytes_; }

  std::string name() const override { return "cpu"; }
  MemSpace space() const override { return MemSpace::Host; }
  bool can_read(MemSpace s) const override { return s != MemSpace::Device; }
  Allocator& allocator() override;
  TensorView adopt_weight(const TensorView& w) override;
  // Never copied: a token reads one row, so the whole table in anonymous memory would take
  // n_vocab rows of the plan for the few pages a sequence touches (the file is mapped
  // MADV_RANDOM, a row read faults in its own pages only).
  TensorView adopt_lookup_table(const TensorView& w) override;

  void copy(TensorView dst, const TensorView& src) override;
  const float* read_f32(const TensorView& v, std::vector<float>& staging) override;
  void synchronize() override {}

  void matmul(const TensorView& w, const TensorView& x, TensorView y) override;
  // One token: every head in one dispatch (matvec_heads); more tokens: matmul per head.
  void matmul_heads(const TensorView& w, const TensorView& x, int64_t x_step, TensorView y,
                    int64_t y_step) override;
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
  // recurrent_ops.cpp
  void sigmoid_mul(TensorView x, const TensorView& gate) override;
  bool has_recurrent_ops() const override { return true; }
  void conv1d_silu(const TensorView& x, TensorView state, const TensorView& w,
                   TensorView out) override;
  void gated_delta_net(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& a, const TensorView& b, TensorView state, TensorView out,
                       const DeltaNetParams& p) override;
  void gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) override;
  void scatter_rows(TensorView dst, std::span<const int32_t> idx, const TensorView& src) override;
  void moe_combine(TensorView out, const TensorView& slots, std::span<const float> weights,
                   std::span<const uint8_t> keep, int k) override;

 private:
  ThreadPool* pool_;
  std::vector<std::vector<float>> scores_;  // attention scratch, one row of positions per thread
  std::vector<float> x_pack_, y_pack_;      // matmul of strided rows
  bool copy_weights_ = false;
  std::function<void(const void*, uint64_t)> on_copied_;
  std::function<bool(const TensorView&)> matmul_only_;
  // One copy per source range: tied embeddings (output = token_embd) are copied once.
  struct Copy {
    Buffer bytes;
    GgmlType type;  // the source's, or the CPU layout it was repacked into
  };
  std::map<std::pair<const uint8_t*, uint64_t>, Copy> copies_;
  uint64_t copied_bytes_ = 0;
  uint64_t repacked_bytes_ = 0;
};

}  // namespace moeflow
