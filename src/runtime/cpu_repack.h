#pragma once
// Which weights of a model read into memory the CPU backend rewrites into its own layouts
// (backend/cpu/matmul.h: repack_for_cpu; today Q4_K, MXFP4 and Q8_0 rows interleaved by 8:
// Q4_K_R8, MXFP4_R8, Q8_0_R8), as the GgufFile::read_into_memory transform. Only the matrices the
// model multiplies through Backend::matmul and nothing else (never token_embd, read row by row, nor
// attn_kv_b, whose rows are dequantized and transposed): an interleaved matrix has no single rows
// to read.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "experts/slot_rewrite.h"
#include "gguf/gguf_file.h"

namespace moeflow {

// True for the tensor names the model only ever multiplies (blk.N.ffn_*, blk.N.attn_q/k/v/
// output/..., output.weight).
bool is_matmul_only_weight(const std::string& name);

// The read_into_memory transform: repacks the tensors that are matmul-only and that
// cpu_repacked_type maps to a layout of the CPU's own, counting their bytes into *bytes
// (atomic: the transform runs on several threads).
GgufFile::TensorTransform cpu_repack_transform(std::atomic<uint64_t>* bytes);

// For the CPU backend's weight copies (an offloaded model's non-expert weights,
// CpuBackend::set_copy_weights): true for a view that is the whole of one of `file`'s tensors
// and that tensor is matmul-only. The function keeps what it needs of `file`.
std::function<bool(const TensorView&)> matmul_only_views(const GgufFile& file);

// The same layouts for an offloaded expert cache's host slots: every expert matrix that
// cpu_repacked_type maps to a layout of the CPU's own is rewritten as it arrives (on the I/O
// worker; experts/slot_rewrite.h), so a cached expert is read by the same kernels as a resident
// one.
SlotRewrite cpu_slot_rewrite();

}  // namespace moeflow
