#pragma once
// Weight x activation products for every supported weight type. Weights are rows of blocks
// exactly as stored in GGUF (row r = row_bytes(type, cols) bytes at W + r * that). Activations
// are float; for quantized weight types they are first converted to the type's dot partner
// (Q8_0 or Q8_K, as llama.cpp does) so the inner loop is integer arithmetic.
//
// Determinism: each output element is computed by one thread with a fixed reduction order, so
// results are bit-identical for any thread count and any ThreadPool.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ggml_type.h"
#include "core/thread_pool.h"

namespace moeflow {

// The format activations are converted to before dotting with weights of type w
// (F32 for F32/F16/BF16 weights, Q8_0 for 32-blocks, Q8_K for K-quants / IQ4_XS).
GgmlType activation_type_for(GgmlType w);

// Bytes of one activation row for weights of type w: the activation type's row; Q8_0 rows also
// carry their block scales as floats (see kernels::q8_0_row_scales).
size_t activation_row_bytes(GgmlType w, int64_t n);

// Converts n floats into activation_type_for(w); resizes `out` to activation_row_bytes(w, n).
void quantize_activation(GgmlType w, const float* x, int64_t n, std::vector<uint8_t>& out);

// Dot product of one weight row of type w with an activation produced by quantize_activation.
float vec_dot(GgmlType w, int64_t n, const void* w_row, const void* act);

// y[r] = sum_c W[r][c] * x[c] for r in [0, rows). pool may be null (single thread).
void matvec(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
            ThreadPool* pool);

// y_h[r] = sum_c W_h[r][c] * x_h[c] for n_head heads: W_h at W + h * head_bytes, x_h at
// x + h * x_step, y_h at y + h * y_step (floats). Each head's rows equal matvec's bit for bit;
// the heads' activations are quantized first and all heads' rows share one dispatch.
void matvec_heads(GgmlType w, const void* W, size_t head_bytes, int64_t n_head, int64_t rows,
                  int64_t cols, const float* x, int64_t x_step, float* y, int64_t y_step,
                  ThreadPool* pool);

// Y[t][r] = sum_c W[r][c] * X[t][c] for t in [0, n_tok). X is n_tok x cols, Y is n_tok x rows,
// both row-major float. Blocks over tokens so each weight row is read once per tile.
void matmul(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tok,
            float* Y, ThreadPool* pool);

// Layouts of the CPU kernels' own (core/ggml_type.h: Q4_K_R8, MXFP4_R8, Q8_0_R8), rewritten
// once at load where the weights lie in memory the process owns (a model read into memory): the
// type a matrix of `rows` rows of type w becomes, or w where it stays (no such layout, rows not a
// multiple of 8, or the scalar level, which keeps its own kernels).
GgmlType cpu_repacked_type(GgmlType w, int64_t rows);
// Rewrites n_mat matrices of rows x cols of type w, back to back at data, into
// cpu_repacked_type(w, rows) in place (the same bytes). At the levels that choose a layout every
// product gives the same bits as before (at every level for MXFP4_R8 and Q8_0_R8).
void repack_for_cpu(GgmlType w, void* data, int64_t cols, int64_t rows, int64_t n_mat);

// Name of the instruction set the dispatcher picked ("avx512", "avx2", "scalar"), and a way
// for tests to force a lower one (nullptr restores auto-detection).
const char* simd_level();
void force_simd_level(const char* level);

}  // namespace moeflow
