// The CUDA backend's ops other than matmul: host-side checks of the views (the CPU backend's
// messages), then the kernels of k_*.cu. Index and weight arrays from the host travel inside
// the kernel parameters when small (decode), through the staging ring otherwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace moeflow::cuda {
namespace {

void check_f32(const TensorView& v, const char* op, const char* what) {
  if (v.space == MemSpace::Host)
    fail("cuda backend: {} got its {} in pageable host memory", op, what);
  if (v.type != GgmlType::F32)
    fail("cuda backend: {} needs a float32 {}, got {}", op, what, type_name(v.type));
  if (v.row_stride() % sizeof(float) != 0)
    fail("cuda backend: {}: the {}'s row stride is not a whole number of floats", op, what);
}

uint64_t shape_key(int op, const TensorView& v) {
  return mix_key(mix_key((uint64_t)op, (uint64_t)v.rows()), (uint64_t)v.cols());
}

// ops.cpp's YaRN correction dimension, the same float steps.
float yarn_corr_dim(int64_t n_rot, int64_t n_ctx_orig, float beta, float base) {
  return (float)n_rot * std::log((float)n_ctx_orig / (beta * 2.0f * 3.14159265358979323846f)) /
         (2.0f * std::log(base));
}

}  // namespace

void CudaBackend::get_rows(const TensorView& table, std::span<const int32_t> ids, TensorView out) {
  if (table.space == MemSpace::Host)
    fail("cuda backend: get_rows got its table in pageable host memory");
  check_f32(out, "get_rows", "output");
  for (int32_t id : ids)
    MOEFLOW_CHECK(id >= 0 && id < table.rows(), "get_rows: row {} outside 0..{}", id, table.rows());
  MOEFLOW_CHECK((int64_t)ids.size() <= out.rows(), "get_rows: {} ids for {} output rows",
                ids.size(), out.rows());
  // Every forward step starts with its embedding lookup: one id is a decode step, whose work up
  // to the next host decision may be captured as a graph.
  step_tokens_ = (int64_t)ids.size();
  const IndexArray a = host_array(ids);
  op(a.dev == nullptr, mix_key(3, (uint64_t)table.type), [&] {
    cuda::get_rows(table.type, table.data, table.row_stride(), table.cols(), a, mat(out), stream_);
  });
}

void CudaBackend::rms_norm(const TensorView& x, const float* weight, TensorView out, float eps) {
  check_f32(x, "rms_norm", "input");
  check_f32(out, "rms_norm", "output");
  op(true, shape_key(4, x), [&] { cuda::rms_norm(cmat(x), weight, mat(out), eps, stream_); });
}

void CudaBackend::layer_norm(const TensorView& x, const float* weight, const float* bias,
                             TensorView out, float eps) {
  check_f32(x, "layer_norm", "input");
  check_f32(out, "layer_norm", "output");
  op(true, shape_key(5, x),
     [&] { cuda::layer_norm(cmat(x), weight, bias, mat(out), eps, stream_); });
}

void CudaBackend::rope(TensorView x, int n_head, int64_t head_dim, int64_t pos0,
                       const RopeParams& p) {
  check_f32(x, "rope", "input");
  if (p.n_rot < 0 || p.n_rot > head_dim || p.n_rot % 2 != 0)
    fail("rope: n_rot {} must be even and within head_dim {}", p.n_rot, head_dim);
  RopeArgs a;
  a.neox = p.mode == RopeMode::NeoX;
  a.n_head = n_head;
  a.head_dim = head_dim;
  a.n_rot = p.n_rot;
  a.pos0 = pos0;
  a.freq_base = p.freq_base;
  a.freq_scale = p.freq_scale;
  a.ext_factor = p.ext_factor;
  a.attn_factor = p.attn_factor;
  a.freq_factors = p.freq_factors;
  a.plain = p.plain();
  if (p.ext_factor != 0) {
    a.corr0 =
        std::fmax(0.0f, std::floor(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base)));
    a.corr1 = std::fmin((float)(p.n_rot - 1),
                        std::ceil(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base)));
  }
  op(true, shape_key(6, x), [&] { cuda::rope(mat(x), a, stream_); });
}

