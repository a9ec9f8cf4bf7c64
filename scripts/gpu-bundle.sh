#!/usr/bin/env bash
# Prepares .gpu-carry/ (git-ignored) here, for scripts/gpu-check.sh on a GPU machine, where
# nothing is compiled (a GPU is lent for 15 minutes, machine start included; llama.cpp's CUDA
# build alone takes 20 min on 2 cores). The GPU machine has the CUDA toolkit and driver, cuBLAS
# and Python, and none of our Debian packages.
#   .gpu-carry/moeflow-gpu.tar.xz   bin/: moeflow and the test binaries with GPU cases
#                                   (test_backend, test_gpu, test_runtime), built here with
#                                   -DMOEFLOW_CUDA=ON for sm_90 + compute_90 PTX against this
#                                   machine's Debian libraries (the same fmt, CLI11,
#                                   nlohmann-json, cpp-httplib and GoogleTest as CI), stripped;
#                                   lib/: the shared libraries they load that a GPU machine may
#                                   lack (fmt, liburing, libstdc++, libgcc_s); CUDA's own
#                                   libraries come from the GPU machine's toolkit
#   .gpu-carry/llama-bench-cuda13-sm90.tar.xz   the prebuilt CUDA llama-bench of ../shared/gpu
#   .gpu-carry/MANIFEST             commit, build flags, sizes, library versions
# The working tree plus this folder must stay under 64 MiB (checked at the end).
# Usage: scripts/gpu-bundle.sh        (BUILD=build-cuda: where the CUDA build is made)
set -euo pipefail
cd "$(dirname "$0")/.."

LIMIT_MIB=64
BUILD=${BUILD:-build-cuda}
JOBS=${JOBS:-$(nproc)}
LLAMA_BENCH=../shared/gpu/llama-bench-cuda13-sm90.tar.xz
case ${1:-} in
  -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
  "") ;;
  *) echo "gpu-bundle: unknown argument $1" >&2; exit 2 ;;
esac

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "gpu-bundle: no nvcc (the CUDA toolkit) on this machine" >&2; exit 1; }
[ -f "$LLAMA_BENCH" ] || { echo "gpu-bundle: $LLAMA_BENCH is missing (the prebuilt CUDA llama-bench)" >&2; exit 1; }
MOEFLOW_SKIP_PY=1 bash scripts/setup-deps.sh

launch=()
command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# $ORIGIN/../lib: in the bundle the binaries find the carried libraries in lib/ beside bin/
# before the system's, without an LD_LIBRARY_PATH that would reach the GPU machine's own tools.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEFLOW_TESTS=ON -DMOEFLOW_BENCH=OFF \
  -DMOEFLOW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc" "${launch[@]}" \
  '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target moeflow test_backend test_gpu test_runtime

out=.gpu-carry
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/pkg/bin" "$tmp/pkg/lib" "$tmp/carry"
cp "$BUILD/moeflow" "$tmp/pkg/bin/"
for t in test_backend test_gpu test_runtime; do cp "$BUILD/tests/$t" "$tmp/pkg/bin/"; done
strip "$tmp/pkg/bin/"*
# Shared libraries outside glibc and CUDA: carried, found through LD_LIBRARY_PATH there.
for b in "$tmp/pkg/bin/"*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcudart.so*|libcublas*.so*) ;;
    *) cp -L "$lib" "$tmp/pkg/lib/" ;;
  esac
done
(cd "$tmp/pkg" && tar cJf "$tmp/carry/moeflow-gpu.tar.xz" bin lib)
cp "$LLAMA_BENCH" "$tmp/carry/"
# A real Mixtral-8x7B routing trace (1.6 MB) for the vram stage's routing replay.
REPLAY_TRACE=../shared/data/traces/mixtral-8x7b-instruct_speculative-moe/routing_data_collected/humaneval_2_routing.jsonl
[ -f "$REPLAY_TRACE" ] && xz -c "$REPLAY_TRACE" > "$tmp/carry/mixtral-humaneval_2_routing.jsonl.xz"
{
  echo "made by scripts/gpu-bundle.sh on $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "moeflow $(git describe --always --dirty 2>/dev/null || echo '?') built with $("$nvcc" --version | grep -o 'release [0-9.]*'), sm_90 + compute_90 PTX, Release"
  echo "binaries: $(ls "$tmp/pkg/bin" | tr '\n' ' ')"
  echo "carried libraries: $(ls "$tmp/pkg/lib" | tr '\n' ' ')"
  for p in libfmt-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev liburing-dev googletest; do
    echo "$p $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo '?')"
  done
  echo "llama-bench: $(basename "$LLAMA_BENCH") ($(sha256sum "$LLAMA_BENCH" | cut -c1-16)), see ../shared/gpu/README.md"
} >"$tmp/carry/MANIFEST"

rm -rf "$out"
mv "$tmp/carry" "$out"

# What travels to a GPU machine: tracked files, untracked files git does not ignore, and the
# carried folder.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
carry_bytes=$(du -sb "$out" | cut -f1)
total_mib=$(((tree_bytes + carry_bytes) / 1048576))
echo "gpu-bundle: $out is $((carry_bytes / 1024)) KiB; working tree $((tree_bytes / 1024)) KiB; together $total_mib MiB (limit $LIMIT_MIB MiB)"
if ((tree_bytes + carry_bytes >= LIMIT_MIB * 1048576)); then
  echo "gpu-bundle: the working tree and $out exceed $LIMIT_MIB MiB" >&2
  exit 1
fi
