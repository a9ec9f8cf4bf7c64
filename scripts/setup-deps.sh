#!/usr/bin/env bash
# Installs everything moeflow needs to build and test on a fresh Debian 12 machine.
# Idempotent: skips what is already there.
# MOEFLOW_BUILD_ONLY=1: only what building the `moeflow` binary needs (the demo's first run);
# MOEFLOW_SKIP_PY=1: no Python test oracles.
set -euo pipefail

APT_PKGS=(cmake ninja-build g++ pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev
          libcpp-httplib-dev liburing-dev)
[ "${MOEFLOW_BUILD_ONLY:-0}" = 1 ] || APT_PKGS+=(googletest libgtest-dev libbenchmark-dev)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${MOEFLOW_SKIP_PY:-0}" != 1 ] && [ "${MOEFLOW_BUILD_ONLY:-0}" != 1 ]; then
  # Test oracles: transformers+torch (reference logits), gguf (independent writer/reader), openai
  # (the official client, driving `moeflow serve` in tests/python/test_server_openai.py),
  # llama-cpp-python (llama.cpp built from source: reference for quantized models and the
  # baseline of the benchmarks).
  PY_PKGS=(numpy gguf torch transformers sentencepiece pytest openai)
  need=()
  for p in "${PY_PKGS[@]}"; do
    python3 -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('$p') else 1)" 2>/dev/null || need+=("$p")
  done
  if ((${#need[@]})); then
    echo "setup: pip install ${need[*]}"
    python3 -m pip install -q "${need[@]}"
  fi
  # llama.cpp is built here, for this CPU, into the project's own .deps/python (on PYTHONPATH for
  # the tests and benchmarks), never taken from site-packages: a wheel built natively elsewhere
  # dies of an illegal instruction on another CPU. AMX stays off: llama.cpp's AMX path crashes in
  # eval on the Sapphire Rapids VMs we run on; AVX-512 is used where the CPU has it.
  LLAMA_CPP_VERSION=0.3.36
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  has() { [[ " $flags " == *" $1 "* ]] && echo ON || echo OFF; }
  avx512=OFF
  [ "$(has avx512f)$(has avx512bw)$(has avx512dq)$(has avx512vl)" = ONONONON ] && avx512=ON
  LLAMA_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=$(has avx) -DGGML_AVX2=$(has avx2) -DGGML_FMA=$(has fma)"
  LLAMA_ARGS+=" -DGGML_F16C=$(has f16c) -DGGML_AVX512=$avx512 -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
  LLAMA_ARGS+=" -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF"
  deps=.deps/python
  stamp="llama-cpp-python==$LLAMA_CPP_VERSION $LLAMA_ARGS"
  if [ "$(cat "$deps/.llama-cpp-stamp" 2>/dev/null)" != "$stamp" ] ||
     ! PYTHONPATH=$deps python3 -c "import llama_cpp" 2>/dev/null; then
    echo "setup: building llama-cpp-python $LLAMA_CPP_VERSION for this CPU (llama.cpp from source, ~6 min)"
    rm -rf "$deps"
    CMAKE_ARGS="$LLAMA_ARGS" python3 -m pip install -q --no-cache-dir --no-deps --target "$deps" \
      "llama-cpp-python==$LLAMA_CPP_VERSION"
    echo "$stamp" > "$deps/.llama-cpp-stamp"
  fi
fi
