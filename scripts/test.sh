#!/usr/bin/env bash
# The test command: builds moeflow and runs the whole suite — release build (C++ tests and the
# Python oracle tests), then the C++ tests again under ASan+UBSan and under TSan, and the CUDA
# build (-DMOEFLOW_CUDA=ON, compiled for Hopper + PTX; its host-side tests run, its GPU tests
# skip without a device: "no CUDA device: ...").
# Usage: scripts/test.sh [--fast | --cuda]   (--fast: release build only; --cuda: the CUDA stage only)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

if [ "${1:-}" = --cuda ]; then MOEFLOW_SKIP_PY=1 bash scripts/setup-deps.sh; else bash scripts/setup-deps.sh; fi

run_suite() {  # dir, cmake args..., then ctest args after --
  local dir=$1; shift
  local cm=() ct=()
  while (($#)); do [ "$1" = -- ] && { shift; ct=("$@"); break; }; cm+=("$1"); shift; done
  cmake -S . -B "$dir" -G Ninja -DMOEFLOW_TESTS=ON -DMOEFLOW_BENCH=OFF "${cm[@]}" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "${ct[@]}")
}

# The CUDA backend compiles on every machine with nvcc (CI has it); the GPU tests it builds
# skip without a GPU, the block-decode arithmetic shared with the kernels is tested on the host.
# Only the targets whose tests run here are built. Without nvcc the stage fails under CI=true
# (CI must compile it) and is skipped elsewhere.
cuda_stage() {
  local nvcc
  nvcc=$(command -v nvcc || true)
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  if [ -z "$nvcc" ]; then
    if [ "${CI:-}" = true ]; then
      echo "== CUDA build: FAILED: nvcc not found (install the CUDA toolkit; CI must compile the CUDA backend)"
      exit 1
    fi
    echo "== CUDA build: skipped, no nvcc on this machine (CI=true makes this a failure)"
    return
  fi
  echo "== CUDA build ($("$nvcc" --version | grep -o 'release [0-9.]*'), sm_90 + compute_90 PTX): host-side tests"
  local t0=$SECONDS launch=()
  command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEFLOW_TESTS=ON -DMOEFLOW_BENCH=OFF \
    -DMOEFLOW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc" "${launch[@]}" >/dev/null
  cmake --build build-cuda -j "$JOBS" --target moeflow test_backend test_gpu test_runtime
  (cd build-cuda && ctest --output-on-failure -j "$JOBS" -L '^(backend|gpu)$' &&
    ctest --output-on-failure -j "$JOBS" -R '^BackendChoice\.')
  echo "== CUDA build and its host-side tests took $((SECONDS - t0)) s"
}

if [ "${1:-}" = --cuda ]; then
  cuda_stage
  exit 0
fi

echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores;" \
  "SIMD: $(grep -m1 -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "== release build: all tests"
run_suite build -DCMAKE_BUILD_TYPE=Release --
# The same C++ tests with the kernels capped to the portable scalar level: what a CPU without
# AVX2 runs (CI machines differ; a binary must work on any x86-64).
echo "== release build: C++ tests at MOEFLOW_SIMD=scalar"
(cd build && MOEFLOW_SIMD=scalar ctest --output-on-failure -j "$JOBS" -LE 'python|slow')

if [ "${1:-}" != --fast ]; then
  echo "== ASan+UBSan build: C++ tests"
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DMOEFLOW_SANITIZE=address -- -LE 'python|slow'
  echo "== TSan build: C++ tests"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/sanitizers/tsan.supp" \
    run_suite build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEFLOW_SANITIZE=thread -- -LE 'python|slow'
  cuda_stage
fi
echo "== all test suites passed"
