#!/usr/bin/env bash
# Installs everything moeflow needs to build and test on a fresh Debian 12 machine.
# Idempotent: skips what is already there.
set -euo pipefail

APT_PKGS=(cmake ninja-build g++ pkg-config googletest libgtest-dev libbenchmark-dev libcli11-dev
          nlohmann-json3-dev libfmt-dev libcpp-httplib-dev liburing-dev libopenblas-dev)
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

if [ "${MOEFLOW_SKIP_PY:-0}" != 1 ]; then
  # Test oracles: transformers+torch (reference logits), gguf (independent writer/reader),
  # llama-cpp-python (llama.cpp built from source: reference for quantized models and the
  # baseline of the benchmarks).
  PY_PKGS=(numpy gguf torch transformers sentencepiece pytest)
  need=()
  for p in "${PY_PKGS[@]}"; do
    python3 -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('$p') else 1)" 2>/dev/null || need+=("$p")
  done
  if ((${#need[@]})); then
    echo "setup: pip install ${need[*]}"
    python3 -m pip install -q "${need[@]}"
  fi
  if ! python3 -c "import llama_cpp" 2>/dev/null; then
    echo "setup: building llama-cpp-python (llama.cpp from source, a few minutes)"
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" \
      python3 -m pip install -q llama-cpp-python
  fi
fi
