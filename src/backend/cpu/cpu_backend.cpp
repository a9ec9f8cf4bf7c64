#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attn_math.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "quant/quant.h"

namespace moeflow {
namespace {

void check_host(const TensorView& v, const char* op, const char* what) {
  if (v.space == MemSpace::Device) fail("cpu backend: {} got its {} in device memory", op, what);
}

void check_f32(const TensorView& v, const char* op, const char* what) {
  check_host(v, op, what);
  if (v.type != GgmlType::F32)
    fail("cpu backend: {} needs a float32 {}, got {}", op, what, type_name(v.type));
}

float* frow(const TensorView& v, int64_t r) { return reinterpret_cast<float*>(v.row(r)); }

}  // namespace

CpuBackend::CpuBackend(ThreadPool* pool) : pool_(pool) { set_pool(pool); }

void CpuBackend::set_pool(ThreadPool* pool) {
  pool_ = pool;
  scores_.resize(pool ? pool->size() : 1);
}

Allocator& CpuBackend::allocator() { return HostAllocator::instance(); }

TensorView CpuBackend::adopt_weight(const TensorView& w) {
  check_host(w, "adopt_weight", "weight");
  if (!copy_weights_ || !w) return w;
  const uint64_t n = w.nbytes();
  auto it = copies_.find({w.data, n});
  if (it == copies_.end()) {
    Buffer b = HostAllocator::instance().allocate(n, 4096);
    std::memcpy(b.data(), w.data, n);
    copied_bytes_ += n;
    // A stack of matrices (ne[2], ne[3]) is repacked matrix by matrix, as the views read it; only
    // a dense one (every byte of the range a row's).
    const int64_t n_mat = w.ne[2] * w.ne[3];
    const bool dense = n == row_bytes(w.type, w.cols()) * (uint64_t)(w.rows() * n_mat);
    const GgmlType cpu_type = cpu_repacked_type(w.type, w.rows());
    const bool repack = matmul_only_ && dense && cpu_type != w.type && matmul_only_(w);
    if (repack) {
      repack_for_cpu(w.type, b.data(), w.cols(), w.rows(), n_mat);
      repacked_bytes_ += n;
    }
    it = copies_.emplace(std::make_pair(w.data, n), Copy{std::move(b), repack ? cpu_type : w.type})
             .first;
    if (on_copied_) on_copied_(w.data, n);
  }
  TensorView v = w;
  v.data = it->second.bytes.data();
  v.type = it->second.type;
  return v;
}

TensorView CpuBackend::adopt_lookup_table(const TensorView& w) {
  check_host(w, "adopt_lookup_table", "table");
  return w;
}

void CpuBackend::copy(TensorView dst, const TensorView& src) {
  check_host(dst, "copy", "destination");
  check_host(src, "copy", "source");
  MOEFLOW_CHECK(dst.type == src.type && dst.ne[0] == src.ne[0] && dst.ne[1] == src.ne[1],
                "cpu backend: copy between views of different shapes or types");
  const size_t rb = row_bytes(src.type, src.ne[0]);
  if (dst.rows_contiguous() && src.rows_contiguous()) {
    std::memcpy(dst.data, src.data, rb * (size_t)src.ne[1]);
    return;
  }
  for (int64_t r = 0; r < src.ne[1]; ++r) std::memcpy(dst.row(r), src.row(r), rb);
}

const float* CpuBackend::read_f32(const TensorView& v, std::vector<float>&) {
  check_f32(v, "read_f32", "tensor");
  return v.as<const float>();
}

void CpuBackend::matmul(const TensorView& w, const TensorView& x, TensorView y) {
  check_host(w, "matmul", "weight");
  check_f32(x, "matmul", "input");
  check_f32(y, "matmul", "output");
  const int64_t n = x.rows();
  if (x.cols() != w.cols() || y.cols() != w.rows() || y.rows() != n)
    fail("cpu backend: matmul shapes do not match: weight {}x{}, input {}x{}, output {}x{}",
         w.rows(), w.cols(), n, x.cols(), y.rows(), y.cols());
  if (!w.rows_contiguous()) fail("cpu backend: matmul needs the weight's rows back to back");
  // The kernels take rows back to back; strided inputs and outputs (a head's slice of a wider
  // activation) go through a packed copy.
  const float* xp = x.as<const float>();
  if (!x.rows_contiguous()) {
    x_pack_.resize((size_t)n * x.cols());
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(&x_pack_[(size_t)t * x.cols()], x.row(t), x.cols() * sizeof(float));
    xp = x_pack_.data();
  }
  float* yp = y.as<float>();
  if (!y.rows_contiguous()) {
    y_pack_.resize((size_t)n * y.cols());
    yp = y_pack_.data();
  }
  if (n == 1)
    moeflow::matvec(w.type, w.data, w.rows(), w.cols(), xp, yp, pool_);
  else
    moeflow::matmul(w.type, w.data, w.rows(), w.cols(), xp, n, yp, pool_);
  if (yp != y.as<float>())
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(y.row(t), &y_pack_[(size_t)t * y.cols()], y.cols() * sizeof(float));
}

void CpuBackend::matmul_heads(const TensorView& w, const TensorView& x, int64_t x_step,
                              TensorView y, int64_t y_step) {
  const int64_t heads = w.ne[2];
  if (x.rows() != 1 || heads <= 1) {
    Backend::matmul_heads(w, x, x_step, y, y_step);
    return;
  }
  check_host(w, "matmul_heads", "weight");
  check_f32(x, "matmul_heads", "input");
  check_f32(y, "matmul_heads", "output");
  if (x.cols() != w.cols() || y.cols() != w.rows() || y.rows() != 1)
    fail("cpu backend: matmul_heads shapes do not match: weight {}x{}, input {}x{}, output {}x{}",
         w.rows(), w.cols(), x.rows(), x.cols(), y.rows(), y.cols());
  if (w.nb[1] != row_bytes(w.type, w.cols()))
    fail("cpu backend: matmul_heads needs each head's rows back to back");
  moeflow::matvec_heads(w.type, w.data, w.nb[2], heads, w.rows(), w.cols(), x.as<const float>(),
                        x_step, y.as<float>(), y_step, pool_);
}

void CpuBackend::get_rows(const TensorView& table, std::span<const int32_t> ids, TensorView out) {
  check_host(table, "get_rows", "table");
  check_f32(out, "get_rows", "output");
  for (size_t t = 0; t < ids.size(); ++t) {
    MOEFLOW_CHECK(ids[t] >= 0 && ids[t] < table.rows(), "get_rows: row {} outside 0..{}", ids[t],
                  table.rows());
    dequantize_row(table.type, table.row(ids[t]), frow(out, (int64_t)t), table.cols());
  }
}

void CpuBackend::rms_norm(const TensorView& x, const float* weight, TensorView out, float eps) {
  check_f32(x, "rms_norm", "input");
  check_f32(out, "rms_norm", "output");
  // The kernel reads each row whole before writing it, so out may be x.
  for (int64_t r = 0; r < x.rows(); ++r)
    moeflow::rms_norm(frow(x, r), weight, frow(out, r), x.cols(), eps);
}

void CpuBackend::layer_norm(const TensorView& x, const float* weight, const float* bias,
                            TensorView out, float eps) {
  check_f32(x, "layer_norm", "input");
  check_f32(out, "layer_norm", "output");
  for (int64_t r = 0; r < x.rows(); ++r)
    moeflow::layer_norm(frow(x, r), weight, bias, frow(out, r), x.cols(), eps);
}

void CpuBackend::rope(TensorView x, int n_head, int64_t head_dim, int64_t pos0,
                      const RopeParams& p) {
  check_f32(x, "rope", "input");
  const bool neox = p.mode == RopeMode::NeoX;
  for (int64_t t = 0; t < x.rows(); ++t) {
    float* row = frow(x, t);
    const int64_t pos = pos0 + t;
    for (int h = 0; h < n_head; ++h) {
      if (p.plain())
        rope_inplace(row + h * head_dim, head_dim, p.n_rot, pos, p.freq_base, neox);
      else
        rope_ext_inplace(row + h * head_dim, head_dim, pos, neox, p);
    }
  }
}

void CpuBackend::attention(const TensorView& q, const TensorView& k, const TensorView& v,
                           TensorView out, int64_t pos0, const AttentionParams& p) {
  check_f32(q, "attention", "query");
  check_f32(k, "attention", "key cache");
  check_f32(v, "attention", "value cache");
  check_f32(out, "attention", "output");
  const int n = (int)q.rows();
  const int group = p.n_head / p.n_head_kv;
  const int64_t hd = p.head_dim, hdv = p.head_dim_v;
  MOEFLOW_CHECK(pos0 + n <= k.rows() && pos0 + n <= v.rows(),
                "attention: positions up to {} exceed the cache's {} rows", pos0 + n, k.rows());
  // The heads that share a kv head read the same key and value rows (GQA; MQA and multi-head
  // latent attention share one between all heads), and so do consecutive tokens: a work item
  // takes up to kHeadBlock of those heads for a tile of tokens, and the tile kernels
  // (attn_math.h) load each key and value row once for all of its queries. Every (token, head)
  // output is still computed by the same operations in the same order as one head alone.
  constexpr int kHeadBlock = 8, kQueryTile = 32;
  static_assert(kQueryTile >= kHeadBlock, "a tile holds at least one token's head block");
  const int hb = std::min(group, kHeadBlock);
  const int blocks = (group + hb - 1) / hb;
  const int64_t n_rows = k.rows();
  // Tokens per tile: up to kQueryTile queries, fewer where the per-thread score rows (one per
  // query, one float per cache row) would pass 4 MiB (long contexts).
  const int64_t q_budget =
      std::clamp<int64_t>((int64_t{1} << 20) / std::max<int64_t>(1, n_rows), hb, kQueryTile);
  const int tt = std::max(1, (int)(q_budget / hb));
  const int64_t n_tiles = (n + tt - 1) / tt;
  const int max_q = tt * hb;
  for (auto& s : scores_)
    if ((int64_t)s.size() < max_q * n_rows) s.resize((size_t)(max_q * n_rows));
  const float scale = p.scale;
  const int64_t k_stride = (int64_t)(k.row_stride() / sizeof(float)),
                v_stride = (int64_t)(v.row_stride() / sizeof(float));
  const QkTileFn qk_tile = n > 1 ? attn_qk_tile_fn() : attn_qk_decode_fn();
  const PvTileFn pv_tile = n > 1 ? attn_pv_tile_fn() : attn_pv_pairs_fn();
  auto body = [&](int64_t b, int64_t e, int th) {
    float* s = scores_[th].data();
    const float* qr[kQueryTile];
    float* o[kQueryTile];
    int64_t lo[kQueryTile], hi[kQueryTile];
    for (int64_t i = b; i < e; ++i) {
      // Causal rows grow with the token: tiles are taken first, last, second, second-to-last,
      // ..., so the contiguous item ranges of parallel_for get equal shares of the keys.
      const int64_t per_tile = (int64_t)p.n_head_kv * blocks, ti = i / per_tile, r = i % per_tile;
      const int64_t tile = ti % 2 == 0 ? ti / 2 : n_tiles - 1 - ti / 2;
      const int64_t t0 = tile * tt, t1 = std::min<int64_t>(n, t0 + tt);
      const int64_t g = r / blocks, h0 = g * group + (r % blocks) * hb;
      const int nh = (int)std::min<int64_t>(hb, (g + 1) * group - h0);
      const int nq = (int)(t1 - t0) * nh;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t n_pos = pos0 + t + 1;  // causal: this token and everything before it
        const int64_t j0 = p.window > 0 ? std::max<int64_t>(0, n_pos - p.window) : 0;
        for (int u = 0; u < nh; ++u) {
          const int x = (int)(t - t0) * nh + u;
          qr[x] = frow(q, t) + (h0 + u) * hd;
          o[x] = frow(out, t) + (h0 + u) * hdv;
          lo[x] = j0;
          hi[x] = n_pos;
        }
      }
      // Scores: the keys every token of the tile sees in one tile call, each token's ragged
      // ends (the causal edge, the window's start) on their own.
      const float* kg = frow(k, 0) + g * hd;
      const int64_t c0 = lo[nq - 1], c1 = hi[0];  // the window start and the end both grow
      if (c0 < c1) qk_tile(qr, nq, kg, k_stride, c0, c1, hd, scale, s, n_rows);
      for (int x = 0; x < nq; x += nh) {
        float* sx = s + x * n_rows;
        if (c0 < c1) {
          qk_tile(qr + x, nh, kg, k_stride, lo[x], c0, hd, scale, sx, n_rows);
          qk_tile(qr + x, nh, kg, k_stride, c1, hi[x], hd, scale, sx, n_rows);
        } else {
          qk_tile(qr + x, nh, kg, k_stride, lo[x], hi[x], hd, scale, sx, n_rows);
        }
      }
      for (int x = 0; x < nq; ++x) {
        float* su = s + x * n_rows;
        const int64_t h = h0 + x % nh;
        float mx = -INFINITY;
        for (int64_t j = lo[x]; j < hi[x]; ++j) mx = std::max(mx, su[j]);
        if (p.sinks) mx = std::max(mx, p.sinks[h]);
        float sum = 0;
        for (int64_t j = lo[x]; j < hi[x]; ++j) {
          su[j] = std::exp(su[j] - mx);
          sum += su[j];
        }
        if (p.sinks) sum += std::exp(p.sinks[h] - mx);
        const float inv = 1.0f / sum;
        for (int64_t j = lo[x]; j < hi[x]; ++j) su[j] *= inv;
      }
      pv_tile(o, nq, s, n_rows, lo, hi, frow(v, 0) + g * hdv, v_stride, hdv);
    }
  };
  const int64_t items = n_tiles * p.n_head_kv * blocks;
  if (pool_)
    pool_->parallel_for(items, body);
  else
    body(0, items, 0);
}

