// Causal attention over the float32 KV cache (GQA, sliding window, sinks), two kernels:
//
// Decode (a few query rows): flash-decoding. Each query row's visible positions are cut into
// splits of kSplit positions; one block per (head, split, row) runs an online softmax over its
// split (each warp a strided subset of positions, one lane per 1/32 of the head), the warps
// merge in shared memory and the block writes a partial (max, sum, unnormalised output); a
// second kernel merges the splits (and the sink logit) in split order.
//
// Prefill (many rows): tiled. One block per (16 query rows, head) walks the visible positions
// in tiles of 32 keys/values staged in shared memory; each warp keeps 4 query rows' running
// max, sum and output (a lane per 1/32 of the head), scoring one key per lane.
//
// Head sizes up to 256 (8 values per lane), or up to 576 (18 per lane: DeepSeek's MLA, whose one
// latent head is kv_lora_rank + rope dims = 576 wide for keys and 512 for values). Every
// reduction has a fixed order, so results are the same from run to run.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kNarrow = 8;   // values per lane for heads up to 256
constexpr int kWide = 18;    // ... up to 576
constexpr int kSplit = 128;  // positions per decode split
constexpr int kDecodeWarps = 4;
constexpr int kTileQ = 16, kTileK = 32, kPrefillWarps = 4, kRowsPerWarp = kTileQ / kPrefillWarps;
constexpr int kDecodeMaxRows = 4;  // more query rows take the tiled kernel

// First and one-past-last visible position of query row t.
__device__ __forceinline__ void visible(const AttnArgs& a, int64_t t, int64_t& j0, int64_t& j1) {
  j1 = a.pos0 + t + 1;
  j0 = a.window > 0 ? (j1 > a.window ? j1 - a.window : 0) : 0;
}

template <int kMaxPerLane>
__global__ void __launch_bounds__(32 * kDecodeWarps)
    attn_decode_split_kernel(CMat q, CMat k, CMat v, AttnArgs a, int n_split,
                             float* __restrict__ part) {
  const int h = blockIdx.x, split = blockIdx.y;
  const int64_t t = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = h / (a.n_head / a.n_head_kv);
  const int64_t hd = a.head_dim, hdv = a.head_dim_v;

  int64_t j0, j1;
  visible(a, t, j0, j1);
  const int64_t s0 = j0 + (int64_t)split * kSplit;
  const int64_t s1 = s0 + kSplit < j1 ? s0 + kSplit : j1;

  float qr[kMaxPerLane], o[kMaxPerLane];
  const float* qh = q.p + t * q.stride + h * hd;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int64_t c = lane + 32 * i;
    qr[i] = c < hd ? qh[c] : 0.0f;
    o[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = s0 + warp; j < s1; j += kDecodeWarps) {
    const float* kr = k.p + j * k.stride + g * hd;
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < hd) d += qr[i] * kr[c];
    }
    const float sc = warp_sum(d) * a.scale;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), p = expf(sc - m_new);
    l = l * corr + p;
    const float* vr = v.p + j * v.stride + g * hdv;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < hdv) o[i] = o[i] * corr + p * vr[c];
    }
    m = m_new;
  }

  // Merge the warps: warp w's (m, l, o) into shared memory, then one pass over the warps.
  extern __shared__ float sh[];  // kDecodeWarps * (hdv + 2)
  float* mine = sh + warp * (hdv + 2);
  if (lane == 0) {
    mine[0] = m;
    mine[1] = l;
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < hdv) mine[2 + c] = o[i];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, sh[w * (hdv + 2)]);
  float* out = part + ((t * a.n_head + h) * n_split + split) * (hdv + 2);
  if (M == -INFINITY) {  // an empty split (past the end of this row's positions)
    for (int64_t c = threadIdx.x; c < hdv + 2; c += blockDim.x) out[c] = c == 0 ? -INFINITY : 0.0f;
    return;
  }
  float L = 0.0f;
  for (int w = 0; w < kDecodeWarps; ++w) {
    const float mw = sh[w * (hdv + 2)];
    if (mw != -INFINITY) L += sh[w * (hdv + 2) + 1] * expf(mw - M);
  }
  for (int64_t c = threadIdx.x; c < hdv; c += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float mw = sh[w * (hdv + 2)];
      if (mw != -INFINITY) acc += sh[w * (hdv + 2) + 2 + c] * expf(mw - M);
    }
    out[2 + c] = acc;
  }
  if (threadIdx.x == 0) {
    out[0] = M;
    out[1] = L;
  }
}

