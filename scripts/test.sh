#!/usr/bin/env bash
# The test command: builds moeflow and runs the whole suite — release build (C++ tests and the
# Python oracle tests), then the C++ tests again under ASan+UBSan and under TSan.
# Usage: scripts/test.sh [--fast]   (--fast: release build only)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

bash scripts/setup-deps.sh

run_suite() {  # dir, cmake args..., then ctest args after --
  local dir=$1; shift
  local cm=() ct=()
  while (($#)); do [ "$1" = -- ] && { shift; ct=("$@"); break; }; cm+=("$1"); shift; done
  cmake -S . -B "$dir" -G Ninja -DMOEFLOW_TESTS=ON -DMOEFLOW_BENCH=OFF "${cm[@]}" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "${ct[@]}")
}

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
fi
echo "== all test suites passed"
