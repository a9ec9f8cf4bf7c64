// matvec / matmul drivers: argument checks, activation conversion, and the split of rows over
// threads. The arithmetic lives in the per-ISA kernel tables (vec_dot_*.cpp).
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/mxfp4_rows8.h"
#include "backend/cpu/q4k_rows8.h"
#include "backend/cpu/q8_0_rows8.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks.h"

namespace moeflow {
namespace {

using kernels::DotFn;

void quantize_into(GgmlType w, const float* x, int64_t n, uint8_t* out) {
  switch (activation_type_for(w)) {
    case GgmlType::F32: std::memcpy(out, x, (size_t)n * sizeof(float)); break;
    case GgmlType::Q8_0: {
      if (kernels::active_simd() >= kernels::Simd::Avx2)
        kernels::quantize_q8_0_avx2(x, n, out);
      else
        kernels::quantize_q8_0(x, n, out);
      const auto* blocks = reinterpret_cast<const BlockQ8_0*>(out);
      float* scales = const_cast<float*>(kernels::q8_0_row_scales(out, n));
      uint8_t* qs = const_cast<uint8_t*>(kernels::q8_0_row_quants_u8(out, n));
      float* scales8 = const_cast<float*>(kernels::q8_0_row_scales8(out, n));
      for (int64_t b = 0; b < n / QK8_0; ++b) {
        scales[b] = fp16_to_fp32(blocks[b].d);
        std::fill(scales8 + 8 * b, scales8 + 8 * b + 8, scales[b]);
        for (int k = 0; k < QK8_0; ++k) qs[b * QK8_0 + k] = (uint8_t)blocks[b].qs[k] ^ 0x80;
      }
      // The AVX2 and AVX-512 MXFP4_R8 kernels read the corrections (the scalar level unpacks
      // the groups); the row has their room at every level.
      if (w == GgmlType::MXFP4_R8 && kernels::active_simd() >= kernels::Simd::Avx2) {
        auto* corr = const_cast<int32_t*>(kernels::mxfp4_r8_row_corrections(out, n));
        for (int64_t b = 0; b < n / QK8_0; ++b)
          for (int j = 0; j < 8; ++j) {
            const int8_t* q = blocks[b].qs + 4 * j;
            corr[8 * b + j] = -12 * (q[0] + q[1] + q[2] + q[3]);
          }
      }
      break;
    }
    case GgmlType::Q8_1: kernels::quantize_q8_1(x, n, out); break;
    case GgmlType::Q8_K:
      if (kernels::active_simd() >= kernels::Simd::Avx2)
        kernels::quantize_q8_k_avx2(x, n, out);
      else
        kernels::quantize_q8_k(x, n, out);
      break;
    default: fail("internal: no activation quantizer for {}", type_name(w));
  }
}

void check_shape(GgmlType w, int64_t rows, int64_t cols, const char* what) {
  if (rows < 0 || cols < 0) fail("{}: negative shape {}x{}", what, rows, cols);
  const TypeTraits& tr = type_traits(w);
  const int64_t bs = type_traits(activation_type_for(w)).block_size;
  if (cols % bs != 0 || cols % tr.block_size != 0)
    fail("{}: {} weight rows of {} columns are not a multiple of the block size {}", what, tr.name,
         cols, std::max<int64_t>(bs, tr.block_size));
}

// Scratch reused across calls on the same thread (64-byte aligned): decode calls matvec per token
// per expert and prefill matmul per expert per step, and must not hit the allocator each time.
// matvec and matmul never nest on one thread, so they share it.
uint8_t* scratch(size_t bytes) {
  thread_local AlignedBuffer buf;
  if (buf.size() < bytes) buf.allocate(bytes);
  return buf.data();
}

}  // namespace

GgmlType activation_type_for(GgmlType w) {
  switch (w) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return GgmlType::F32;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::Q8_0_R8:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
    case GgmlType::MXFP4_R8: return GgmlType::Q8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q4_K_R8:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return GgmlType::Q8_K;
    default: fail("weight type {} has no CPU matmul kernel", type_name(w));
  }
}

size_t activation_row_bytes(GgmlType w, int64_t n) {
  const GgmlType a = activation_type_for(w);
  if (w == GgmlType::MXFP4_R8) return kernels::mxfp4_r8_activation_row_bytes(n);
  return a == GgmlType::Q8_0 ? kernels::q8_0_activation_row_bytes(n) : row_bytes(a, n);
}