void CudaBackend::attention(const TensorView& q, const TensorView& k, const TensorView& v,
                            TensorView out, int64_t pos0, const AttentionParams& p) {
  check_f32(q, "attention", "query");
  check_f32(k, "attention", "key cache");
  check_f32(v, "attention", "value cache");
  check_f32(out, "attention", "output");
  const int64_t n = q.rows();
  MOEFLOW_CHECK(pos0 + n <= k.rows() && pos0 + n <= v.rows(),
                "attention: positions up to {} exceed the cache's {} rows", pos0 + n, k.rows());
  AttnArgs a;
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.head_dim = p.head_dim;
  a.head_dim_v = p.head_dim_v;
  a.scale = p.scale;
  a.window = p.window;
  a.sinks = p.sinks;
  a.pos0 = pos0;
  float* scratch = static_cast<float*>(
      attn_.get(alloc_, std::max<size_t>(1, attention_scratch_floats(n, a)) * sizeof(float)));
  op(true, shape_key(7, q),
     [&] { cuda::attention(cmat(q), cmat(k), cmat(v), mat(out), a, scratch, stream_); });
}

void CudaBackend::glu(const TensorView& gate, const TensorView& up, TensorView out,
                      const GluParams& p) {
  check_f32(gate, "glu", "gate");
  check_f32(up, "glu", "up");
  check_f32(out, "glu", "output");
  const Glu kind = p.kind == GluKind::SwiGLU  ? Glu::SwiGLU
                   : p.kind == GluKind::GeGLU ? Glu::GeGLU
                                              : Glu::SwiGLUOai;
  op(true, shape_key(8, out),
     [&] { cuda::glu(cmat(gate), cmat(up), mat(out), kind, p.alpha, p.limit, stream_); });
}

void CudaBackend::add(TensorView x, const TensorView& y) {
  check_f32(x, "add", "accumulator");
  check_f32(y, "add", "addend");
  MOEFLOW_CHECK(y.rows() == 1 || y.rows() == x.rows(), "add: {} rows added to {}", y.rows(),
                x.rows());
  op(true, shape_key(9, x), [&] { cuda::add(mat(x), cmat(y), stream_); });
}

void CudaBackend::scale_add(TensorView acc, const TensorView& x, float s) {
  check_f32(acc, "scale_add", "accumulator");
  check_f32(x, "scale_add", "addend");
  op(true, shape_key(10, acc), [&] { cuda::scale_add(mat(acc), cmat(x), s, stream_); });
}

void CudaBackend::scale(TensorView x, float s) {
  check_f32(x, "scale", "input");
  op(true, shape_key(18, x), [&] { cuda::scale(mat(x), s, stream_); });
}

void CudaBackend::softcap(TensorView x, float cap) {
  check_f32(x, "softcap", "input");
  MOEFLOW_CHECK(cap > 0, "softcap: the cap must be positive, got {}", cap);
  op(true, shape_key(19, x), [&] { cuda::softcap(mat(x), cap, stream_); });
}

void CudaBackend::gated_add(TensorView acc, const TensorView& x, const TensorView& gate, GateFn f) {
  check_f32(acc, "gated_add", "accumulator");
  check_f32(x, "gated_add", "addend");
  check_f32(gate, "gated_add", "gate");
  op(true, shape_key(11, acc),
     [&] { cuda::gated_add(mat(acc), cmat(x), cmat(gate), f == GateFn::Sigmoid, stream_); });
}

void CudaBackend::sigmoid_mul(TensorView x, const TensorView& gate) {
  check_f32(x, "sigmoid_mul", "tensor");
  check_f32(gate, "sigmoid_mul", "gate");
  MOEFLOW_CHECK(x.rows() == gate.rows() && x.cols() == gate.cols(),
                "sigmoid_mul: gate {}x{} for a tensor {}x{}", gate.rows(), gate.cols(), x.rows(),
                x.cols());
  op(true, shape_key(20, x), [&] { cuda::sigmoid_mul(mat(x), cmat(gate), stream_); });
}