void CpuBackend::glu(const TensorView& gate, const TensorView& up, TensorView out,
                     const GluParams& p) {
  check_f32(gate, "glu", "gate");
  check_f32(up, "glu", "up");
  check_f32(out, "glu", "output");
  const int64_t ff = out.cols();
  for (int64_t t = 0; t < out.rows(); ++t) {
    switch (p.kind) {
      case GluKind::SwiGLU: swiglu(frow(gate, t), frow(up, t), frow(out, t), ff); break;
      case GluKind::GeGLU: geglu(frow(gate, t), frow(up, t), frow(out, t), ff); break;
      case GluKind::SwiGLUOai:
        swiglu_oai(frow(gate, t), frow(up, t), frow(out, t), ff, p.alpha, p.limit);
        break;
    }
  }
}

void CpuBackend::add(TensorView x, const TensorView& y) {
  check_f32(x, "add", "accumulator");
  check_f32(y, "add", "addend");
  const int64_t d = x.cols();
  if (y.rows() == x.rows() && x.rows_contiguous() && y.rows_contiguous()) {
    add_inplace(x.as<float>(), y.as<const float>(), d * x.rows());
    return;
  }
  MOEFLOW_CHECK(y.rows() == 1 || y.rows() == x.rows(), "add: {} rows added to {}", y.rows(),
                x.rows());
  for (int64_t t = 0; t < x.rows(); ++t) add_inplace(frow(x, t), frow(y, y.rows() == 1 ? 0 : t), d);
}