void quantize_activation(GgmlType w, const float* x, int64_t n, std::vector<uint8_t>& out) {
  check_shape(w, 1, n, "quantize_activation");
  out.resize(activation_row_bytes(w, n));
  quantize_into(w, x, n, out.data());
}

float vec_dot(GgmlType w, int64_t n, const void* w_row, const void* act) {
  check_shape(w, 1, n, "vec_dot");
  if (kernels::rows_interleaved(w))
    fail("vec_dot: the rows of {} are interleaved in groups of 8, not one row alone", type_name(w));
  float r = 0;
  if (n > 0) kernels::dot_fn(w)(n, w_row, act, 0, 1, &r);
  return r;
}

namespace {

// matvec of n_head heads (one for matvec): W_h at W + h * head_bytes, x_h at x + h * x_step, y_h
// at y + h * y_step. `what` names the caller in shape errors.
void heads_matvec(const char* what, GgmlType w, const void* W, size_t head_bytes, int64_t n_head,
                  int64_t rows, int64_t cols, const float* x, int64_t x_step, float* y,
                  int64_t y_step, ThreadPool* pool) {
  check_shape(w, rows, cols, what);
  if (rows == 0 || n_head <= 0) return;
  if (cols == 0) {
    for (int64_t h = 0; h < n_head; ++h) std::fill(y + h * y_step, y + h * y_step + rows, 0.f);
    return;
  }
  const DotFn fn = kernels::dot_fn(w);
  // Groups of R rows go through the multi-row kernel where the level has one (bit-identical
  // to fn per row); the rest of each thread's range row by row.
  const size_t wbytes = row_bytes(w, cols);
  kernels::RowsKernel multi = kernels::rows_fn(w);
  if (wbytes < kernels::kMultiRowMinBytes && !multi.any_length) multi = {};
  // An interleaved type (Q4_K_R8, MXFP4_R8, Q8_0_R8) is only readable group by group: each head's
  // groups must start at a multiple of 8 rows of the dispatch, which the grain below keeps.
  if (kernels::rows_interleaved(w) && n_head > 1 && rows % multi.rows != 0)
    fail("{}: {} heads of {} rows are not whole groups of {} interleaved rows", what, n_head, rows,
         multi.rows);
  const size_t astride = activation_row_bytes(w, cols);
  // Laid out as matmul's tokens: one activation row per head, astride apart.
  uint8_t* const act = scratch(astride * (size_t)n_head);
  for (int64_t h = 0; h < n_head; ++h)
    quantize_into(w, x + h * x_step, cols, act + (size_t)h * astride);
  const uint8_t* Wb = static_cast<const uint8_t*>(W);
  // Row i of the dispatch is row i % rows of head i / rows; a range may span heads.
  auto body = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1;) {
      const int64_t h = i / rows, r0 = i % rows, r1 = std::min(rows, r0 + (i1 - i));
      const uint8_t* Wh = Wb + (size_t)h * head_bytes;
      const uint8_t* a = act + (size_t)h * astride;
      float* yh = y + h * y_step;
      int64_t r = r0;
      if (multi.fn2)
        for (; r + 2 * multi.rows <= r1; r += 2 * multi.rows)
          multi.fn2(cols, Wh + (size_t)r * wbytes, wbytes, a, yh + r);
      if (multi.fn)
        for (; r + multi.rows <= r1; r += multi.rows)
          multi.fn(cols, Wh + (size_t)r * wbytes, wbytes, a, yh + r);
      for (; r < r1; ++r) fn(cols, Wh + (size_t)r * wbytes, a, 0, 1, yh + r);
      i += r1 - r0;
    }
  };
  // Claimed as the threads go rather than split in halves: decode's matvecs are ~100 us each and
  // many; with fixed shares 12% of decode's perf samples were threads waiting in the pool (the
  // DeepSeek-V2-Lite shape), 7% with claiming. Each row is computed alike whichever thread
  // takes it.
  const int64_t total = n_head * rows;
  if (pool && pool->size() > 1 && total > 1)
    pool->parallel_for_dynamic(total, body, std::max<int64_t>(4, multi.rows));
  else
    body(0, total, 0);
}

}  // namespace

void matvec(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
            ThreadPool* pool) {
  heads_matvec("matvec", w, W, 0, 1, rows, cols, x, 0, y, 0, pool);
}

