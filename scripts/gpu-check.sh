#!/usr/bin/env bash
# The one command to run on a GPU machine (CUDA toolkit and driver, Python; no network, none of
# our Debian packages). Nothing is compiled there: scripts/gpu-bundle.sh builds moeflow and its
# GPU test binaries here and packs them, with the prebuilt CUDA llama-bench of ../shared/gpu,
# into .gpu-carry/, which travels with the working tree. This script unpacks it and runs, in
# priority order, each command under `timeout -k` and each stage within a time budget; logs go
# to LOGDIR, one table last (LOGDIR/summary.txt). A moeflow run that stops progressing leaves
# its watchdog report (MOEFLOW_WATCHDOG, every thread's stack) in its log.
#
# Usage: scripts/gpu-check.sh [--stages unpack,test,bench,vram,sanitize] LOGDIR
#   unpack    .gpu-carry/moeflow-gpu.tar.xz and the llama-bench archive; moeflow version (~10 s)
#   test      GPU tests with MOEFLOW_REQUIRE_GPU=1: the CUDA op suite against float64, GPU vs
#             CPU logits for every architecture and block format, the VRAM expert cache and
#             the CPU/GPU hybrid, the backend choice                       (budget 150 s)
#   bench     all in VRAM: prefill / decode tok/s and the bench JSON of moeflow (CUDA graphs
#             on and off) and llama.cpp -ngl 99 on the same files (4-layer Mixtral-8x7B,
#             8-layer Qwen3-30B-A3B and 8-layer Qwen3.6-35B-A3B (gated DeltaNet hybrid)
#             shapes, generated here with --repeat-experts)                      (150 s)
#   vram      models larger than the VRAM given: moeflow's VRAM expert cache (--vram-limit)
#             against llama.cpp -ngl 99 --n-cpu-moe N in the same VRAM, and Mixtral
#             with a real routing replayed (--routing-trace)                      (270 s)
#   sanitize  compute-sanitizer memcheck / racecheck / synccheck on the CUDA op tests, memcheck
#             on whole-model GPU tests and the VRAM cache                         (150 s)
# A stage's commands get what is left of its budget; what finds none left is reported SKIP.
# One device call runs at most 10 minutes: `--stages unpack,test,bench` (~5 min), then, on the
# warm machine, `--stages vram,sanitize` (~7 min) (docs/gpu.md, "A GPU session").
# Environment: JOBS (default: all cores), GPU_CHECK_DIR (default build-gpu: where the bundle is
# unpacked and models are written), BENCH_REPS (default 3), GPU_CHECK_LLAMA=0 (no llama.cpp).
# shellcheck disable=SC2317  # the stage_* functions are called by name ("stage_$s")
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

stages=unpack,test,bench,vram,sanitize
logdir=""
while (($#)); do
  case $1 in
    --stages) stages=$2; shift 2 ;;
    --stages=*) stages=${1#--stages=}; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *) logdir=$1; shift ;;
  esac
done
[ -n "$logdir" ] || { echo "usage: scripts/gpu-check.sh [--stages unpack,test,bench,vram,sanitize] LOGDIR" >&2; exit 2; }
for s in ${stages//,/ }; do
  case $s in unpack|test|bench|vram|sanitize) ;; *) echo "gpu-check: unknown stage '$s'" >&2; exit 2 ;; esac