void CpuBackend::scale_add(TensorView acc, const TensorView& x, float s) {
  check_f32(acc, "scale_add", "accumulator");
  check_f32(x, "scale_add", "addend");
  for (int64_t t = 0; t < acc.rows(); ++t)
    scale_add_inplace(frow(acc, t), frow(x, t), s, acc.cols());
}

void CpuBackend::scale(TensorView x, float s) {
  check_f32(x, "scale", "input");
  for (int64_t t = 0; t < x.rows(); ++t) {
    float* r = frow(x, t);
    for (int64_t i = 0; i < x.cols(); ++i) r[i] *= s;
  }
}

void CpuBackend::softcap(TensorView x, float cap) {
  check_f32(x, "softcap", "input");
  MOEFLOW_CHECK(cap > 0, "softcap: the cap must be positive, got {}", cap);
  // Gemma's final logits: a tanh per vocabulary entry (262144), 1.7 ms on one thread of the
  // Xeon VM, ~4% of a decode step. Split over the pool in column ranges; each element is the
  // same call.
  const int64_t cols = x.cols();
  auto body = [&](int64_t c0, int64_t c1, int) {
    for (int64_t t = 0; t < x.rows(); ++t) {
      float* r = frow(x, t);
      for (int64_t i = c0; i < c1; ++i) r[i] = cap * std::tanh(r[i] / cap);
    }
  };
  constexpr int64_t kCols = 16384;  // below that the hand-off costs more than it saves
  if (pool_ && cols >= 2 * kCols)
    pool_->parallel_for_dynamic(cols, body, kCols / 4);
  else
    body(0, cols, 0);
}