void matvec_heads(GgmlType w, const void* W, size_t head_bytes, int64_t n_head, int64_t rows,
                  int64_t cols, const float* x, int64_t x_step, float* y, int64_t y_step,
                  ThreadPool* pool) {
  heads_matvec("matvec_heads", w, W, head_bytes, n_head, rows, cols, x, x_step, y, y_step, pool);
}

GgmlType cpu_repacked_type(GgmlType w, int64_t rows) {
  // The scalar level keeps the GGUF layouts: its Q4_K kernel is its own, and it has no
  // MXFP4_R8 / Q8_0_R8 kernel (it would unpack every group).
  if (rows <= 0 || rows % 8 != 0 || kernels::active_simd() < kernels::Simd::Avx2) return w;
  if (w == GgmlType::Q4_K) return GgmlType::Q4_K_R8;
  if (w == GgmlType::MXFP4) return GgmlType::MXFP4_R8;
  if (w == GgmlType::Q8_0) return GgmlType::Q8_0_R8;
  return w;
}

void repack_for_cpu(GgmlType w, void* data, int64_t cols, int64_t rows, int64_t n_mat) {
  const GgmlType to = cpu_repacked_type(w, rows);
  if (to == w) fail("repack_for_cpu: {} weights stay as they are", type_name(w));
  check_shape(w, rows, cols, "repack_for_cpu");
  const int64_t groups = n_mat * (rows / 8);
  if (to == GgmlType::Q4_K_R8)
    kernels::q4k_rows8::repack(cols, data, row_bytes(w, cols), groups);
  else if (to == GgmlType::MXFP4_R8)
    kernels::mxfp4_rows8::repack(cols, data, row_bytes(w, cols), groups);
  else
    kernels::q8_0_rows8::repack(cols, data, row_bytes(w, cols), groups);
}

namespace {

// matmul's few-token path for an interleaved type (see there): group by group, each token
// through the 8-row kernel; rows past the last whole group (the base type's layout) through the
// level's row kernel, kMaxTokens tokens at a time.
void few_tokens_interleaved(GgmlType w, const kernels::RowsKernel& multi, const uint8_t* Wb,
                            int64_t rows, int64_t cols, const uint8_t* act, size_t astride,
                            int64_t n_tok, float* Y, ThreadPool* pool) {
  const size_t wbytes = row_bytes(w, cols);
  const DotFn fn = kernels::dot_fn(w);
  const int64_t R = multi.rows, groups = rows / R;
  MOEFLOW_CHECK(R == 8, "matmul: an interleaved type of {} rows per group", R);
  auto body = [&](int64_t g0, int64_t g1, int) {
    float out[kernels::kMaxTokens * 8];
    for (int64_t g = g0; g < g1; ++g) {
      if (g < groups) {
        const uint8_t* gw = Wb + (size_t)(g * R) * wbytes;
        for (int64_t t = 0; t < n_tok; ++t) {
          multi.fn(cols, gw, wbytes, act + (size_t)t * astride, out);
          std::memcpy(Y + t * rows + g * R, out, (size_t)R * sizeof(float));
        }
        continue;
      }
      // The tail: one unit of work past the groups, its rows one by one.
      for (int64_t r = groups * R; r < rows; ++r)
        for (int64_t t = 0; t < n_tok; t += kernels::kMaxTokens) {
          const int nt = (int)std::min<int64_t>(kernels::kMaxTokens, n_tok - t);
          fn(cols, Wb + (size_t)r * wbytes, act + (size_t)t * astride, astride, nt, out);
          for (int k = 0; k < nt; ++k) Y[(t + k) * rows + r] = out[k];
        }
    }
  };
  const int64_t units = groups + (rows % R != 0);
  if (pool && pool->size() > 1 && units > 1)
    pool->parallel_for(units, body, 1);
  else
    body(0, units, 0);
}

}  // namespace

