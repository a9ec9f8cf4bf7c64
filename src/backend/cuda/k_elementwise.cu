// Element-wise ops over (possibly strided) float32 rows, one thread per element: the gated
// activations, residual adds, the attention output gate (sigmoid_mul), and the MoE block's data
// movement (gather the tokens routed to an expert, scatter its outputs to their slots, combine the
// slots in rank order). The formulas are the CPU's (backend/cpu/ops.cpp, cpu_backend.cpp).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ bool at(int64_t rows, int64_t cols, int64_t& r, int64_t& c) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= rows * cols) return false;
  r = i / cols;
  c = i % cols;
  return true;
}

__global__ void glu_kernel(CMat gate, CMat up, Mat out, Glu kind, float alpha, float limit) {
  int64_t r, c;
  if (!at(out.rows, out.cols, r, c)) return;
  float g = gate.p[r * gate.stride + c], u = up.p[r * up.stride + c], y;
  switch (kind) {
    case Glu::SwiGLU: y = g / (1.0f + expf(-g)) * u; break;
    case Glu::GeGLU: {
      constexpr float kSqrt2OverPi = 0.79788456080286535588f;
      y = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + 0.044715f * g * g))) * u;
      break;
    }
    default:
      if (limit > 0) {
        g = fminf(g, limit);
        u = fmaxf(-limit, fminf(u, limit));
      }
      y = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
  }
  out.p[r * out.stride + c] = y;
}

__global__ void add_kernel(Mat x, CMat y) {
  int64_t r, c;
  if (!at(x.rows, x.cols, r, c)) return;
  x.p[r * x.stride + c] += y.p[(y.rows == 1 ? 0 : r) * y.stride + c];
}

__global__ void scale_add_kernel(Mat acc, CMat x, float s) {
  int64_t r, c;
  if (!at(acc.rows, acc.cols, r, c)) return;
  acc.p[r * acc.stride + c] += s * x.p[r * x.stride + c];
}

__global__ void scale_kernel(Mat x, float s) {
  int64_t r, c;
  if (!at(x.rows, x.cols, r, c)) return;
  x.p[r * x.stride + c] *= s;
}

__global__ void softcap_kernel(Mat x, float cap) {
  int64_t r, c;
  if (!at(x.rows, x.cols, r, c)) return;
  float& v = x.p[r * x.stride + c];
  v = cap * tanhf(v / cap);
}

__global__ void gated_add_kernel(Mat acc, CMat x, CMat gate, bool sigmoid) {
  int64_t r, c;
  if (!at(acc.rows, acc.cols, r, c)) return;
  const float z = gate.p[r * gate.stride];
  const float g = sigmoid ? 1.0f / (1.0f + expf(-z)) : z;
  acc.p[r * acc.stride + c] += g * x.p[r * x.stride + c];
}

__global__ void sigmoid_mul_kernel(Mat x, CMat gate) {
  int64_t r, c;
  if (!at(x.rows, x.cols, r, c)) return;
  x.p[r * x.stride + c] *= 1.0f / (1.0f + expf(-gate.p[r * gate.stride + c]));
}

__global__ void gather_kernel(CMat src, IndexArray idx, Mat dst) {
  int64_t j, c;
  if (!at(idx.count, dst.cols, j, c)) return;
  dst.p[j * dst.stride + c] = src.p[(int64_t)idx[(int)j] * src.stride + c];
}

__global__ void scatter_kernel(Mat dst, IndexArray idx, CMat src) {
  int64_t j, c;
  if (!at(idx.count, src.cols, j, c)) return;
  dst.p[(int64_t)idx[(int)j] * dst.stride + c] = src.p[j * src.stride + c];
}

__global__ void combine_kernel(Mat out, CMat slots, WeightArray w, KeepArray keep, int k) {
  int64_t t, c;
  if (!at(out.rows, out.cols, t, c)) return;
  float acc = 0.0f;
  for (int r = 0; r < k; ++r) {
    const int i = (int)(t * k + r);
    if (keep.count != 0 && !keep[i]) continue;
    acc += w[i] * slots.p[(int64_t)i * slots.stride + c];
  }
  out.p[t * out.stride + c] = acc;
}

template <typename K, typename... A>
void launch(K kernel, int64_t n, cudaStream_t s, A... args) {
  if (n == 0) return;
  kernel<<<grid_for(n, kBlock), kBlock, 0, s>>>(args...);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace

void glu(CMat gate, CMat up, Mat out, Glu kind, float alpha, float limit, cudaStream_t s) {
  launch(glu_kernel, out.rows * out.cols, s, gate, up, out, kind, alpha, limit);
}
void add(Mat x, CMat y, cudaStream_t s) { launch(add_kernel, x.rows * x.cols, s, x, y); }
void scale_add(Mat acc, CMat x, float scale, cudaStream_t s) {
  launch(scale_add_kernel, acc.rows * acc.cols, s, acc, x, scale);
}
void scale(Mat x, float scale, cudaStream_t s) {
  launch(scale_kernel, x.rows * x.cols, s, x, scale);
}
void softcap(Mat x, float cap, cudaStream_t s) {
  launch(softcap_kernel, x.rows * x.cols, s, x, cap);
}
void gated_add(Mat acc, CMat x, CMat gate, bool sigmoid, cudaStream_t s) {
  launch(gated_add_kernel, acc.rows * acc.cols, s, acc, x, gate, sigmoid);
}
void sigmoid_mul(Mat x, CMat gate, cudaStream_t s) {
  launch(sigmoid_mul_kernel, x.rows * x.cols, s, x, gate);
}
void gather_rows(CMat src, const IndexArray& idx, Mat dst, cudaStream_t s) {
  launch(gather_kernel, (int64_t)idx.count * dst.cols, s, src, idx, dst);
}
void scatter_rows(Mat dst, const IndexArray& idx, CMat src, cudaStream_t s) {
  launch(scatter_kernel, (int64_t)idx.count * src.cols, s, dst, idx, src);
}
void moe_combine(Mat out, CMat slots, const WeightArray& w, const KeepArray& keep, int k,
                 cudaStream_t s) {
  launch(combine_kernel, out.rows * out.cols, s, out, slots, w, keep, k);
}

}  // namespace moeflow::cuda
