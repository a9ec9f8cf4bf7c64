#!/bin/sh
# Builds and runs ggml_compare against a release build (build-kernels, or $BUILD) and llama-cpp-python's ggml.
# usage: bench/micro/ggml/run_compare.sh [hot|cold]
set -e
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BUILD=${BUILD:-$ROOT/build-kernels}
SP=$(python3 -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
LIB=$SP/llama_cpp/lib
OUT=$BUILD/ggml_compare
g++ -std=c++20 -O2 -I"$ROOT/src" -I"$SP/include" "$ROOT/bench/micro/ggml/ggml_compare.cpp" \
  "$BUILD/libmoeflow_backend.a" "$BUILD/libmoeflow_quant.a" "$BUILD/libmoeflow_core.a" \
  -L"$LIB" -lggml-cpu -lggml-base -Wl,-rpath,"$LIB" -lfmt -lpthread -o "$OUT"
"$OUT" "${1:-hot}"
