#include "backend/backend.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moeflow {
namespace {

// Keeps the topk_group best groups of n_group (ties: lower group first); masks the rest.
void mask_groups(const float* sel, int n_expert, const RoutingSpec& spec,
                 std::vector<char>& masked) {
  const int G = spec.n_group, per = n_expert / G;
  std::vector<float> gscore(G), top(spec.group_top);
  for (int g = 0; g < G; ++g) {
    std::fill(top.begin(), top.end(), -INFINITY);
    for (int e = g * per; e < (g + 1) * per; ++e) {
      // Insert into the descending list of the group's best group_top scores.
      for (int j = 0; j < spec.group_top; ++j)
        if (sel[e] > top[j]) {
          for (int m = spec.group_top - 1; m > j; --m) top[m] = top[m - 1];
          top[j] = sel[e];
          break;
        }
    }
    float s = 0;
    for (float v : top) s += v;
    gscore[g] = s;
  }
  std::vector<char> keep(G, 0);
  for (int r = 0; r < spec.topk_group; ++r) {
    int best = -1;
    for (int g = 0; g < G; ++g)
      if (!keep[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
    keep[best] = 1;
  }
  masked.assign(n_expert, 0);
  for (int e = 0; e < n_expert; ++e) masked[e] = !keep[e / per];
}

// Rank r's weight: softmax of its logit m over the experts not chosen before r whose logits lie
// within the relative distance 2 * eps of m (selection is top-k of the logits either way).
void sparse_mixer_weights(const float* lg, int n_expert, int k, const int32_t* ex, float* w,
                          float eps) {
  for (int r = 0; r < k; ++r) {
    const float m = lg[ex[r]];
    double sum = 0;
    for (int e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int j = 0; j < r; ++j) taken |= ex[j] == e;
      // Written as the model computes it: a 0/0 (NaN) distance keeps the expert.
      if (taken || (m - lg[e]) / std::max(std::fabs(lg[e]), m) > 2 * eps) continue;
      sum += std::exp((double)lg[e] - m);
    }
    w[r] = (float)(1.0 / sum);
  }
}

}  // namespace

void route_on_host(const float* logits, int n, int n_expert, const RoutingSpec& spec,
                   const float* bias, int k, int32_t* experts, float* weights, float* probs) {
  if (k < 1 || k > n_expert) fail("routing: top-k {} is outside 1..{} experts", k, n_expert);
  if (spec.n_group > 1 &&
      (n_expert % spec.n_group != 0 || spec.topk_group < 1 || spec.topk_group > spec.n_group ||
       spec.group_top < 1 || spec.group_top > n_expert / spec.n_group))
    fail("routing: {} experts cannot be split into {} groups keeping {} (scored by the top {})",
         n_expert, spec.n_group, spec.topk_group, spec.group_top);
  if (spec.gating == RoutingSpec::Gating::SparseMixer && (bias || spec.n_group > 1))
    fail("routing: SparseMixer takes neither a selection bias nor expert groups");
  std::vector<float> sel_buf;
  std::vector<char> masked;
  for (int t = 0; t < n; ++t) {
    const float* lg = logits + (size_t)t * n_expert;
    float* p = probs + (size_t)t * n_expert;
    int32_t* ex = experts + (size_t)t * k;
    float* w = weights + (size_t)t * k;
    if (spec.gating == RoutingSpec::Gating::Sigmoid) {
      for (int e = 0; e < n_expert; ++e) p[e] = 1.0f / (1.0f + std::exp(-lg[e]));
    } else if (spec.softmax_after_topk) {
      for (int e = 0; e < n_expert; ++e) p[e] = lg[e];
    } else {
      float mx = lg[0];
      for (int e = 1; e < n_expert; ++e) mx = std::max(mx, lg[e]);
      double sum = 0;
      for (int e = 0; e < n_expert; ++e) {
        p[e] = std::exp(lg[e] - mx);
        sum += p[e];
      }
      const float inv = (float)(1.0 / sum);
      for (int e = 0; e < n_expert; ++e) p[e] *= inv;
    }
    // SparseMixer selects on the logits themselves (two close logits may round to one probability).
    const float* sel = spec.gating == RoutingSpec::Gating::SparseMixer ? lg : p;
    if (bias) {
      sel_buf.resize(n_expert);
      for (int e = 0; e < n_expert; ++e) sel_buf[e] = p[e] + bias[e];
      sel = sel_buf.data();
    }
    if (spec.n_group > 1) mask_groups(sel, n_expert, spec, masked);
    // k is small (<= 8 in practice): repeated selection keeps the tie rule obvious.
    for (int r = 0; r < k; ++r) {
      int best = -1;
      for (int e = 0; e < n_expert; ++e) {
        bool taken = false;
        for (int j = 0; j < r; ++j) taken |= ex[j] == e;
        if (taken || (spec.n_group > 1 && masked[e])) continue;
        if (best < 0 || sel[e] > sel[best]) best = e;
      }
      ex[r] = best;
      w[r] = p[best];
    }
    if (spec.gating == RoutingSpec::Gating::SparseMixer)
      sparse_mixer_weights(lg, n_expert, k, ex, w, spec.jitter_eps);
    if (spec.softmax_after_topk) {
      float mx = w[0];
      for (int r = 1; r < k; ++r) mx = std::max(mx, w[r]);
      float sum = 0;
      for (int r = 0; r < k; ++r) sum += w[r] = std::exp(w[r] - mx);
      for (int r = 0; r < k; ++r) w[r] /= sum;
    }
    if (spec.norm_weights) {
      float s = 0;
      for (int r = 0; r < k; ++r) s += w[r];
      if (s > 0)
        for (int r = 0; r < k; ++r) w[r] /= s;
    }
    if (spec.scale != 1.0f)
      for (int r = 0; r < k; ++r) w[r] *= spec.scale;
  }
}

void Backend::route(const TensorView& logits, const RoutingSpec& spec, const float* bias, int k,
                    int32_t* experts, float* weights, float* probs) {
  const float* host = read_f32(logits, route_staging_);
  route_on_host(host, (int)logits.rows(), (int)logits.cols(), spec, bias, k, experts, weights,
                probs);
}

TensorView BackendScratch::f32(int64_t cols, int64_t rows) {
  const size_t need = (size_t)cols * (size_t)rows * sizeof(float);
  if (buf_.size() < need) buf_ = backend_->allocator().allocate(need, 64);
  return matrix_view(buf_.data(), GgmlType::F32, cols, rows, buf_.space());
}

void check_conv1d_silu_shapes(const TensorView& x, const TensorView& state, const TensorView& w,
                              const TensorView& out) {
  const int64_t n = x.rows(), C = x.cols(), K = w.cols();
  MOEFLOW_CHECK(w.rows() == C && state.cols() == C && state.rows() == K - 1 && out.cols() == C &&
                    out.rows() == n,
                "conv1d_silu: input {}x{}, state {}x{}, kernel {}x{}, output {}x{} disagree", n, C,
                state.rows(), state.cols(), w.rows(), w.cols(), out.rows(), out.cols());
}

void check_gated_delta_net_shapes(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& a, const TensorView& b, const TensorView& state,
                                  const TensorView& out, const DeltaNetParams& p) {
  const int64_t n = q.rows(), hk = p.head_k, hv = p.head_v;
  const int NK = p.n_k_heads, NV = p.n_v_heads;
  MOEFLOW_CHECK(NK > 0 && NV % NK == 0 && q.cols() == NK * hk && k.cols() == NK * hk &&
                    v.cols() == NV * hv && a.cols() == NV && b.cols() == NV &&
                    out.cols() == NV * hv && state.rows() == NV * hk && state.cols() == hv &&
                    state.rows_contiguous() && k.rows() == n && v.rows() == n && out.rows() == n,
                "gated_delta_net: shapes disagree with {} key heads of {} and {} value heads of {}",
                NK, hk, NV, hv);
  MOEFLOW_CHECK(p.A && p.dt_bias, "gated_delta_net: A and dt_bias are required");
}

TensorView head_block(const TensorView& stack, int64_t h) {
  return strided_matrix_view(stack.data + (size_t)h * stack.nb[2], stack.type, stack.ne[0],
                             stack.ne[1], stack.nb[1], stack.space);
}

void Backend::matmul_heads(const TensorView& w, const TensorView& x, int64_t x_step, TensorView y,
                           int64_t y_step) {
  for (int64_t h = 0; h < w.ne[2]; ++h)
    matmul(head_block(w, h), f32_columns(x, h * x_step, x.cols()),
           f32_columns(y, h * y_step, y.cols()));
}

void Backend::sigmoid_mul(TensorView, const TensorView&) {
  fail("the {} backend has no sigmoid_mul (the attention output gate)", name());
}

void Backend::conv1d_silu(const TensorView&, TensorView, const TensorView&, TensorView) {
  fail("the {} backend has no conv1d_silu (gated DeltaNet layers)", name());
}

void Backend::gated_delta_net(const TensorView&, const TensorView&, const TensorView&,
                              const TensorView&, const TensorView&, TensorView, TensorView,
                              const DeltaNetParams&) {
  fail("the {} backend has no gated_delta_net (gated DeltaNet layers)", name());
}

}  // namespace moeflow