__global__ void attn_decode_merge_kernel(AttnArgs a, int n_split, const float* __restrict__ part,
                                         Mat out) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y, hdv = a.head_dim_v;
  const float* p = part + (t * a.n_head + h) * n_split * (hdv + 2);
  float M = a.sinks ? a.sinks[h] : -INFINITY;
  for (int s = 0; s < n_split; ++s) M = fmaxf(M, p[s * (hdv + 2)]);
  float L = a.sinks ? expf(a.sinks[h] - M) : 0.0f;
  for (int s = 0; s < n_split; ++s) {
    const float ms = p[s * (hdv + 2)];
    if (ms != -INFINITY) L += p[s * (hdv + 2) + 1] * expf(ms - M);
  }
  const float inv = 1.0f / L;
  for (int64_t c = threadIdx.x; c < hdv; c += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < n_split; ++s) {
      const float ms = p[s * (hdv + 2)];
      if (ms != -INFINITY) acc += p[s * (hdv + 2) + 2 + c] * expf(ms - M);
    }
    out.p[t * out.stride + h * hdv + c] = acc * inv;
  }
}

// Shared memory of the prefill kernel: Q tile [kTileQ][hd], K tile [kTileK][hd + 1] (the pad
// keeps lanes reading different keys on different banks), V tile [kTileK][hdv].
size_t prefill_smem_bytes(int64_t hd, int64_t hdv) {
  return sizeof(float) * (size_t)(kTileQ * hd + kTileK * (hd + 1) + kTileK * hdv);
}

template <int kMaxPerLane>
__global__ void __launch_bounds__(32 * kPrefillWarps)
    attn_prefill_kernel(CMat q, CMat k, CMat v, Mat out, AttnArgs a, int64_t n) {
  extern __shared__ float sh[];
  const int64_t hd = a.head_dim, hdv = a.head_dim_v;
  float* Qs = sh;
  float* Ks = Qs + kTileQ * hd;
  float* Vs = Ks + kTileK * (hd + 1);
  const int h = blockIdx.y;
  const int g = h / (a.n_head / a.n_head_kv);
  const int64_t t0 = (int64_t)blockIdx.x * kTileQ;
  const int64_t tq = n - t0 < kTileQ ? n - t0 : kTileQ;  // rows in this tile
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  for (int64_t i = threadIdx.x; i < kTileQ * hd; i += blockDim.x) {
    const int64_t r = i / hd, c = i % hd;
    Qs[i] = r < tq ? q.p[(t0 + r) * q.stride + h * hd + c] : 0.0f;
  }
  // Positions any row of the tile sees.
  int64_t lo, hi, j0, j1;
  visible(a, t0, lo, j1);
  visible(a, t0 + tq - 1, j0, hi);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kMaxPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) o[r][i] = 0.0f;
  }

  for (int64_t kb = lo; kb < hi; kb += kTileK) {
    const int64_t nk = hi - kb < kTileK ? hi - kb : kTileK;
    __syncthreads();  // the previous tile is consumed (and Qs written, the first time)
    for (int64_t i = threadIdx.x; i < kTileK * hd; i += blockDim.x) {
      const int64_t r = i / hd, c = i % hd;
      Ks[r * (hd + 1) + c] = r < nk ? k.p[(kb + r) * k.stride + g * hd + c] : 0.0f;
    }
    for (int64_t i = threadIdx.x; i < kTileK * hdv; i += blockDim.x) {
      const int64_t r = i / hdv, c = i % hdv;
      Vs[i] = r < nk ? v.p[(kb + r) * v.stride + g * hdv + c] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = warp * kRowsPerWarp + r;
      if (row >= tq) continue;  // uniform over the warp
      int64_t r0, r1;
      visible(a, t0 + row, r0, r1);
      const int64_t j = kb + lane;
      const bool ok = lane < nk && j >= r0 && j < r1;
      float sc = -INFINITY;
      if (ok) {
        const float* qs = Qs + row * hd;
        const float* ks = Ks + lane * (hd + 1);
        float d = 0.0f;
        for (int64_t c = 0; c < hd; ++c) d += qs[c] * ks[c];
        sc = d * a.scale;
      }
      const float tile_max = warp_max(sc);
      if (tile_max == -INFINITY) continue;  // nothing visible in this tile for this row
      const float m_new = fmaxf(m[r], tile_max);
      const float corr = expf(m[r] - m_new);
      const float p = ok ? expf(sc - m_new) : 0.0f;
      l[r] = l[r] * corr + warp_sum(p);
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) o[r][i] *= corr;
      for (int jj = 0; jj < nk; ++jj) {
        const float pj = __shfl_sync(kFullMask, p, jj);
        if (pj == 0.0f) continue;  // uniform: every lane holds the same pj
        const float* vs = Vs + jj * hdv;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) {
          const int64_t c = lane + 32 * i;
          if (c < hdv) o[r][i] += pj * vs[c];
        }
      }
      m[r] = m_new;
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = warp * kRowsPerWarp + r;
    if (row >= tq) continue;
    float M = m[r], L = l[r], f = 1.0f;
    if (a.sinks) {
      const float sk = a.sinks[h];
      M = fmaxf(m[r], sk);
      f = expf(m[r] - M);
      L = l[r] * f + expf(sk - M);
    }
    const float inv = f / L;
    float* orow = out.p + (t0 + row) * out.stride + h * hdv;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < hdv) orow[c] = o[r][i] * inv;
    }
  }
}

