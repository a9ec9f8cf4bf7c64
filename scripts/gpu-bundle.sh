#!/usr/bin/env bash
# Prepares .gpu-carry/ (git-ignored): everything scripts/gpu-check.sh needs on a GPU machine
# that has the CUDA toolkit, CMake, ninja and Python but no network and none of our Debian
# packages. Run it here (a development machine with the Debian packages installed); the folder
# then travels with the working tree.
#   .gpu-carry/include/{fmt,nlohmann,CLI}/   headers from /usr/include (fmt used header-only)
#   .gpu-carry/httplib/httplib.{h,cpp}       cpp-httplib (Debian ships it compiled, so llama.cpp's copy)
#   .gpu-carry/googletest/                   GoogleTest sources from /usr/src/googletest
#   .gpu-carry/llama.cpp.tar.gz              llama.cpp from the llama-cpp-python sdist, trimmed
#                                            to what builds llama-bench with CUDA
#   .gpu-carry/shared-data.tar.gz            the text corpus of ../shared/data that CPU tests read
#                                            (the shared folder beside the tree does not travel)
#   .gpu-carry/MANIFEST                      versions and sizes
# The working tree plus this folder must stay under 64 MiB (checked at the end).
# Usage: scripts/gpu-bundle.sh [--sdist llama_cpp_python-0.3.36.tar.gz]
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON=0.3.36
LIMIT_MIB=64
sdist=""
while (($#)); do
  case $1 in
    --sdist) sdist=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu-bundle: unknown argument $1" >&2; exit 2 ;;
  esac
done

need() { [ -e "$1" ] || { echo "gpu-bundle: $1 is missing ($2)" >&2; exit 1; }; }
need /usr/include/fmt/format.h "apt-get install libfmt-dev"
need /usr/include/nlohmann/json.hpp "apt-get install nlohmann-json3-dev"
need /usr/include/CLI/CLI.hpp "apt-get install libcli11-dev"
need /usr/src/googletest/CMakeLists.txt "apt-get install googletest"

# The llama-cpp-python source distribution, downloaded once into .deps/ (git-ignored).
if [ -z "$sdist" ]; then
  sdist=.deps/gpu-bundle/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz
  if [ ! -f "$sdist" ]; then
    mkdir -p .deps/gpu-bundle
    echo "gpu-bundle: downloading the llama-cpp-python $LLAMA_CPP_PYTHON source distribution"
    python3 -m pip download -q --no-binary :all: --no-deps -d .deps/gpu-bundle \
      "llama-cpp-python==$LLAMA_CPP_PYTHON"
  fi
fi
need "$sdist" "the llama-cpp-python sdist"

out=.gpu-carry
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/carry/include" "$tmp/carry/httplib"

cp -r /usr/include/fmt /usr/include/nlohmann /usr/include/CLI "$tmp/carry/include/"
# GoogleTest without its own tests, samples and docs.
cp -r /usr/src/googletest "$tmp/carry/googletest"
rm -rf "$tmp/carry/googletest/googletest/"{test,samples,docs} "$tmp/carry/googletest/googlemock/"{test,docs}

tar xzf "$sdist" -C "$tmp"
src=$(find "$tmp" -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -1)
[ -n "$src" ] || { echo "gpu-bundle: no vendor/llama.cpp in $sdist" >&2; exit 1; }
cp "$src/vendor/cpp-httplib/httplib.h" "$src/vendor/cpp-httplib/httplib.cpp" "$src/vendor/cpp-httplib/LICENSE" \
  "$tmp/carry/httplib/"

# llama.cpp trimmed to the library, common/ and llama-bench, with the CPU and CUDA backends:
# no models, tests, docs, examples, UI, Python, or other GPU backends.
l=$tmp/carry/llama.cpp
mkdir -p "$l/tools" "$l/ggml/src"
cp -r "$src/CMakeLists.txt" "$src/LICENSE" "$src/cmake" "$src/include" "$src/src" "$src/common" \
  "$src/vendor" "$src/licenses" "$l/"
cp -r "$src/ggml/CMakeLists.txt" "$src/ggml/cmake" "$src/ggml/include" "$l/ggml/"
for f in "$src"/ggml/src/*; do
  case $(basename "$f") in
    ggml-*) [ -d "$f" ] && continue ;;
  esac
  cp -r "$f" "$l/ggml/src/"
done
cp -r "$src/ggml/src/ggml-cpu" "$src/ggml/src/ggml-cuda" "$l/ggml/src/"
cp -r "$src/tools/llama-bench" "$l/tools/"
echo "add_subdirectory(llama-bench)  # gpu-bundle.sh: the only tool gpu-check.sh builds" >"$l/tools/CMakeLists.txt"
rm -f "$l/vendor/miniaudio/miniaudio.h"  # audio for mtmd, which is not built (interface target only)
(cd "$tmp/carry" && tar czf llama.cpp.tar.gz llama.cpp && rm -rf llama.cpp)

if [ -d ../shared/data/corpus ]; then
  tar czf "$tmp/carry/shared-data.tar.gz" -C ../shared/data corpus
else
  echo "gpu-bundle: note: no ../shared/data/corpus: the CPU tests that read it will fail on the GPU machine"
fi

{
  echo "made by scripts/gpu-bundle.sh on $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "llama-cpp-python $LLAMA_CPP_PYTHON sdist: $(sha256sum "$sdist" | cut -d' ' -f1)"
  echo "fmt $(dpkg-query -W -f='${Version}' libfmt-dev 2>/dev/null || echo '?')"
  echo "nlohmann-json $(dpkg-query -W -f='${Version}' nlohmann-json3-dev 2>/dev/null || echo '?')"
  echo "CLI11 $(dpkg-query -W -f='${Version}' libcli11-dev 2>/dev/null || echo '?')"
  echo "googletest $(dpkg-query -W -f='${Version}' googletest 2>/dev/null || echo '?')"
  grep -m1 'CPPHTTPLIB_VERSION ' "$tmp/carry/httplib/httplib.h" | sed 's/#define //'
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
