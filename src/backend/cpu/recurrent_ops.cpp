// The CPU backend's ops of recurrent (gated DeltaNet) layers and the attention output gate.
// Per token a DeltaNet layer streams its state (n_v_heads * head_k * head_v floats) once, in the
// SIMD kernels of delta_rule.h; the work is split over value heads, each owned by one thread, so
// results do not depend on the thread count.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/delta_rule.h"
#include "core/error.h"

namespace moeflow {
namespace {

void need_f32(const TensorView& v, const char* op, const char* what) {
  if (v.space == MemSpace::Device) fail("cpu backend: {} got its {} in device memory", op, what);
  if (v.type != GgmlType::F32)
    fail("cpu backend: {} needs a float32 {}, got {}", op, what, type_name(v.type));
}

float* f32_row(const TensorView& v, int64_t r) { return reinterpret_cast<float*>(v.row(r)); }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// torch.nn.functional.softplus (beta 1, threshold 20): linear above the threshold.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x * rsqrt(sum x^2 + eps) into out (n floats).
void l2_normalize(const float* x, float* out, int64_t n, float eps, float scale) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = scale / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
}

}  // namespace

void CpuBackend::sigmoid_mul(TensorView x, const TensorView& gate) {
  need_f32(x, "sigmoid_mul", "tensor");
  need_f32(gate, "sigmoid_mul", "gate");
  MOEFLOW_CHECK(x.rows() == gate.rows() && x.cols() == gate.cols(),
                "sigmoid_mul: gate {}x{} for a tensor {}x{}", gate.rows(), gate.cols(), x.rows(),
                x.cols());
  for (int64_t t = 0; t < x.rows(); ++t) {
    float* o = f32_row(x, t);
    const float* g = f32_row(gate, t);
    for (int64_t i = 0; i < x.cols(); ++i) o[i] *= sigmoid(g[i]);
  }
}

void CpuBackend::conv1d_silu(const TensorView& x, TensorView state, const TensorView& w,
                             TensorView out) {
  need_f32(x, "conv1d_silu", "input");
  need_f32(state, "conv1d_silu", "state");
  need_f32(w, "conv1d_silu", "kernel");
  need_f32(out, "conv1d_silu", "output");
  const int64_t n = x.rows(), C = x.cols(), K = w.cols();
  check_conv1d_silu_shapes(x, state, w, out);
  // Row r of the history: state rows first (r < K-1), then the inputs.
  auto hist = [&](int64_t r) -> const float* {
    return r < K - 1 ? f32_row(state, r) : f32_row(x, r - (K - 1));
  };
  auto body = [&](int64_t c0, int64_t c1, int) {
    std::vector<const float*> rows((size_t)K);
    for (int64_t t = 0; t < n; ++t) {
      float* o = f32_row(out, t);
      for (int64_t j = 0; j < K; ++j) rows[(size_t)j] = hist(t + j);
      for (int64_t c = c0; c < c1; ++c) {
        const float* wc = f32_row(w, c);
        float s = 0;
        for (int64_t j = 0; j < K; ++j) s += wc[j] * rows[(size_t)j][c];
        o[c] = s * sigmoid(s);
      }
    }
    // The new state: the last K-1 rows of the history, written after every read of the old one
    // (each thread owns its channels).
    std::vector<float> keep((size_t)(K - 1) * (c1 - c0));
    for (int64_t r = 0; r < K - 1; ++r)
      std::memcpy(keep.data() + r * (c1 - c0), hist(n + r) + c0, (c1 - c0) * sizeof(float));
    for (int64_t r = 0; r < K - 1; ++r)
      std::memcpy(f32_row(state, r) + c0, keep.data() + r * (c1 - c0), (c1 - c0) * sizeof(float));
  };
  if (pool_ && C >= 256)
    pool_->parallel_for(C, body, 64);
  else
    body(0, C, 0);
}

void CpuBackend::gated_delta_net(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& a, const TensorView& b, TensorView state,
                                 TensorView out, const DeltaNetParams& p) {
  for (auto [view, what] : {std::pair{&q, "queries"},
                            {&k, "keys"},
                            {&v, "values"},
                            {&a, "decay logits"},
                            {&b, "beta logits"},
                            {&out, "output"}})
    need_f32(*view, "gated_delta_net", what);
  need_f32(state, "gated_delta_net", "state");
  check_gated_delta_net_shapes(q, k, v, a, b, state, out, p);
  const int64_t n = q.rows(), hk = p.head_k, hv = p.head_v;
  const int NK = p.n_k_heads, NV = p.n_v_heads;
  const int per = NV / NK;
  const float scale = 1.0f / std::sqrt((float)hk);
  const kernels::DeltaStepFn step = kernels::delta_step_fn(hv);
  auto body = [&](int64_t h0, int64_t h1, int) {
    std::vector<float> qn(hk), kn(hk);
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kh = p.tiled ? h % NK : h / per;
      float* S = state.as<float>() + h * hk * hv;  // [hk][hv]
      for (int64_t t = 0; t < n; ++t) {
        l2_normalize(f32_row(q, t) + kh * hk, qn.data(), hk, p.l2_eps, scale);
        l2_normalize(f32_row(k, t) + kh * hk, kn.data(), hk, p.l2_eps, 1.0f);
        kernels::DeltaToken tok;
        tok.k = kn.data(), tok.q = qn.data(), tok.v = f32_row(v, t) + h * hv;
        for (int64_t i = 0; i < hk; ++i) tok.kq += kn[i] * qn[i];
        tok.beta = sigmoid(f32_row(b, t)[h]);
        tok.decay = std::exp(p.A[h] * softplus(f32_row(a, t)[h] + p.dt_bias[h]));
        tok.out = f32_row(out, t) + h * hv;
        step(S, hk, hv, tok);
      }
    }
  };
  if (pool_)
    pool_->parallel_for(NV, body);
  else
    body(0, NV, 0);
}

}  // namespace moeflow
