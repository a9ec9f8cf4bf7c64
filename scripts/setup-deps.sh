#!/usr/bin/env bash
# Installs everything moeflow needs to build and test on a fresh Debian 12 machine.
# Idempotent: skips what is already there.
# MOEFLOW_BUILD_ONLY=1: only what building the `moeflow` binary needs (the demo's first run);
# MOEFLOW_SKIP_PY=1: no Python test oracles; MOEFLOW_PY_ONLY=1: only them (scripts/test.sh
# installs the Debian packages first, then the oracles in the background while it compiles).
set -euo pipefail

APT_PKGS=(cmake ninja-build g++ pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev
          libcpp-httplib-dev liburing-dev)
# Tests; clang and its runtimes (libFuzzer, sanitizers) for the fuzz targets (scripts/fuzz.sh);
# clang-format: the format check (scripts/check_format.sh); ccache: the CUDA stage of
# scripts/test.sh recompiles the modules the release build compiled with the same flags
# (everything below runtime/), and takes them from the cache.
[ "${MOEFLOW_BUILD_ONLY:-0}" = 1 ] ||
  APT_PKGS+=(googletest libgtest-dev libbenchmark-dev clang libclang-rt-14-dev ccache clang-format)
missing=()
[ "${MOEFLOW_PY_ONLY:-0}" = 1 ] && APT_PKGS=()
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
  # baseline of the benchmarks), tiktoken + bpe_openai (the o200k ranks, bundled: tiktoken alone
  # downloads them) and openai_harmony (the harmony chat format), for gpt-oss; jinja2 (chat
  # templates rendered as transformers renders them, tests/python/test_chat_template_jinja2.py);
  # jsonschema (validates the server's structured output and tool-call arguments,
  # tests/python/test_server_json_schema.py, test_server_tools.py).
  PY_PKGS=(numpy gguf torch transformers sentencepiece pytest tiktoken bpe_openai openai_harmony openai jinja2 jsonschema)
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
  # eval on the Sapphire Rapids VMs we run on; AVX-512 (with VNNI, VBMI, BF16) and AVX-VNNI are
  # used where the CPU has them. LLAVA_BUILD off: the multimodal library (mtmd, clip) is loaded
  # only by image chat handlers, which no test or benchmark uses, and was a third of the build.
  LLAMA_CPP_VERSION=0.3.36
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  has() { [[ " $flags " == *" $1 "* ]] && echo ON || echo OFF; }
  avx512=OFF avx512_ext=""
  if [ "$(has avx512f)$(has avx512bw)$(has avx512dq)$(has avx512vl)" = ONONONON ]; then
    avx512=ON
    # GGML_NATIVE=OFF leaves AVX-512's extensions off unless named: without VNNI llama.cpp's
    # quantized dot products take the maddubs path, a weaker baseline than the CPU allows.
    avx512_ext=" -DGGML_AVX512_VNNI=$(has avx512_vnni) -DGGML_AVX512_VBMI=$(has avx512vbmi)"
    avx512_ext+=" -DGGML_AVX512_BF16=$(has avx512_bf16)"
  fi
  LLAMA_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=$(has avx) -DGGML_AVX2=$(has avx2) -DGGML_FMA=$(has fma)"
  LLAMA_ARGS+=" -DGGML_F16C=$(has f16c) -DGGML_AVX_VNNI=$(has avx_vnni) -DGGML_AVX512=$avx512$avx512_ext"
  LLAMA_ARGS+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
  LLAMA_ARGS+=" -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF"
  LLAMA_ARGS+=" -DLLAVA_BUILD=OFF"
  deps=.deps/python
  stamp="llama-cpp-python==$LLAMA_CPP_VERSION $LLAMA_ARGS"
  # Rebuilt only when the build settings changed or the native library is gone: an import that
  # fails for another reason (a missing runtime dependency) is fixed below, not by a 6-minute
  # rebuild.
  if [ "$(cat "$deps/.llama-cpp-stamp" 2>/dev/null)" != "$stamp" ] ||
     [ ! -e "$deps/llama_cpp/lib/libllama.so" ]; then
    echo "setup: building llama-cpp-python $LLAMA_CPP_VERSION for this CPU (llama.cpp from source, ~6 min)"
    rm -rf "$deps"
    CMAKE_ARGS="$LLAMA_ARGS" python3 -m pip install -q --no-cache-dir --no-deps --target "$deps" \
      "llama-cpp-python==$LLAMA_CPP_VERSION"
    echo "$stamp" > "$deps/.llama-cpp-stamp"
  fi
  # --no-deps above keeps pip from installing a second numpy (and friends) into .deps, but
  # llama_cpp imports its runtime dependencies (diskcache, jinja2, typing-extensions, numpy):
  # install the ones its own metadata lists (extras excluded) normally, next to the other
  # oracles. Without them `import llama_cpp` fails and the llama.cpp oracle tests used to skip.
  meta=$(ls -d "$deps"/llama_cpp_python-*.dist-info 2>/dev/null | head -n1)
  if [ -z "$meta" ] || [ ! -f "$meta/METADATA" ]; then
    echo "setup: FAILED: no llama_cpp_python-*.dist-info/METADATA in $deps" >&2
    exit 1
  fi
  mapfile -t llama_reqs < <(sed -n 's/^Requires-Dist: *//p' "$meta/METADATA" | grep -v 'extra *==' |
                            sed 's/ *;.*//; s/ //g')
  if ((${#llama_reqs[@]})) &&
     ! python3 -c "import sys
from importlib.metadata import version, PackageNotFoundError
from packaging.requirements import Requirement
for r in map(Requirement, sys.argv[1:]):
    try:
        if version(r.name) not in r.specifier:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)" "${llama_reqs[@]}" 2>/dev/null; then
    echo "setup: pip install ${llama_reqs[*]} (llama-cpp-python's runtime dependencies)"
    python3 -m pip install -q "${llama_reqs[@]}"
  fi
  # The oracle must import exactly as the tests and benchmarks import it (PYTHONPATH=.deps/python,
  # the same python3); if it does not, setup fails here, loudly, instead of the tests skipping.
  if ! err=$(PYTHONPATH=$deps python3 -c "import llama_cpp" 2>&1); then
    echo "setup: FAILED: 'import llama_cpp' with PYTHONPATH=$deps does not work:" >&2
    echo "$err" | tail -n 5 >&2
    exit 1
  fi

  # llama.cpp's tokenizer test vectors for the 2026 families (Qwen3.5/3.6: qwen35;
  # Gemma 4: gemma-4), which the shared data predates: ggml-vocab-NAME.gguf with its .inp/.out,
  # from the same llama-cpp-python sdist as the oracle above (its vendor/llama.cpp/models/),
  # into .deps/llamacpp_vocab (tests/tokenizer/test_vocab_vectors_2026.cpp; ~22 MB). pip
  # downloads the sdist into a temporary folder (PyPI is the one registry CI reaches) and only
  # these six files are extracted. Stamped by version: rerun only when it changes.
  vocab=.deps/llamacpp_vocab
  vocab_stamp="llama-cpp-python==$LLAMA_CPP_VERSION qwen35 gemma-4"
  if [ "$(cat "$vocab/.stamp" 2>/dev/null)" != "$vocab_stamp" ]; then
    echo "setup: llama.cpp's qwen35 / gemma-4 tokenizer vectors from the llama-cpp-python $LLAMA_CPP_VERSION sdist"
    dl=$(mktemp -d)
    python3 -m pip download -q --no-deps --no-binary :all: -d "$dl" \
      "llama-cpp-python==$LLAMA_CPP_VERSION"
    sdist=$(ls "$dl"/llama_cpp_python-*.tar.gz)
    members=()
    for n in qwen35 gemma-4; do
      for ext in "" .inp .out; do
        members+=("llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp/models/ggml-vocab-$n.gguf$ext")
      done
    done
    rm -rf "$vocab" && mkdir -p "$vocab"
    tar -xzf "$sdist" -C "$vocab" --strip-components=4 "${members[@]}"
    rm -rf "$dl"
    echo "$vocab_stamp" > "$vocab/.stamp"
  fi
fi
