#!/usr/bin/env bash
# The first command: installs what moeflow needs to build, builds the `moeflow` binary, and
# generates text with the shipped demo MoE (models/demo-moe.gguf) while its experts are
# offloaded: only 30% of the expert bytes may stay in RAM, the rest is read from the file with
# O_DIRECT ahead of need. Prints the text, then the offloading statistics.
# Usage: scripts/demo.sh ["prompt"]
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT=${1:-"The history of the city"}
MODEL=models/demo-moe.gguf

MOEFLOW_BUILD_ONLY=1 bash scripts/setup-deps.sh  # no test frameworks, no Python oracles
if [ ! -f build/build.ninja ]; then  # scripts/test.sh turns the tests on in the same folder
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEFLOW_TESTS=OFF -DMOEFLOW_BENCH=OFF >/dev/null
fi
echo "== building moeflow"
cmake --build build -j "$(nproc)" --target moeflow | grep -v '^\[' || true

echo "== the demo model"
build/moeflow info -m "$MODEL" | head -n 12
echo
echo "== moeflow run (expert cache = 30% of expert bytes, lookahead prefetch)"
build/moeflow run -m "$MODEL" -p "$PROMPT" -n 96 --temp 0.8 --top-p 0.95 --seed 7 \
  --cache-rate 0.3 --prefetch lookahead
