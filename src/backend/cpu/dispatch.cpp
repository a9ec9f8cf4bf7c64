// Runtime choice of instruction set. Detection runs once; tests may force a lower level to
// check every kernel family on one machine.
#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/matmul.h"
#include "core/error.h"

namespace moeflow {
namespace kernels {
namespace {

// CPUID.1:ECX.F16C (the bit __builtin_cpu_supports("f16c") reads; clang 14 does not know
// that name).
bool has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

Simd detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && has_f16c() &&
      __builtin_cpu_supports("bmi2"))
    return Simd::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
      __builtin_cpu_supports("bmi2"))
    return Simd::Avx2;
  return Simd::Scalar;
}

// MOEFLOW_SIMD=scalar|avx2 caps the level for the whole process, as if the CPU had nothing
// better: CI uses it to run the suite the way a machine without AVX2 would.
Simd capped(Simd hw) {
  const char* e = std::getenv("MOEFLOW_SIMD");
  if (e == nullptr || *e == '\0') return hw;
  if (std::strcmp(e, "scalar") == 0) return Simd::Scalar;
  if (std::strcmp(e, "avx2") == 0) return std::min(hw, Simd::Avx2);
  if (std::strcmp(e, "avx512") == 0) return hw;
  fail("MOEFLOW_SIMD='{}' is not a SIMD level (expected scalar, avx2 or avx512)", e);
}

struct Tables {
  DotTable level[3];  // each already merged with the fallbacks below it
  Simd best;
  Tables() : best(capped(detect())) {
    // The fill functions live in files compiled for their instruction set, so even storing
    // the pointers may use that set's instructions (the compiler vectorises the stores): call
    // only the ones this CPU can run.
    DotTable raw[3];
    fill_scalar_table(raw[0]);
    if (best >= Simd::Avx2) fill_avx2_table(raw[1]);
    if (best >= Simd::Avx512) fill_avx512_table(raw[2]);
    for (int l = 0; l < 3; ++l)
      for (int k = 0; k < kTypeSlots; ++k) {
        int m = l;
        while (m > 0 && !raw[m].fn[k]) --m;
        level[l].fn[k] = raw[m].fn[k];
        // The multi-row kernel comes from the same level as the single-row one, never from a
        // lower level: only same-level kernels are bit-identical to each other.
        if (raw[m].fn[k] && raw[m].rows_fn[k] && raw[m].rows[k] > 1) {
          level[l].rows_fn[k] = raw[m].rows_fn[k];
          level[l].rows[k] = raw[m].rows[k];
          level[l].rows_any_length[k] = raw[m].rows_any_length[k];
          level[l].rows2_fn[k] = raw[m].rows2_fn[k];
        }
        if (raw[m].fn[k]) level[l].groups8[k] = raw[m].groups8[k];
        if (raw[m].fn[k] && raw[m].pack8[k] && raw[m].tile8[k]) {
          level[l].pack8[k] = raw[m].pack8[k];
          level[l].tile8[k] = raw[m].tile8[k];
          level[l].packed8_block_bytes[k] = raw[m].packed8_block_bytes[k];
        }
      }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

std::atomic<int> g_forced{-1};

constexpr const char* kNames[3] = {"scalar", "avx2", "avx512"};

}  // namespace

Simd active_simd() {
  const int f = g_forced.load(std::memory_order_relaxed);
  return f >= 0 ? (Simd)f : tables().best;
}

Simd best_simd() { return tables().best; }

DotFn dot_fn(GgmlType w) {
  const int id = type_slot(w);
  DotFn f = id >= 0 ? tables().level[(int)active_simd()].fn[id] : nullptr;
  if (!f) fail("no CPU dot kernel for weight type {}", type_name(w));
  return f;
}

RowsKernel rows_fn(GgmlType w) {
  const int id = type_slot(w);
  if (id < 0) return {};
  const DotTable& t = tables().level[(int)active_simd()];
  return t.rows_fn[id]
             ? RowsKernel{t.rows_fn[id], t.rows[id], t.rows_any_length[id], t.rows2_fn[id]}
             : RowsKernel{};
}

Tile8Kernel tile8_fn(GgmlType w) {
  const int id = type_slot(w);
  if (id < 0) return {};
  const DotTable& t = tables().level[(int)active_simd()];
  return t.tile8[id] ? Tile8Kernel{t.pack8[id], t.tile8[id], t.packed8_block_bytes[id]}
                     : Tile8Kernel{};
}

Tile8Fn groups8_fn(GgmlType w) {
  const int id = type_slot(w);
  return id < 0 ? nullptr : tables().level[(int)active_simd()].groups8[id];
}

}  // namespace kernels

const char* simd_level() { return kernels::kNames[(int)kernels::active_simd()]; }

void force_simd_level(const char* level) {
  if (level == nullptr) {
    kernels::g_forced.store(-1);
    return;
  }
  for (int l = 0; l < 3; ++l) {
    if (std::strcmp(level, kernels::kNames[l]) == 0) {
      if (l > (int)kernels::best_simd())
        fail("SIMD level '{}' is not supported by this CPU (best is '{}')", level,
             kernels::kNames[(int)kernels::best_simd()]);
      kernels::g_forced.store(l);
      return;
    }
  }
  fail("unknown SIMD level '{}' (expected scalar, avx2 or avx512)", level);
}

}  // namespace moeflow
