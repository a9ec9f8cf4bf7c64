#!/usr/bin/env bash
# llama-cpp-python built without AVX-512 (AVX2 + FMA + F16C, no AVX-VNNI) into .deps/python-avx2:
# the baseline of a `MOEFLOW_SIMD=avx2` engine benchmark on an AVX-512 machine, so that both
# engines run the instruction set of an AVX2-only CPU (bench/REPORT-simd-levels.md):
#   bash scripts/build-llama-avx2.sh
#   MOEFLOW_SIMD=avx2 python3 bench/bench_engine.py --llama-deps .deps/python-avx2 ...
# ~6 minutes on 2 cores; skipped when the stamped build is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_VERSION=0.3.36
deps=.deps/python-avx2
args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF"
args+=" -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
args+=" -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF"
stamp="llama-cpp-python==$LLAMA_CPP_VERSION $args"
if [ "$(cat "$deps/.llama-cpp-stamp" 2>/dev/null)" = "$stamp" ] && [ -e "$deps/llama_cpp/lib/libllama.so" ]; then
  echo "build-llama-avx2: $deps is up to date"
  exit 0
fi
rm -rf "$deps"
CMAKE_ARGS="$args" python3 -m pip install -q --no-cache-dir --no-deps --target "$deps" \
  "llama-cpp-python==$LLAMA_CPP_VERSION"
echo "$stamp" > "$deps/.llama-cpp-stamp"
PYTHONPATH=$deps python3 -c "import llama_cpp; print('build-llama-avx2:', llama_cpp.llama_print_system_info().decode())"
