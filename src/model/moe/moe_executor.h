#pragma once
// The compute side of the MoE block: everything it does goes through the Backend. It runs one
// expert over the tokens routed to it (gather their rows, the gated FFN, scatter the outputs
// into per-(token, rank) slots), combines the slots in a fixed order (token, then router rank,
// so exact modes give the same bits whatever order the experts ran in) and adds the shared
// expert.
// An expert whose weights are in memory the backend cannot read (host RAM beside a GPU: the
// CPU/GPU hybrid, experts/hybrid_rule.h) runs on the host backend: its token rows are read
// back, computed there, and its outputs copied into their slots on the backend.
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/layer_spec.h"
#include "model/layers/ffn.h"
#include "model/moe/expert_provider.h"
#include "model/weights.h"

namespace moeflow {

class MoeExecutor {
 public:
  MoeExecutor(Backend& be, int64_t n_embd, int k, int max_tokens);

  Backend& backend() { return be_; }
  // The backend that computes experts in host memory (null: none; such an expert fails).
  void set_host(Backend* host);
  Backend* host() const { return host_; }

  // Runs expert `v` on the rows of x routed to it (slots[j] / k is the token of slot j) and
  // writes each output into its slot.
  // `ready` (optional) is called before the first op on each of the expert's matrices (a
  // streamed acquire's await).
  void run_unit(const ExpertView& v, const TensorView& x, std::span<const int32_t> slots,
                const GluParams& act, const MatrixReady& ready = {});
  // y[m][d] = the expert on x[m][d].
  void run_expert(const ExpertView& v, const TensorView& x, TensorView y, const GluParams& act,
                  const MatrixReady& ready = {});
  // slot <- row `index` of `outputs` (outputs computed ahead).
  void fill_slot(int32_t slot, const TensorView& outputs, int index);
  // hy[m][d] = the expert on hx[m][d], all on the host backend (hx, hy in host memory; the
  // expert's bias rows may be in the backend's memory).
  void run_expert_on_host(const ExpertView& v, const TensorView& hx, TensorView hy,
                          const GluParams& act, const MatrixReady& ready = {});
  // out[t] = sum of kept slots weighted, in rank order.
  void combine(TensorView out, std::span<const float> weights, std::span<const uint8_t> keep,
               int n);
  // out += gate(x) * shared_expert(x)
  void add_shared(TensorView out, const LayerWeights& L, const MoeSpec& spec, const TensorView& x);

 private:
  // Fails naming the memory when no host backend can compute expert v.
  void check_host(const ExpertView& v) const;
  // y = the expert on x, computed by host_ (x and y in be_'s memory).
  void run_on_host(const ExpertView& v, const TensorView& x, TensorView y, const GluParams& act,
                   const MatrixReady& ready);
  Backend& be_;
  int64_t d_;
  int k_;
  std::vector<int32_t> rows_;  // token index of each gathered row
  BackendScratch xe_, ye_, slots_, gate_;
  TensorView slot_rows_;  // [max_tokens * k][d]: one output row per (token, rank)
  FfnScratch ffn_;
  // The host path's scratch (made with set_host).
  Backend* host_ = nullptr;
  std::unique_ptr<BackendScratch> hy_;
  std::unique_ptr<FfnScratch> host_ffn_;
  std::vector<float> hx_staging_, bias_staging_[kNumExpertProj];
};

}  // namespace moeflow
