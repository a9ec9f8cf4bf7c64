#!/usr/bin/env bash
# One command that regenerates the simulator report (docs/simulator.md, bench/sim/*):
# every policy x predictor pair, Belady bounds, the presets and `auto` on the real
# Mixtral-8x7B decode traces, cache rates 12.5..75%, for each hardware profile.
#
# usage: bench/sim_report.sh [--moeflow build/moeflow] [--skip-measure]
# Env: MOEFLOW_SIM_MODEL (GGUF used to measure this machine's O_DIRECT bandwidth for the
#      `local` profile; a 2-layer Mixtral-8x7B-shaped Q4_K file is generated when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
MOEFLOW=build/moeflow
MEASURE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --moeflow) MOEFLOW="$2"; shift 2 ;;
    --skip-measure) MEASURE=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
DATA=${MOEFLOW_SHARED_DATA:-../shared/data}/traces/mixtral-8x7b-instruct_speculative-moe
TRACE=$DATA/routing_data_collected/humaneval_2_routing.jsonl   # decode, 2 HumanEval problems
CALIB=$DATA/analysis/deep_analysis/routing_raw.jsonl           # another HumanEval prompt
CHOOSE=$DATA/analysis/deep_analysis/humaneval_1_routing.jsonl   # a third: where `auto` chooses
RATES=12.5,25,37.5,50,62.5,75
OUT=bench/sim
mkdir -p "$OUT" bench/io

# This machine's O_DIRECT read bandwidth -> bench/io/local_profile.json (profile `local`).
if [ "$MEASURE" = 1 ]; then
  MODEL=${MOEFLOW_SIM_MODEL:-/tmp/moeflow_sim_mixtral_2l_q4k.gguf}
  if [ ! -f "$MODEL" ]; then
    "$MOEFLOW" gen-model --arch mixtral --preset 8x7b --layers 2 --type Q4_K -q -o "$MODEL"
  fi
  "$MOEFLOW" pack --measure -m "$MODEL" --seconds 4 --threads 2 | tail -1 > "$OUT/local_measure.json"
  python3 - "$OUT/local_measure.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
prof = {"name": "local", "read_gb_s": round(m["useful_GBps"], 3), "direct_io": m["direct_io"],
        "measured_with": "moeflow pack --measure --threads 2", "file": m["file"]}
json.dump(prof, open("bench/io/local_profile.json", "w"), indent=1)
print("local O_DIRECT bandwidth:", prof["read_gb_s"], "GB/s")
PY
fi
PROFILES="pcie4x16 nvme-gen4"
[ -f bench/io/local_profile.json ] && PROFILES="$PROFILES local"

for hw in $PROFILES; do
  echo "== $hw: every policy x predictor" >&2
  "$MOEFLOW" sim --trace "$TRACE" --calib "$CALIB" --policy all --predictor all --cache-rate $RATES --hw "$hw" \
    --json --per-layer --csv "$OUT/grid_$hw.csv" --plot "$OUT/grid_$hw.svg" > "$OUT/grid_$hw.json"
  "$MOEFLOW" sim --trace "$TRACE" --calib "$CALIB" --policy all --predictor none --cache-rate $RATES --hw "$hw" \
    --plot "$OUT/demand_$hw.svg" > /dev/null
  echo "== $hw: presets and auto" >&2
  for p in promoe hobbit duoserve moe-infinity daop lru ondemand auto; do
    "$MOEFLOW" sim --trace "$TRACE" --calib "$CALIB" --preset $p --cache-rate $RATES --hw "$hw" --json > "$OUT/preset_${p}_$hw.json"
  done
  # auto's pick on a prompt it has not seen: chosen on $CHOOSE, read off the grid of $TRACE.
  "$MOEFLOW" sim --trace "$CHOOSE" --calib "$CALIB" --preset auto --cache-rate $RATES --hw "$hw" --json > "$OUT/auto_chosen_elsewhere_$hw.json"
done
python3 bench/sim_report.py --out docs/simulator.md --dir "$OUT" --profiles $PROFILES --trace "$TRACE" --calib "$CALIB" --choose "$CHOOSE"
echo "wrote docs/simulator.md and $OUT/" >&2