int decode_splits(int64_t n, const AttnArgs& a) {
  // The longest row (the last one) decides the grid; rows with fewer positions leave their
  // trailing splits empty.
  int64_t len = a.pos0 + n;
  if (a.window > 0 && len > a.window) len = a.window;
  return (int)((len + kSplit - 1) / kSplit);
}

}  // namespace

size_t attention_scratch_floats(int64_t n, const AttnArgs& a) {
  if (n > kDecodeMaxRows) return 0;
  return (size_t)n * a.n_head * decode_splits(n, a) * (a.head_dim_v + 2);
}

namespace {

template <int kMaxPerLane>
void launch(CMat q, CMat k, CMat v, Mat out, const AttnArgs& a, float* scratch, cudaStream_t s) {
  const int64_t n = q.rows;
  if (n <= kDecodeMaxRows) {
    const int n_split = decode_splits(n, a);
    const dim3 grid((unsigned)a.n_head, (unsigned)n_split, (unsigned)n);
    const size_t smem = sizeof(float) * kDecodeWarps * (size_t)(a.head_dim_v + 2);
    attn_decode_split_kernel<kMaxPerLane>
        <<<grid, 32 * kDecodeWarps, smem, s>>>(q, k, v, a, n_split, scratch);
    MOEFLOW_CUDA_CHECK_LAUNCH();
    attn_decode_merge_kernel<<<dim3((unsigned)a.n_head, (unsigned)n), 128, 0, s>>>(a, n_split,
                                                                                   scratch, out);
    MOEFLOW_CUDA_CHECK_LAUNCH();
    return;
  }
  const size_t smem = prefill_smem_bytes(a.head_dim, a.head_dim_v);
  if (smem > 48 * 1024)
    MOEFLOW_CUDA_CHECK(cudaFuncSetAttribute(
        attn_prefill_kernel<kMaxPerLane>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((unsigned)((n + kTileQ - 1) / kTileQ), (unsigned)a.n_head);
  attn_prefill_kernel<kMaxPerLane><<<grid, 32 * kPrefillWarps, smem, s>>>(q, k, v, out, a, n);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention(CMat q, CMat k, CMat v, Mat out, const AttnArgs& a, float* scratch, cudaStream_t s) {
  const int64_t widest = a.head_dim > a.head_dim_v ? a.head_dim : a.head_dim_v;
  if (widest > 32 * kWide)
    throw_error("cuda attention: head sizes above " + std::to_string(32 * kWide) +
                " are not supported (got " + std::to_string(a.head_dim) + "/" +
                std::to_string(a.head_dim_v) + ")");
  if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0)
    throw_error("cuda attention: " + std::to_string(a.n_head) + " query heads cannot share " +
                std::to_string(a.n_head_kv) + " kv heads");
  if (q.rows == 0) return;
  if (widest <= 32 * kNarrow)
    launch<kNarrow>(q, k, v, out, a, scratch, s);
  else
    launch<kWide>(q, k, v, out, a, scratch, s);
}

}  // namespace moeflow::cuda
