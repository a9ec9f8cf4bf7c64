// The recurrent (gated DeltaNet) layers' kernels: the causal depthwise convolution and the gated
// delta rule, both one token after the other as the CPU's ops (backend/cpu/recurrent_ops.cpp)
// and the contract in backend.h define them. Written to be plainly the CPU's loops, not fast:
//   - conv1d_silu: one thread per channel walks the tokens (a channel's outputs and its state
//     depend on no other channel);
//   - gated_delta_net: one warp per (value head, 32 state columns). Column j of a head's state
//     S [head_k][head_v] depends only on itself and the head's normalised q, k (the update is
//     S[:, j] = decay * S[:, j] + k * delta_j, delta_j = (v_j - decay * S[:, j] . k) * beta), so
//     each lane keeps its column in shared memory over all n tokens (read from and written back
//     to the state once per call) and the warp shares q and k there too. Sums run over i in
//     increasing order, as the CPU's do.
// Neither kernel allocates or synchronises: both may join a captured decode graph.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kConvBlock = 256;

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// torch.nn.functional.softplus (beta 1, threshold 20), as the CPU op.
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void conv1d_silu_kernel(CMat x, Mat state, CMat w, Mat out) {
  const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= x.cols) return;
  const int64_t n = x.rows, K = w.cols;
  // Row r of the history: the K-1 state rows (oldest first), then the inputs.
  auto hist = [&](int64_t r) -> float {
    return r < K - 1 ? state.p[r * state.stride + c] : x.p[(r - (K - 1)) * x.stride + c];
  };
  const float* wc = w.p + c * w.stride;
  for (int64_t t = 0; t < n; ++t) {
    float s = 0.0f;
    for (int64_t j = 0; j < K; ++j) s += wc[j] * hist(t + j);
    out.p[t * out.stride + c] = s * sigmoidf_(s);
  }
  // The new state: history rows n .. n+K-2. Row r is overwritten with row n + r > r (n >= 1), a
  // row not yet overwritten when r runs upwards.
  if (n == 0) return;
  for (int64_t r = 0; r < K - 1; ++r) state.p[r * state.stride + c] = hist(n + r);
}

// One warp per (value head h, state columns blockIdx.y*32 ..): dynamic shared memory holds the
// warp's 32 columns of S, [head_k][32] (lane j's column at stride 32: no bank conflicts, and no
// lane reads another's), then the token's normalised q and k (head_k floats each).
__global__ void __launch_bounds__(32)
    delta_net_kernel(CMat q, CMat k, CMat v, CMat a, CMat b, Mat state, Mat out, DeltaNetArgs p) {
  extern __shared__ float smem[];
  const int h = blockIdx.x, lane = threadIdx.x;
  const int64_t hk = p.head_k, hv = p.head_v, j = blockIdx.y * 32 + lane;
  float* s = smem + lane;  // this lane's column: s[i * 32] = S[i][j]
  float* qs = smem + hk * 32;
  float* ks = qs + hk;
  const int kh = p.tiled ? h % p.n_k_heads : h / (p.n_v_heads / p.n_k_heads);
  const bool mine = j < hv;  // lanes past head_v only help normalise q and k
  float* S = state.p + (int64_t)h * hk * state.stride + j;  // S[i][j] at S[i * stride]
  for (int64_t i = 0; i < hk; ++i) s[i * 32] = mine ? S[i * state.stride] : 0.0f;
  const float A = p.A[h], dt = p.dt_bias[h];
  for (int64_t t = 0; t < q.rows; ++t) {
    // L2-normalised q (times 1/sqrt(head_k)) and k of key head kh.
    const float* qt = q.p + t * q.stride + kh * hk;
    const float* kt = k.p + t * k.stride + kh * hk;
    float qq = 0.0f, kk = 0.0f;
    for (int64_t i = lane; i < hk; i += 32) {
      qq += qt[i] * qt[i];
      kk += kt[i] * kt[i];
    }
    qq = warp_sum(qq);
    kk = warp_sum(kk);
    const float qinv = p.q_scale / sqrtf(qq + p.l2_eps), kinv = 1.0f / sqrtf(kk + p.l2_eps);
    __syncwarp();  // the previous token's reads of qs / ks are done
    for (int64_t i = lane; i < hk; i += 32) {
      qs[i] = qt[i] * qinv;
      ks[i] = kt[i] * kinv;
    }
    __syncwarp();
    const float beta = sigmoidf_(b.p[t * b.stride + h]);
    const float decay = expf(A * softplusf_(a.p[t * a.stride + h] + dt));
    if (mine) {
      // S *= decay; mem = S^T k; delta = (v - mem) * beta; S += k (x) delta; out = S^T q.
      float mem = 0.0f;
      for (int64_t i = 0; i < hk; ++i) {
        const float si = s[i * 32] * decay;
        s[i * 32] = si;
        mem += si * ks[i];
      }
      const float delta = (v.p[t * v.stride + (int64_t)h * hv + j] - mem) * beta;
      float o = 0.0f;
      for (int64_t i = 0; i < hk; ++i) {
        const float si = s[i * 32] + ks[i] * delta;
        s[i * 32] = si;
        o += si * qs[i];
      }
      out.p[t * out.stride + (int64_t)h * hv + j] = o;
    }
  }
  if (!mine) return;
  for (int64_t i = 0; i < hk; ++i) S[i * state.stride] = s[i * 32];
}

}  // namespace

void conv1d_silu(CMat x, Mat state, CMat w, Mat out, cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0) return;
  conv1d_silu_kernel<<<grid_for(x.cols, kConvBlock), kConvBlock, 0, s>>>(x, state, w, out);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

void gated_delta_net(CMat q, CMat k, CMat v, CMat a, CMat b, Mat state, Mat out,
                     const DeltaNetArgs& p, cudaStream_t s) {
  if (q.rows == 0) return;
  if (p.head_k < 1 || p.head_k > kMaxDeltaNetHeadK)
    throw_error("gated_delta_net: head_k outside the CUDA kernel's 1..256");
  const dim3 grid((unsigned)p.n_v_heads, grid_for(p.head_v, 32));
  const size_t smem = (size_t)p.head_k * (32 + 2) * sizeof(float);  // <= 34 KiB: no opt-in
  delta_net_kernel<<<grid, 32, smem, s>>>(q, k, v, a, b, state, out, p);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace moeflow::cuda