void matmul(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tok,
            float* Y, ThreadPool* pool) {
  if (n_tok < 0) fail("matmul: negative token count {}", n_tok);
  if (n_tok == 0) return;
  if (n_tok == 1) return matvec(w, W, rows, cols, X, Y, pool);
  check_shape(w, rows, cols, "matmul");
  if (rows == 0) return;
  if (cols == 0) {
    std::fill(Y, Y + rows * n_tok, 0.f);
    return;
  }
  const DotFn fn = kernels::dot_fn(w);
  const size_t astride = activation_row_bytes(w, cols);
  // 64-byte aligned, so the Q8_0 rows' wide loads are aligned; up to 64 MiB in the thread's
  // scratch, reused across calls (the expert products of a prefill run hundreds per step),
  // larger ones freed after the call.
  const size_t act_bytes = astride * (size_t)n_tok;
  AlignedBuffer act_once;
  if (act_bytes > (64u << 20)) act_once.allocate(act_bytes);
  uint8_t* const act_data = act_bytes > (64u << 20) ? act_once.data() : scratch(act_bytes);
  auto quant = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) quantize_into(w, X + t * cols, cols, act_data + t * astride);
  };
  if (pool && pool->size() > 1)
    pool->parallel_for(n_tok, quant, 1);
  else
    quant(0, n_tok, 0);

  const size_t wbytes = row_bytes(w, cols);
  const uint8_t* Wb = static_cast<const uint8_t*>(W);
  // Tokens per pass: as many as keep the bytes their kernels read (~1 MiB) in L2; the weights
  // are streamed from memory once per pass. Q8_0 rows are larger than what one level reads:
  // AVX-512 reads the back-to-back quants, offsets and x8 scales (3 bytes per column), the other
  // levels the blocks and the float scales (about 1.2; 2 is kept as the estimate). Within a pass, a
  // block of weight rows (~128 KiB, which stays in L2) is walked once per tile of kMaxTokens
  // tokens, so the tile's activations (8 x 2.3 KiB for a 2048-column Q8_K row) stay in L1 across
  // the block's rows: activations are read 8 times per weight byte and the weights once per tile.
  // When each row walked all of the pass's tiles instead, L2 traffic limited prefill. Every output
  // is the same kernel call on the same tile whatever the walk order, so the results are too.
  const size_t hot = activation_type_for(w) == GgmlType::Q8_0 ? 3 * (size_t)cols : astride;
  const int64_t tok_chunk = std::max<int64_t>(
      kernels::kMaxTokens, (int64_t)((1u << 20) / hot) / kernels::kMaxTokens * kernels::kMaxTokens);
  //
  // Where the level has an 8-row path for the type (rows in the lanes, kernel_table.h), each row
  // block's groups of 8 rows are packed once per pass into the thread's own buffer and every
  // tile runs over the packed groups; the rows left over go through fn. Both give the same bits
  // per row and token, so neither the grouping nor the threads' split can change a result. Below
  // kTile8MinTokens the packing (the weights read once more, 2.4x their bytes written) is not
  // paid back: on a DeepSeek-V2-Lite expert (Q4_K 1408 x 2048, weights from DRAM, one thread)
  // the row kernel (its tokens reduced together) ran 29k tok/s from 16 to 32 tokens, the packed
  // path 25k at 16, 29-31k at 24 and 33-35k at 32 (AVX2: 16-20k vs 18-20k, 20-21k, 23-24k).
  constexpr int64_t kTile8MinTokens = 24;
  const kernels::Tile8Fn in_place = kernels::groups8_fn(w);
  // An interleaved type without an in-place multi-token kernel (MXFP4_R8, Q8_0_R8) below
  // kTile8MinTokens, at AVX-512: its 8-row matvec kernel once per token on each group, the
  // group's bytes in L1 across the tokens, instead of restoring the group's GGUF rows for the
  // tiles (a restore a few tokens do not pay back). The same bits per row and token either way.
  // Measured on the Zen 4 EPYC (2026-11-28, bench_micro BM_matmul, a gpt-oss expert MXFP4_R8
  // 2880 x 2880 at 8 tokens, one thread, 4 interleaved pairs): restored 4.42k tok/s, per token
  // 5.50k (the file's MXFP4 layout 5.37k). At AVX2, whose 8-row kernel is half as fast, 3.29k vs
  // 3.38k: not worth a second path there (MXFP4 itself 4.2k: AVX2 prefill of few tokens pays
  // for the interleaved layout decode wants).
  const kernels::RowsKernel multi = kernels::rows_fn(w);
  if (kernels::rows_interleaved(w) && !in_place && n_tok < kTile8MinTokens && multi.fn &&
      kernels::active_simd() >= kernels::Simd::Avx512) {
    few_tokens_interleaved(w, multi, Wb, rows, cols, act_data, astride, n_tok, Y, pool);
    return;
  }
  // An interleaved type without an in-place kernel (MXFP4_R8, Q8_0_R8) goes through its pack/tile
  // pair (which restores the GGUF rows) at every token count.
  kernels::Tile8Kernel x8 = n_tok >= kTile8MinTokens || (kernels::rows_interleaved(w) && !in_place)
                                ? kernels::tile8_fn(w)
                                : kernels::Tile8Kernel{};
  // An interleaved type's groups are dotted where they lie, unless the level packs them for its
  // tiles (AVX2 from kTile8MinTokens: its in-place kernel unpacks per 4 tokens).
  const int64_t block = type_traits(w).block_size;
  if (in_place && !x8.tile) x8 = {nullptr, in_place, 8 * row_bytes(w, block)};
  if (kernels::rows_interleaved(w) && !x8.tile)
    fail("matmul: no CPU kernel reads {} groups at this SIMD level", type_name(w));
  const size_t group_bytes = x8.tile ? x8.block_bytes * (size_t)(cols / block) : 0;
  const int64_t row_block = x8.tile ? std::max<int64_t>(8, (int64_t)((128u << 10) / wbytes) / 8 * 8)
                                    : std::max<int64_t>(8, (int64_t)((128u << 10) / wbytes));
  // With several passes, a thread keeps the packed groups of its whole row range from the first
  // pass to the next when they take at most kKeepPackedBytes, instead of packing every row block
  // again per pass: for gpt-oss's attention at pp512 (Q8_0_R8 4096 x 2880, 5 passes) the
  // repacked matrix's restored rows cost 4% of the matmul when packed per pass.
  constexpr size_t kKeepPackedBytes = size_t{8} << 20;
  auto body = [&](int64_t r0, int64_t r1, int) {
    float out[kernels::kMaxTokens * 8];
    uint8_t* packed = nullptr;
    const bool keep =
        x8.pack && n_tok > tok_chunk && group_bytes * (size_t)((r1 - r0) / 8) <= kKeepPackedBytes;
    if (x8.pack) {
      thread_local AlignedBuffer pack_buf;  // never the caller's activation scratch
      const size_t need = group_bytes * (size_t)((keep ? r1 - r0 : row_block) / 8);
      if (pack_buf.size() < need) pack_buf.allocate(need);
      packed = pack_buf.data();
    }
    for (int64_t c0 = 0; c0 < n_tok; c0 += tok_chunk) {
      const int64_t c1 = std::min(n_tok, c0 + tok_chunk);
      for (int64_t b0 = r0; b0 < r1; b0 += row_block) {
        const int64_t b1 = std::min(r1, b0 + row_block);
        const int64_t groups = x8.tile ? (b1 - b0) / 8 : 0;
        // Packed into the thread's buffer (the row block's place in it when kept), or (in
        // place) the groups as they lie in W.
        uint8_t* const block_packed =
            keep ? packed + (size_t)((b0 - r0) / 8) * group_bytes : packed;
        const uint8_t* gbase = x8.pack ? block_packed : Wb + (size_t)b0 * wbytes;
        if (x8.pack && (!keep || c0 == 0))
          for (int64_t g = 0; g < groups; ++g)
            x8.pack(cols, Wb + (size_t)(b0 + 8 * g) * wbytes, wbytes,
                    block_packed + (size_t)g * group_bytes);
        for (int64_t t = c0; t < c1; t += kernels::kMaxTokens) {
          const int nt = (int)std::min<int64_t>(kernels::kMaxTokens, c1 - t);
          const uint8_t* at = act_data + (size_t)t * astride;
          for (int64_t g = 0; g < groups; ++g) {
            x8.tile(cols, gbase + (size_t)g * group_bytes, at, astride, nt, out);
            for (int k = 0; k < nt; ++k)
              std::memcpy(Y + (t + k) * rows + b0 + 8 * g, out + 8 * k, 8 * sizeof(float));
          }
          for (int64_t r = b0 + 8 * groups; r < b1; ++r) {
            fn(cols, Wb + (size_t)r * wbytes, at, astride, nt, out);
            for (int k = 0; k < nt; ++k) Y[(t + k) * rows + r] = out[k];
          }
        }
      }
    }
  };
  if (pool && pool->size() > 1 && rows > 1)
    pool->parallel_for(rows, body, x8.tile ? 8 : 4);
  else
    body(0, rows, 0);
}

}  // namespace moeflow
