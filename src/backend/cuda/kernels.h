#pragma once
// Host-side launchers of the CUDA kernels, one group per k_*.cu file. Plain C++ signatures
// (device pointers, shapes, strides in elements) so that cuda_backend.cpp, compiled by the host
// compiler, can call them. Every launcher checks its launch (MOEFLOW_CUDA_CHECK_LAUNCH).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/ggml_type.h"

namespace moeflow::cuda {

// A float32 matrix in device memory: `rows` rows of `cols` floats, `stride` floats apart.
struct Mat {
  float* p;
  int64_t rows, cols, stride;
};
struct CMat {
  const float* p;
  int64_t rows, cols, stride;
};

// A small host array handed to a kernel: up to N values travel inside the kernel's parameters
// (so a captured graph holds them), more through a device copy made by the backend.
template <typename T, int N = 64>
struct HostArray {
  static constexpr int kInline = N;
  const T* dev = nullptr;  // device copy, when count > N
  int count = 0;
  T inl[N];
#if defined(__CUDACC__)
  __device__ __forceinline__ T operator[](int i) const { return dev ? dev[i] : inl[i]; }
#endif
};
using IndexArray = HostArray<int32_t>;
using WeightArray = HostArray<float>;
using KeepArray = HostArray<uint8_t>;

// ---- k_matvec.cu: decode products with 8-bit activations ----------------------------------

// x [n][cols] (cols % 32 == 0) -> q [n][cols] int8 and d [n][cols/32] (block_decode.h).
void quantize_activations(CMat x, int8_t* q, float* d, cudaStream_t s);
// y[t][r] = sum_c W[r][c] x[t][c] for a block-quantized W and n <= kMaxVecTokens tokens given
// as quantize_activations output; y is [n][rows].
constexpr int kMaxVecTokens = 8;
void matvec_quant(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                  const int8_t* q, const float* d, int n, Mat y, cudaStream_t s);
// The same for F32/F16/BF16 weights and float activations.
void matvec_float(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                  CMat x, Mat y, cudaStream_t s);

// ---- k_dequant.cu: weights to 16-bit tiles (prefill GEMM) and embedding rows -------------

// rows x cols of W -> out (row-major, `out_stride` elements apart) as fp16 (half_out) or float.
void dequantize_rows(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                     void* out, int64_t out_stride, bool half_out, cudaStream_t s);
// out[j] = row ids[j] of the table, dequantized to float.
void get_rows(GgmlType t, const uint8_t* table, size_t row_bytes, int64_t cols,
              const IndexArray& ids, Mat out, cudaStream_t s);
// x -> packed [rows][cols] fp16 (bf16 = false) or bf16.
void to_16bit(CMat x, void* out, bool bf16, cudaStream_t s);

// ---- k_norm.cu ------------------------------------------------------------------------------

void rms_norm(CMat x, const float* weight, Mat out, float eps, cudaStream_t s);
void layer_norm(CMat x, const float* weight, const float* bias, Mat out, float eps, cudaStream_t s);

// ---- k_rope.cu ------------------------------------------------------------------------------

struct RopeArgs {
  bool neox = false;
  int n_head = 0;
  int64_t head_dim = 0, n_rot = 0, pos0 = 0;
  float freq_base = 10000.0f, freq_scale = 1.0f, ext_factor = 0.0f, attn_factor = 1.0f;
  float corr0 = 0.0f, corr1 = 0.0f;  // YaRN ramp ends (computed on the host as the CPU does)
  const float* freq_factors = nullptr;
  bool plain = true;  // the CPU's plain path: no scaling hooks at all
};
void rope(Mat x, const RopeArgs& a, cudaStream_t s);

// ---- k_attention.cu -------------------------------------------------------------------------

struct AttnArgs {
  int n_head = 0, n_head_kv = 0;
  int64_t head_dim = 0, head_dim_v = 0;
  float scale = 0.0f;
  int64_t window = 0;
  const float* sinks = nullptr;
  int64_t pos0 = 0;
};
// Floats of scratch the attention of n query rows needs (split-K partials).
size_t attention_scratch_floats(int64_t n, const AttnArgs& a);
void attention(CMat q, CMat k, CMat v, Mat out, const AttnArgs& a, float* scratch, cudaStream_t s);

// ---- k_elementwise.cu -----------------------------------------------------------------------

enum class Glu : int { SwiGLU = 0, GeGLU = 1, SwiGLUOai = 2 };
void glu(CMat gate, CMat up, Mat out, Glu kind, float alpha, float limit, cudaStream_t s);
void add(Mat x, CMat y, cudaStream_t s);  // y of one row: added to every row
void scale_add(Mat acc, CMat x, float scale, cudaStream_t s);
void scale(Mat x, float scale, cudaStream_t s);  // x *= scale
void softcap(Mat x, float cap, cudaStream_t s);  // x = cap * tanh(x / cap)
void gated_add(Mat acc, CMat x, CMat gate, bool sigmoid, cudaStream_t s);
void sigmoid_mul(Mat x, CMat gate, cudaStream_t s);  // x *= sigmoid(gate)
void gather_rows(CMat src, const IndexArray& idx, Mat dst, cudaStream_t s);
void scatter_rows(Mat dst, const IndexArray& idx, CMat src, cudaStream_t s);
// keep.count == 0: every slot kept.
void moe_combine(Mat out, CMat slots, const WeightArray& w, const KeepArray& keep, int k,
                 cudaStream_t s);

// ---- k_recurrent.cu: gated DeltaNet layers (backend.h: conv1d_silu, gated_delta_net) ------

// out = silu(causal depthwise convolution of x continuing from state [K-1][C]); state becomes
// the last K-1 rows of the history. w is [C][K]; out does not alias x.
void conv1d_silu(CMat x, Mat state, CMat w, Mat out, cudaStream_t s);

constexpr int64_t kMaxDeltaNetHeadK = 256;  // shared memory: a warp holds head_k x 32 floats
struct DeltaNetArgs {
  int n_k_heads = 0, n_v_heads = 0;
  int64_t head_k = 0, head_v = 0;
  bool tiled = false;
  float l2_eps = 0.0f;
  float q_scale = 0.0f;                          // 1/sqrt(head_k), computed as the CPU does
  const float *A = nullptr, *dt_bias = nullptr;  // n_v_heads floats, device memory
};
// state [n_v_heads * head_k][head_v] (updated), out [n][n_v_heads * head_v].
void gated_delta_net(CMat q, CMat k, CMat v, CMat a, CMat b, Mat state, Mat out,
                     const DeltaNetArgs& p, cudaStream_t s);

// ---- k_route.cu -----------------------------------------------------------------------------

struct RouteArgs {
  bool sigmoid = false, softmax_after_topk = false, norm_weights = false;
  float scale = 1.0f;
  int k = 0;
};
// For each row of logits [n][E]: probs [n][E], experts/weights [n][k] (device memory).
void route(CMat logits, const RouteArgs& a, const float* bias, int32_t* experts, float* weights,
           float* probs, cudaStream_t s);

}  // namespace moeflow::cuda
