#pragma once
// Float64 reference forward pass of the tiny models, written from the architecture
// descriptions (llama.cpp conventions) independently of src/model: every position of a token
// sequence, full causal attention recomputed from scratch.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "support/tiny_model.h"

namespace moeflow::test {

using dvec = std::vector<double>;

inline dvec ref_matvec(const TinyTensor& W, const dvec& x, int64_t row0 = 0, int64_t rows = -1) {
  const int64_t cols = W.dims[0];
  if (rows < 0) rows = (int64_t)W.v.size() / cols;
  dvec y(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += (double)W.v[(row0 + r) * cols + c] * x[c];
    y[r] = s;
  }
  return y;
}

inline dvec ref_rmsnorm(const dvec& x, const float* w, int64_t off, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double sc = 1.0 / std::sqrt(ss / n + eps);
  dvec y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[off + i] * sc * w[i];
  return y;
}

inline void ref_rope(double* h, int64_t n_rot, int64_t pos, double base, bool neox) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double theta = pos * std::pow(base, -2.0 * i / n_rot);
    const int64_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
    const double x0 = h[a], x1 = h[b];
    h[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
    h[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
}

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

// DAOP stale-input pre-calculation as docs/lossy-modes.md defines it, for positions >= first_pos
// (decode steps): when a routed expert of layer l (one not served from a pre-calculation) is
// in flight, the experts that layer l+1's router picks for rmsnorm(residual entering layer l's
// MoE, ffn_norm of l+1) and that are not in flight at l+1 are computed on that stale input; at
// layer l+1 a routed expert among them takes that output.
struct RefPrecalc {
  int first_pos = 0;
  std::function<bool(int layer, int expert)> in_flight;
  // A device with a host backend: every decode step also computes the next layer's predicted
  // experts that are not resident (in flight), on the host (DAOP's CPU pre-calculation).
  bool host_share = false;
};

struct RefResult {
  std::vector<dvec> logits;                            // per position
  std::vector<std::vector<std::vector<int>>> experts;  // [pos][layer] chosen, rank order
};

inline RefResult reference_forward(const TinySpec& s, const TinyWeights& W,
                                   const std::vector<int32_t>& toks,
                                   const RefPrecalc* pre = nullptr) {
  const std::string a = s.arch;
  const int64_t d = s.n_embd, hd = s.head_dim, n_rot = s.n_rot ? s.n_rot : hd;
  const int64_t qd = s.n_head * hd, kd = s.n_head_kv * hd, ff = s.n_ff_exp;
  const bool neox = a != "llama";
  bool renorm = a == "llama" || a == "qwen3moe";
  if (s.weights_norm >= 0) renorm = s.weights_norm == 1;
  auto T = [&](const std::string& n) -> const TinyTensor& { return W.at(n); };
  const int n = (int)toks.size();
  std::vector<dvec> x(n, dvec(d));
  for (int t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) x[t][i] = T("token_embd.weight").v[toks[t] * d + i];
  RefResult res;
  res.experts.assign(n, std::vector<std::vector<int>>(s.n_layer));
  auto route = [&](const std::string& b, const dvec& xn, dvec& probs) {
    probs = ref_matvec(T(b + "ffn_gate_inp.weight"), xn);
    const double mx = *std::max_element(probs.begin(), probs.end());
    double sum = 0;
    for (auto& v : probs) sum += (v = std::exp(v - mx));
    for (auto& v : probs) v /= sum;
    std::vector<int> idx(s.n_expert);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int p, int q) { return probs[p] > probs[q]; });
    idx.resize(s.top_k);
    return idx;
  };
  auto expert = [&](const std::string& b, int e, const dvec& xn) {
    dvec g, u;
    if (s.fused_gate_up) {
      g = ref_matvec(T(b + "ffn_gate_up_exps.weight"), xn, e * 2 * ff, ff);
      u = ref_matvec(T(b + "ffn_gate_up_exps.weight"), xn, e * 2 * ff + ff, ff);
    } else {
      g = ref_matvec(T(b + "ffn_gate_exps.weight"), xn, e * ff, ff);
      u = ref_matvec(T(b + "ffn_up_exps.weight"), xn, e * ff, ff);
    }
    dvec hh(ff);
    for (int64_t i = 0; i < ff; ++i) hh[i] = silu(g[i]) * u[i];
    return ref_matvec(T(b + "ffn_down_exps.weight"), hh, e * d, d);
  };
  std::vector<std::map<int, dvec>> pending(n);  // pre-calculated outputs for the next layer
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    std::vector<dvec> Q(n), K(n), V(n);
    for (int t = 0; t < n; ++t) {
      dvec xn = ref_rmsnorm(x[t], T(b + "attn_norm.weight").v.data(), 0, d, s.eps);
      Q[t] = ref_matvec(T(b + "attn_q.weight"), xn);
      K[t] = ref_matvec(T(b + "attn_k.weight"), xn);
      V[t] = ref_matvec(T(b + "attn_v.weight"), xn);
      if (arch_has_bias(a)) {
        for (int64_t i = 0; i < qd; ++i) Q[t][i] += T(b + "attn_q.bias").v[i];
        for (int64_t i = 0; i < kd; ++i) K[t][i] += T(b + "attn_k.bias").v[i];
        for (int64_t i = 0; i < kd; ++i) V[t][i] += T(b + "attn_v.bias").v[i];
      }
      if (a == "qwen3moe") {
        for (int h = 0; h < s.n_head; ++h) {
          dvec y = ref_rmsnorm(Q[t], T(b + "attn_q_norm.weight").v.data(), h * hd, hd, s.eps);
          std::copy(y.begin(), y.end(), Q[t].begin() + h * hd);
        }
        for (int h = 0; h < s.n_head_kv; ++h) {
          dvec y = ref_rmsnorm(K[t], T(b + "attn_k_norm.weight").v.data(), h * hd, hd, s.eps);
          std::copy(y.begin(), y.end(), K[t].begin() + h * hd);
        }
      } else if (a == "olmoe") {
        Q[t] = ref_rmsnorm(Q[t], T(b + "attn_q_norm.weight").v.data(), 0, qd, s.eps);
        K[t] = ref_rmsnorm(K[t], T(b + "attn_k_norm.weight").v.data(), 0, kd, s.eps);
      }
      for (int h = 0; h < s.n_head; ++h)
        ref_rope(Q[t].data() + h * hd, n_rot, t, s.rope_base, neox);
      for (int h = 0; h < s.n_head_kv; ++h)
        ref_rope(K[t].data() + h * hd, n_rot, t, s.rope_base, neox);
    }
    for (int t = 0; t < n; ++t) {
      dvec att(qd, 0.0);
      for (int h = 0; h < s.n_head; ++h) {
        const int g = h / (s.n_head / s.n_head_kv);
        dvec sc(t + 1);
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < hd; ++c) dot += Q[t][h * hd + c] * K[j][g * hd + c];
          sc[j] = dot / std::sqrt((double)hd);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (auto& v : sc) sum += (v = std::exp(v - mx));
        for (int j = 0; j <= t; ++j)
          for (int64_t c = 0; c < hd; ++c) att[h * hd + c] += sc[j] / sum * V[j][g * hd + c];
      }
      dvec o = ref_matvec(T(b + "attn_output.weight"), att);
      for (int64_t i = 0; i < d; ++i) x[t][i] += o[i];
    }
    for (int t = 0; t < n; ++t) {
      dvec xn = ref_rmsnorm(x[t], T(b + "ffn_norm.weight").v.data(), 0, d, s.eps);
      dvec lg;
      const std::vector<int> idx = route(b, xn, lg);
      double wsum = 0;
      for (int e : idx) wsum += lg[e];
      const std::map<int, dvec> carried = std::move(pending[t]);
      pending[t].clear();
      bool waits = false;
      dvec out(d, 0.0);
      for (int e : idx) {
        const double wgt = renorm ? lg[e] / wsum : lg[e];
        const auto c = carried.find(e);
        if (c == carried.end() && pre && t >= pre->first_pos && pre->in_flight(il, e)) waits = true;
        const dvec y = c != carried.end() ? c->second : expert(b, e, xn);
        for (int64_t i = 0; i < d; ++i) out[i] += wgt * y[i];
      }
      const bool host_share = pre && pre->host_share && t >= pre->first_pos;
      if ((waits || host_share) && il + 1 < s.n_layer) {
        const std::string nb = "blk." + std::to_string(il + 1) + ".";
        const dvec stale = ref_rmsnorm(x[t], T(nb + "ffn_norm.weight").v.data(), 0, d, s.eps);
        dvec sp;
        for (int e : route(nb, stale, sp)) {
          const bool resident = !pre->in_flight(il + 1, e);
          if ((waits && resident) || (host_share && !resident))
            pending[t][e] = expert(nb, e, stale);
        }
      }
      if (arch_has_shexp(a)) {
        dvec g = ref_matvec(T(b + "ffn_gate_shexp.weight"), xn);
        dvec u = ref_matvec(T(b + "ffn_up_shexp.weight"), xn);
        for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
        dvec y = ref_matvec(T(b + "ffn_down_shexp.weight"), g);
        const double gate =
            1.0 / (1.0 + std::exp(-ref_matvec(T(b + "ffn_gate_inp_shexp.weight"), xn)[0]));
        for (int64_t i = 0; i < d; ++i) out[i] += gate * y[i];
      }
      for (int64_t i = 0; i < d; ++i) x[t][i] += out[i];
      res.experts[t][il] = idx;
    }
  }
  const TinyTensor& out_w = W.count("output.weight") ? T("output.weight") : T("token_embd.weight");
  for (int t = 0; t < n; ++t) {
    dvec xn = ref_rmsnorm(x[t], T("output_norm.weight").v.data(), 0, d, s.eps);
    res.logits.push_back(ref_matvec(out_w, xn));
  }
  return res;
}

}  // namespace moeflow::test