void CpuBackend::gated_add(TensorView acc, const TensorView& x, const TensorView& gate, GateFn f) {
  check_f32(acc, "gated_add", "accumulator");
  check_f32(gate, "gated_add", "gate");
  for (int64_t t = 0; t < acc.rows(); ++t) {
    const float z = *frow(gate, t);
    const float g = f == GateFn::Sigmoid ? 1.0f / (1.0f + std::exp(-z)) : z;
    scale_add_inplace(frow(acc, t), frow(x, t), g, acc.cols());
  }
}

void CpuBackend::gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) {
  check_f32(src, "gather_rows", "source");
  const size_t rb = (size_t)src.cols() * sizeof(float);
  for (size_t j = 0; j < idx.size(); ++j) std::memcpy(dst.row((int64_t)j), src.row(idx[j]), rb);
}

void CpuBackend::scatter_rows(TensorView dst, std::span<const int32_t> idx, const TensorView& src) {
  check_f32(dst, "scatter_rows", "destination");
  const size_t rb = (size_t)src.cols() * sizeof(float);
  for (size_t j = 0; j < idx.size(); ++j) std::memcpy(dst.row(idx[j]), src.row((int64_t)j), rb);
}

void CpuBackend::moe_combine(TensorView out, const TensorView& slots,
                             std::span<const float> weights, std::span<const uint8_t> keep, int k) {
  check_f32(out, "moe_combine", "output");
  check_f32(slots, "moe_combine", "expert outputs");
  const int64_t d = out.cols();
  for (int64_t t = 0; t < out.rows(); ++t) {
    float* o = frow(out, t);
    std::memset(o, 0, d * sizeof(float));
    for (int r = 0; r < k; ++r) {
      const size_t i = (size_t)t * k + r;
      if (!keep.empty() && !keep[i]) continue;
      scale_add_inplace(o, frow(slots, (int64_t)i), weights[i], d);
    }
  }
}

}  // namespace moeflow