// The recurrent ops: plain kernels on the stream, no allocation, no host wait, so a decode
// step's DeltaNet layers join its graph like any other op (the state is updated in place at
// the same address every step).
void CudaBackend::conv1d_silu(const TensorView& x, TensorView state, const TensorView& w,
                              TensorView out) {
  check_f32(x, "conv1d_silu", "input");
  check_f32(state, "conv1d_silu", "state");
  check_f32(w, "conv1d_silu", "kernel");
  check_f32(out, "conv1d_silu", "output");
  const int64_t K = w.cols();
  check_conv1d_silu_shapes(x, state, w, out);
  op(true, mix_key(shape_key(21, x), (uint64_t)K),
     [&] { cuda::conv1d_silu(cmat(x), mat(state), cmat(w), mat(out), stream_); });
}

void CudaBackend::gated_delta_net(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& a, const TensorView& b, TensorView state,
                                  TensorView out, const DeltaNetParams& p) {
  for (auto [view, what] : {std::pair{&q, "queries"},
                            {&k, "keys"},
                            {&v, "values"},
                            {&a, "decay logits"},
                            {&b, "beta logits"},
                            {&out, "output"}})
    check_f32(*view, "gated_delta_net", what);
  check_f32(state, "gated_delta_net", "state");
  check_gated_delta_net_shapes(q, k, v, a, b, state, out, p);
  const int64_t hk = p.head_k, hv = p.head_v;
  const int NK = p.n_k_heads, NV = p.n_v_heads;
  MOEFLOW_CHECK(hk >= 1 && hk <= kMaxDeltaNetHeadK,
                "gated_delta_net: the CUDA kernel takes head_k <= {} (shared memory), got {}",
                kMaxDeltaNetHeadK, hk);
  DeltaNetArgs d;
  d.n_k_heads = NK;
  d.n_v_heads = NV;
  d.head_k = hk;
  d.head_v = hv;
  d.tiled = p.tiled;
  d.l2_eps = p.l2_eps;
  d.q_scale = 1.0f / std::sqrt((float)hk);
  d.A = p.A;
  d.dt_bias = p.dt_bias;
  op(true, mix_key(mix_key(shape_key(22, q), (uint64_t)NV * 1000003u + (uint64_t)hv), p.tiled),
     [&] {
       cuda::gated_delta_net(cmat(q), cmat(k), cmat(v), cmat(a), cmat(b), mat(state), mat(out), d,
                             stream_);
     });
}

void CudaBackend::gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) {
  check_f32(src, "gather_rows", "source");
  check_f32(dst, "gather_rows", "destination");
  for (int32_t i : idx)
    MOEFLOW_CHECK(i >= 0 && i < src.rows(), "gather_rows: row {} outside 0..{}", i, src.rows());
  const IndexArray a = host_array(idx);
  op(a.dev == nullptr, mix_key(12, (uint64_t)idx.size() * 65537u + (uint64_t)src.cols()),
     [&] { cuda::gather_rows(cmat(src), a, mat(dst), stream_); });
}

void CudaBackend::scatter_rows(TensorView dst, std::span<const int32_t> idx,
                               const TensorView& src) {
  check_f32(dst, "scatter_rows", "destination");
  check_f32(src, "scatter_rows", "source");
  for (int32_t i : idx)
    MOEFLOW_CHECK(i >= 0 && i < dst.rows(), "scatter_rows: row {} outside 0..{}", i, dst.rows());
  const IndexArray a = host_array(idx);
  op(a.dev == nullptr, mix_key(13, (uint64_t)idx.size() * 65537u + (uint64_t)src.cols()),
     [&] { cuda::scatter_rows(mat(dst), a, cmat(src), stream_); });
}