done
mkdir -p "$logdir"
logdir=$(cd "$logdir" && pwd)
JOBS=${JOBS:-$(nproc)}
BUILD=${GPU_CHECK_DIR:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
BIN=$BUILD/bin
LLAMA=${GPU_CHECK_LLAMA:-1}
REPS=${BENCH_REPS:-3}
CARRY=$ROOT/.gpu-carry
LLAMA_DIR=/tmp/gpubuild/llama/bin
summary=()   # "stage|check|result|detail"
failed=0

if ! command -v nvcc >/dev/null; then
  for d in "${CUDA_HOME:-}" /usr/local/cuda; do
    [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi
CUDA_BIN=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
# moeflow's binaries find the carried libraries through their RUNPATH ($ORIGIN/../lib); llama-bench
# its own beside it; both CUDA's (libcudart, libcublas) in the machine's toolkit.
export LD_LIBRARY_PATH="$LLAMA_DIR:$CUDA_BIN/../lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A moeflow process that stops progressing for this long prints where it is (core/watchdog.h).
export MOEFLOW_WATCHDOG=${MOEFLOW_WATCHDOG:-45}

note() { echo "gpu-check: $*"; }
record() {  # stage check status detail
  summary+=("$1|$2|$3|$4")
  [ "$3" = FAIL ] && failed=1
  note "$1 / $2: $3 ${4:+($4)}"
}
# Runs a command under `timeout -k 10 LIMIT` with its output in LOGDIR/NAME.log; sets
# LAST_SECONDS. A command that ran out of time says so in its log.
logged() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  { echo "\$ $*"; timeout -k 10 "$limit" "$@"; } >"$logdir/$name.log" 2>&1
  local rc=$?
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "[timed out after $limit s]" >>"$logdir/$name.log"
  echo "[exit $rc after $((SECONDS - t0)) s]" >>"$logdir/$name.log"
  LAST_SECONDS=$((SECONDS - t0))
  return "$rc"
}
# Seconds left in a stage's budget (STAGE_END set by the stage), at least 10.
left() { local l=$((STAGE_END - SECONDS)); ((l < 10)) && l=10; echo "$l"; }
out_of_time() { ((SECONDS >= STAGE_END)); }
capped() { local l; l=$(left); ((l < $1)) && echo "$l" || echo "$1"; }  # min(N, left)
gtest_counts() {  # log -> "N passed, M skipped, K failed"
  local log=$1
  local p s f
  # Per-test result lines end with the test's time; gtest's closing lists do not.
  p=$(grep -Ec '^\[       OK \] .*\([0-9]+ ms\)$' "$log" || true)
  s=$(grep -Ec '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$log" || true)
  f=$(grep -Ec '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log" || true)
  echo "$p passed, $s skipped, $f failed"
}

# ------------------------------------------------------------------------------------ unpack
stage_unpack() {
  [ -f "$CARRY/moeflow-gpu.tar.xz" ] || { record unpack moeflow FAIL "no .gpu-carry/moeflow-gpu.tar.xz: run scripts/gpu-bundle.sh before the GPU session"; return; }
  rm -rf "${BUILD:?}/bin" "${BUILD:?}/lib" && mkdir -p "$BUILD"
  if logged unpack-moeflow 120 tar xJf "$CARRY/moeflow-gpu.tar.xz" -C "$BUILD" &&
     logged unpack-version 30 "$BIN/moeflow" version; then
    record unpack moeflow PASS "$(tail -n +2 "$logdir/unpack-version.log" | head -1)"
  else
    record unpack moeflow FAIL "see unpack-moeflow.log / unpack-version.log"
  fi
  [ "$LLAMA" = 0 ] && { record unpack llama-bench SKIP "GPU_CHECK_LLAMA=0"; return; }
  if logged unpack-llama 120 tar xJf "$CARRY/llama-bench-cuda13-sm90.tar.xz" -C / && [ -x "$LLAMA_DIR/llama-bench" ]; then
    record unpack llama-bench PASS "prebuilt CUDA llama-bench (../shared/gpu)"
  else
    record unpack llama-bench FAIL "see unpack-llama.log"
  fi
}

# -------------------------------------------------------------------------------------- test
stage_test() {
  STAGE_END=$((SECONDS + 150))
  [ -x "$BIN/test_gpu" ] || { record test all FAIL "no $BIN/test_gpu: run the unpack stage"; return; }
  nvidia-smi >"$logdir/nvidia-smi.log" 2>&1 || true
  local name
  # The CUDA cases only: the stand-in's run in CI already.
  for spec in "ops:60:test_backend:*cuda*:CudaDevice.*:BlockDecode.*" \
              "logits:150:test_gpu:*cuda*" \
              "choice:30:test_runtime:BackendChoice.*"; do
    name=${spec%%:*}; spec=${spec#*:}
    local limit=${spec%%:*}; spec=${spec#*:}
    local bin=${spec%%:*} filter=${spec#*:}
    if out_of_time; then record test "gpu $name ($bin)" SKIP "stage budget spent"; continue; fi
    ((limit > $(left))) && limit=$(left)
    if logged "test-gpu-$name" "$limit" env MOEFLOW_REQUIRE_GPU=1 "$BIN/$bin" --gtest_filter="$filter"; then
      record test "gpu $name ($bin)" PASS "$(gtest_counts "$logdir/test-gpu-$name.log"), ${LAST_SECONDS} s"
    else
      record test "gpu $name ($bin)" FAIL "$(gtest_counts "$logdir/test-gpu-$name.log"), see test-gpu-$name.log"
    fi
  done
}

# ---------------------------------------------------------------------------------- sanitize
stage_sanitize() {
  local cs=""
  for c in "$(command -v compute-sanitizer 2>/dev/null)" "$CUDA_BIN/compute-sanitizer" \
           "$CUDA_BIN/../compute-sanitizer/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { cs=$c; break; }
  done
  [ -n "$cs" ] || { record sanitize compute-sanitizer FAIL "not found next to nvcc ($CUDA_BIN)"; return; }
  STAGE_END=$((SECONDS + 150))
  local t=$BIN
  [ -x "$t/test_backend" ] || { record sanitize all FAIL "no $t/test_backend: run the unpack stage"; return; }
  # memcheck: every CUDA op test; racecheck / synccheck: the kernels with shared memory and
  # barriers (attention, norms, routing); memcheck again on whole models (graphs, cuBLAS, routing
  # round trips) and on the VRAM expert cache (copy lanes, events, retiring slots). Time limits
  # keep the stage under 10 minutes.
  local ops='EveryBackend/BackendOps.*/cuda:CudaDevice.*'
  local shared='EveryBackend/BackendOps.Attention*/cuda:EveryBackend/BackendOps.*Norm*/cuda:EveryBackend/BackendOps.Route*/cuda:EveryBackend/BackendOps.GatedDeltaNet*/cuda'
  local model='*cuda_mixtral_Q4_K:*cuda_olmoe_F16'
  for spec in "memcheck:90:test_backend:$ops" "memcheck-models:70:test_gpu:$model" \
              "racecheck:60:test_backend:$shared" "synccheck:40:test_backend:$shared" \
              "memcheck-vram:60:test_gpu:*GpuVramCache.*cuda"; do
    local name=${spec%%:*}; spec=${spec#*:}
    local limit=${spec%%:*}; spec=${spec#*:}
    local bin=${spec%%:*} filter=${spec#*:} tool=${name%%-*}
    if out_of_time; then record sanitize "$name" SKIP "stage budget spent"; continue; fi
    ((limit > $(left))) && limit=$(left)
    if logged "sanitize-$name" "$limit" env MOEFLOW_REQUIRE_GPU=1 "$cs" --tool "$tool" \
        --error-exitcode 99 "$t/$bin" --gtest_filter="$filter"; then
      record sanitize "$name" PASS "$(grep -Eo 'ERROR SUMMARY: [0-9]+ error[s]?|RACECHECK SUMMARY: [0-9]+ hazard[s]? displayed' "$logdir/sanitize-$name.log" | tail -1), ${LAST_SECONDS} s"
    else
      record sanitize "$name" FAIL "$(grep -Eo 'ERROR SUMMARY: [0-9]+ error[s]?|RACECHECK SUMMARY.*' "$logdir/sanitize-$name.log" | tail -1), see sanitize-$name.log"
    fi
  done
}

# ----------------------------------------------------------------- shared by bench and vram
# Sets MF (moeflow) and LB (llama-bench, "" when skipped or missing) for a stage; fails when
# moeflow is not built.
bench_tools() {  # stage
  MF=$BIN/moeflow
  [ -x "$MF" ] || { record "$1" all FAIL "no $MF: run the unpack stage"; return 1; }
  LB=$LLAMA_DIR/llama-bench
  [ "$LLAMA" = 0 ] || [ -x "$LB" ] || { record "$1" llama-bench FAIL "no $LB: run the unpack stage"; LB=""; }
  [ "$LLAMA" = 0 ] && LB=""
  mkdir -p "$BUILD/bench-models"
  return 0
}
# llama-bench -ngl 99 FLAGS -p 512 -n 128 on PATH, recorded as CHECK; sets LPP and LTG (tok/s,
# "-" when it failed). Output in LOGDIR/STAGE-llama-NAME.json.
llama_bench() {  # stage name path check flags
  local out=$logdir/$1-llama-$2.json
  LPP=- LTG=-
  if out_of_time; then record "$1" "$4" SKIP "stage budget spent"; return; fi
  if logged "$1-llama-$2" "$(left)" bash -c "'$LB' -m '$3' -ngl 99 $5 -p 512 -n 128 -r $REPS -o json >'$out'"; then
    LPP=$(llama_ts "$out" prompt)
    LTG=$(llama_ts "$out" gen)
    record "$1" "$4" PASS "pp512 $LPP, tg128 $LTG tok/s"
  else
    record "$1" "$4" FAIL "see $1-llama-$2.log"
  fi
}
# Generates $BUILD/bench-models/NAME.gguf with gen-model ARGS unless it exists; prints the path.
# Runs in a command substitution: the caller records a failure (log STAGE-gen-NAME).
bench_model() {  # stage name args...
  local stage=$1 name=$2
  shift 2
  local path=$BUILD/bench-models/$name.gguf
  if [ ! -f "$path" ]; then
    logged "$stage-gen-$name" "$(capped 150)" "$MF" gen-model "$@" -q -t "$JOBS" -o "$path.part" && mv "$path.part" "$path" || return 1
  fi
  echo "$path"
}

# ------------------------------------------------------------------------------------- bench
bench_rows=()  # "model|moeflow pp|moeflow tg|moeflow tg no graphs|llama pp|llama tg"
stage_bench() {
  STAGE_END=$((SECONDS + 150))
  bench_tools bench || return
  local mf=$MF lb=$LB
  # name : gen-model arguments. Four layers of the real Mixtral-8x7B shape (bench/bench_engine.py's
  # model), eight of Qwen3-30B-A3B's (128 small experts, top-8) and eight of Qwen3.6-35B-A3B's
  # (a gated DeltaNet hybrid: 6 DeltaNet + 2 full-attention layers, 256 experts, top-8): the
  # whole model in VRAM. In this order: a model that finds the budget spent is skipped.
  local models=("mixtral8x7b-4l-q4k:--arch mixtral --preset 8x7b --layers 4 --type Q4_K --repeat-experts"
                "qwen3-30b-a3b-8l-q4k:--arch qwen3moe --preset 30b-a3b --layers 8 --type Q4_K --repeat-experts"
                "qwen35moe-35b-a3b-8l-q4k:--arch qwen35moe --preset 35b-a3b --layers 8 --type Q4_K --repeat-experts")
  for m in "${models[@]}"; do
    local name=${m%%:*} args=${m#*:} path
    if out_of_time; then record bench "moeflow $name" SKIP "stage budget spent"; continue; fi
    # shellcheck disable=SC2086  # args are words
    path=$(bench_model bench "$name" $args) || { record bench "gen $name" FAIL "see bench-gen-$name.log"; continue; }
    local pp tg tg0 lpp="-" ltg="-"
    if logged "bench-moeflow-$name" "$(capped 60)" "$mf" bench --backend cuda -v -m "$path" -p 512 -n 128 --reps "$REPS" --json &&
       logged "bench-moeflow-nographs-$name" "$(capped 40)" env MOEFLOW_CUDA_GRAPHS=0 "$mf" bench --backend cuda -m "$path" -p 0 -n 128 --reps "$REPS" --json; then
      pp=$(json_field "$logdir/bench-moeflow-$name.log" prefill_tps)
      tg=$(json_field "$logdir/bench-moeflow-$name.log" decode_tps)
      tg0=$(json_field "$logdir/bench-moeflow-nographs-$name.log" decode_tps)
      record bench "moeflow $name" PASS "pp512 $pp, tg128 $tg ($tg0 without graphs) tok/s"
    else
      record bench "moeflow $name" FAIL "see bench-moeflow-$name.log"
      pp=-; tg=-; tg0=-
    fi
    if [ -n "$lb" ]; then
      llama_bench bench "$name" "$path" "llama.cpp $name" ""
      lpp=$LPP ltg=$LTG
    fi
    bench_rows+=("$name|$pp|$tg|$tg0|$lpp|$ltg")
  done
}

# -------------------------------------------------------------------------------------- vram
# The experts do not fit the VRAM given: moeflow's VRAM expert cache (--vram-limit: the whole
# run planned into that much VRAM) against llama.cpp -ngl 99 --n-cpu-moe N, N the fewest layers
# whose experts must stay on the CPU for the rest to fit the same VRAM. Full models: Mixtral-
# 8x7B-shaped (32 layers, ~26 GB) in 16 GiB, Qwen3-30B-A3B-shaped (48 layers, ~17 GB) in 8 GiB,
# generated with --repeat-experts (one layer's experts quantized, copied to the others: the
# same bytes to move per token, minutes less of generation).
vram_rows=()  # "model|vram|moeflow pp|moeflow tg|llama N|llama pp|llama tg|copy/pinned GB/s"
stage_vram() {
  STAGE_END=$((SECONDS + 270))
  bench_tools vram || return
  local mf=$MF lb=$LB
  local models=("mixtral8x7b-q4k:16:32:--arch mixtral --preset 8x7b --type Q4_K --repeat-experts"
                "qwen3-30b-a3b-q4k:8:48:--arch qwen3moe --preset 30b-a3b --type Q4_K --repeat-experts")
  for m in "${models[@]}"; do
    local name vram layers args path
    IFS=: read -r name vram layers args <<<"$m"
    # shellcheck disable=SC2086  # args are words
    path=$(bench_model vram "$name" $args) || { record vram "gen $name" FAIL "see vram-gen-$name.log"; continue; }
    local log=vram-moeflow-$name pp=- tg=- bw=-
    if logged "$log" 90 "$mf" bench --backend cuda -v -m "$path" -p 512 -n 128 --reps "$REPS" \
         --vram-limit "${vram}GiB" --json; then
      pp=$(json_field "$logdir/$log.log" prefill_tps)
      tg=$(json_field "$logdir/$log.log" decode_tps)
      bw=$(vram_copy_rates "$logdir/$log.log")
      record vram "moeflow $name in ${vram} GiB" PASS "pp512 $pp, tg128 $tg tok/s; copies $bw GB/s (achieved/pinned)"
    else
      record vram "moeflow $name in ${vram} GiB" FAIL "see $log.log"
    fi
    # The CPU/GPU hybrid on the same budget, one repetition (misses the CPU finishes first are
    # computed there).
    local variant vlog
    # shellcheck disable=SC2043  # one variant now; the list is where more go
    for variant in "--cpu-experts auto"; do
      vlog=vram-moeflow-${name}-$(tr -dc 'a-z0-9' <<<"$variant")
      if out_of_time; then record vram "moeflow $name in ${vram} GiB, $variant" SKIP "stage budget spent"; continue; fi
      # shellcheck disable=SC2086  # variant is words
      if logged "$vlog" 60 "$mf" bench --backend cuda -m "$path" -p 512 -n 128 --reps 1 \
           --vram-limit "${vram}GiB" $variant --json; then
        record vram "moeflow $name in ${vram} GiB, $variant" PASS \
          "pp512 $(json_field "$logdir/$vlog.log" prefill_tps), tg128 $(json_field "$logdir/$vlog.log" decode_tps) tok/s"
      else
        record vram "moeflow $name in ${vram} GiB, $variant" FAIL "see $vlog.log"
      fi
    done
    # The same budget with a real Mixtral-8x7B routing replayed (--routing-trace: real temporal
    # locality instead of the random routers'), request 1 (255 decode tokens).
    local trace_xz=$CARRY/mixtral-humaneval_2_routing.jsonl.xz
    if [ "$name" = mixtral8x7b-q4k ]; then
      local rlog=vram-moeflow-$name-replay
      if out_of_time; then record vram "moeflow $name in ${vram} GiB, routing replayed" SKIP "stage budget spent"
      elif [ ! -f "$trace_xz" ]; then record vram "moeflow $name in ${vram} GiB, routing replayed" SKIP "no trace in the bundle"
      elif xz -dc "$trace_xz" > "$BUILD/replay.jsonl" &&
           logged "$rlog" 60 "$mf" bench --backend cuda -m "$path" -p 128 -n 128 --reps 1 \
             --vram-limit "${vram}GiB" --routing-trace "$BUILD/replay.jsonl" --routing-request 1 --json; then
        record vram "moeflow $name in ${vram} GiB, routing replayed" PASS \
          "pp128 $(json_field "$logdir/$rlog.log" prefill_tps), tg128 $(json_field "$logdir/$rlog.log" decode_tps) tok/s"
      else
        record vram "moeflow $name in ${vram} GiB, routing replayed" FAIL "see $rlog.log"
      fi
    fi
    local n=- lpp=- ltg=-
    if [ -n "$lb" ]; then
      n=$(llama_cpu_layers "$logdir/$log.log" "$vram" "$layers")
      local flag="--n-cpu-moe $n"
      # Older llama-bench: the same as tensor overrides (quoted for the inner shell).
      "$lb" --help 2>&1 | grep -q -- "--n-cpu-moe" ||
        flag="-ot 'blk\\.($(seq -s '|' 0 $((n - 1))))\\.ffn_.*_exps=CPU'"
      [ "$n" -gt 0 ] || flag=""
      llama_bench vram "$name" "$path" "llama.cpp $name --n-cpu-moe $n" "$flag"
      lpp=$LPP ltg=$LTG
    fi
    vram_rows+=("$name|${vram} GiB|$pp|$tg|$n|$lpp|$ltg|$bw")
  done
}

# moeflow bench --json's copy rate: "achieved/pinned" GB/s.
vram_copy_rates() {
  python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
v = rows[-1].get("vram", {}) if rows else {}
print(f"{v.get('copy_gbps', 0):.1f}/{v.get('pinned_h2d_gbps', 0):.1f}" if v else "-")
EOF
}
# Fewest layers whose experts llama.cpp keeps on the CPU for the rest to fit the VRAM: non-expert
# weights + (layers - N) layers of experts + 1.5 GiB of KV cache and compute buffers.
llama_cpu_layers() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
layers = int(sys.argv[3])
if not rows:
    print(layers); sys.exit()
j = rows[-1]
room = int(sys.argv[2]) * 2**30 - j["non_expert_bytes"] - 1.5 * 2**30
per_layer = j["expert_bytes"] / layers
print(min(layers, max(0, math.ceil((j["expert_bytes"] - room) / per_layer))))
EOF
}

# The last JSON line of a log's field.
json_field() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("{")]
print(f"{json.loads(rows[-1])[sys.argv[2]]:.1f}" if rows else "-")
EOF
}
# llama-bench -o json: the avg_ts of the prompt-only or generation-only test.
llama_ts() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    runs = json.load(open(sys.argv[1]))
except ValueError:
    print("-"); sys.exit()
want = [r for r in runs if (r["n_gen"] == 0) == (sys.argv[2] == "prompt")]
print(f"{want[0]['avg_ts']:.1f}" if want else "-")
EOF
}

ratio() { python3 -c "import sys; a, b = sys.argv[1:]; print(f'{float(a) / float(b):.2f}x')" "$1" "$2" 2>/dev/null || echo -; }

t_all=$SECONDS
for s in ${stages//,/ }; do
  t0=$SECONDS
  note "== stage $s"
  "stage_$s"
  note "== stage $s took $((SECONDS - t0)) s"
  echo "$s $((SECONDS - t0))" >>"$logdir/stage-seconds.txt"
done

{
  echo
  echo "moeflow gpu-check ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU seen')), logs in $logdir, $((SECONDS - t_all)) s"
  printf '%-9s %-44s %-5s %s\n' stage check result detail
  for r in "${summary[@]}"; do
    IFS='|' read -r st ck rs dt <<<"$r"
    printf '%-9s %-44s %-5s %s\n' "$st" "$ck" "$rs" "$dt"
  done
  if ((${#bench_rows[@]})); then
    echo
    printf '%-22s %12s %12s %16s %12s %12s %9s %9s\n' model "moeflow pp" "moeflow tg" "tg (no graphs)" "llama pp" "llama tg" "pp ratio" "tg ratio"
    for r in "${bench_rows[@]}"; do
      IFS='|' read -r m pp tg tg0 lpp ltg <<<"$r"
      printf '%-22s %12s %12s %16s %12s %12s %9s %9s\n' "$m" "$pp" "$tg" "$tg0" "$lpp" "$ltg" "$(ratio "$pp" "$lpp")" "$(ratio "$tg" "$ltg")"
    done
    echo "(tok/s: prefill of 512 tokens, decode of 128; everything in VRAM; llama.cpp -ngl 99, default flash attention)"
  fi
  if ((${#vram_rows[@]})); then
    echo
    printf '%-20s %7s %11s %11s %8s %10s %10s %9s %9s %13s\n' model VRAM "moeflow pp" "moeflow tg" "llama N" "llama pp" "llama tg" "pp ratio" "tg ratio" "copy/pinned"
    for r in "${vram_rows[@]}"; do
      IFS='|' read -r m v pp tg n lpp ltg bw <<<"$r"
      printf '%-20s %7s %11s %11s %8s %10s %10s %9s %9s %13s\n' "$m" "$v" "$pp" "$tg" "$n" "$lpp" "$ltg" "$(ratio "$pp" "$lpp")" "$(ratio "$tg" "$ltg")" "$bw"
    done
    echo "(tok/s; experts beyond the VRAM given: moeflow's VRAM expert cache vs llama.cpp --n-cpu-moe N; targets: decode >= 1.5x, prefill >= 2x)"
  fi
} | tee "$logdir/summary.txt"
exit $failed