void CudaBackend::moe_combine(TensorView out, const TensorView& slots,
                              std::span<const float> weights, std::span<const uint8_t> keep,
                              int k) {
  check_f32(out, "moe_combine", "output");
  check_f32(slots, "moe_combine", "expert outputs");
  const size_t n_slots = (size_t)out.rows() * k;
  MOEFLOW_CHECK(weights.size() >= n_slots && (keep.empty() || keep.size() >= n_slots) &&
                    slots.rows() >= (int64_t)n_slots,
                "moe_combine: {} tokens x {} experts but {} weights, {} keep flags, {} slots",
                out.rows(), k, weights.size(), keep.size(), slots.rows());
  const WeightArray w = host_array(weights.first(n_slots));
  const KeepArray kp = host_array(keep.empty() ? keep : keep.first(n_slots));
  op(w.dev == nullptr && kp.dev == nullptr, mix_key(shape_key(14, out), (uint64_t)k),
     [&] { cuda::moe_combine(mat(out), cmat(slots), w, kp, k, stream_); });
}

void CudaBackend::route(const TensorView& logits, const RoutingSpec& spec, const float* bias, int k,
                        int32_t* experts, float* weights, float* probs) {
  // Group-limited selection (DeepSeek) and SparseMixer (Phi-3.5-MoE) are sequential per token,
  // and the kernel keeps k <= 64 picks and 2 x E floats in shared memory: anything else takes
  // the host rule.
  if (spec.n_group > 1 || spec.gating == RoutingSpec::Gating::SparseMixer || k > 64 ||
      logits.cols() > 6144) {
    Backend::route(logits, spec, bias, k, experts, weights, probs);
    return;
  }
  check_f32(logits, "route", "logits");
  const int64_t n = logits.rows(), E = logits.cols();
  if (k < 1 || k > E) fail("routing: top-k {} is outside 1..{} experts", k, E);
  if (n == 0) return;
  const float* bias_dev = nullptr;
  if (bias) {
    graphs_.end();  // staged through the ring: not part of a graph
    bias_dev = static_cast<const float*>(stage(bias, (size_t)E * sizeof(float)));
  }
  const size_t out_bytes =
      (size_t)n * k * (sizeof(int32_t) + sizeof(float)) + (size_t)n * E * sizeof(float);
  uint8_t* dev = static_cast<uint8_t*>(route_.get(alloc_, out_bytes));
  if (readback_.size() < out_bytes) {
    graphs_.end();
    readback_ = PinnedHostAllocator::instance().allocate(out_bytes);
  }
  int32_t* dex = reinterpret_cast<int32_t*>(dev);
  float* dw = reinterpret_cast<float*>(dev + (size_t)n * k * sizeof(int32_t));
  float* dp = dw + (size_t)n * k;
  RouteArgs a;
  a.sigmoid = spec.gating == RoutingSpec::Gating::Sigmoid;
  a.softmax_after_topk = spec.softmax_after_topk;
  a.norm_weights = spec.norm_weights;
  a.scale = spec.scale;
  a.k = k;
  // The routing kernel and the copy of its results end the step's current graph; the host
  // waits for them and decides.
  op(bias == nullptr, mix_key(shape_key(15, logits), (uint64_t)k), [&] {
    cuda::route(cmat(logits), a, bias_dev, dex, dw, dp, stream_);
    MOEFLOW_CUDA_CHECK(
        cudaMemcpyAsync(readback_.data(), dev, out_bytes, cudaMemcpyDeviceToHost, stream_));
  });
  sync_point();
  const uint8_t* h = readback_.data();
  std::memcpy(experts, h, (size_t)n * k * sizeof(int32_t));
  std::memcpy(weights, h + (size_t)n * k * sizeof(int32_t), (size_t)n * k * sizeof(float));
  std::memcpy(probs, h + (size_t)n * k * (sizeof(int32_t) + sizeof(float)),
              (size_t)n * E * sizeof(float));
}

}  // namespace moeflow::cuda
