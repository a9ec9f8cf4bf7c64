#!/usr/bin/env bash
# The one command to run on a GPU machine (CUDA toolkit, CMake, ninja, Python; no network):
# builds moeflow with CUDA and llama.cpp with CUDA from the carried sources, runs the GPU tests,
# compute-sanitizer over the op tests, and the all-in-VRAM benchmarks against llama.cpp; prints
# one short table last. Full logs go to LOGDIR. Run scripts/gpu-bundle.sh first on a machine
# with network and the Debian build packages: it fills .gpu-carry/, which travels with the tree.
#
# Usage: scripts/gpu-check.sh [--stages build,test,sanitize,bench,vram] LOGDIR
#   build     moeflow (-DMOEFLOW_CUDA=ON, sm_90 + PTX, tests) and llama.cpp's llama-bench (CUDA)
#   test      GPU tests with MOEFLOW_REQUIRE_GPU=1 (op suite on CUDA, GPU vs CPU logits for
#             every architecture and block format), then the CPU suite
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on the CUDA op tests, and
#             memcheck on two whole-model GPU tests
#   bench     generates the benchmark models here, then prefill / decode tok/s of moeflow
#             (CUDA graphs on and off) and llama.cpp -ngl 99 on the same files
#   vram      full-size models that do not fit the VRAM given: moeflow's VRAM expert cache
#             (--vram-limit) against llama.cpp -ngl 99 --n-cpu-moe N in the same VRAM
# Each stage is meant to finish in under 10 minutes on a 16-core machine.
# Environment: JOBS (default: all cores), GPU_CHECK_BUILD (default build-gpu),
# GPU_CHECK_LLAMA=0 (skip llama.cpp: build and bench moeflow only), BENCH_REPS (default 3).
# shellcheck disable=SC2317  # the stage_* functions are called by name ("stage_$s")
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

stages=build,test,sanitize,bench,vram
logdir=""
while (($#)); do
  case $1 in
    --stages) stages=$2; shift 2 ;;
    --stages=*) stages=${1#--stages=}; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *) logdir=$1; shift ;;
  esac
done
[ -n "$logdir" ] || { echo "usage: scripts/gpu-check.sh [--stages build,test,sanitize,bench,vram] LOGDIR" >&2; exit 2; }
for s in ${stages//,/ }; do
  case $s in build|test|sanitize|bench|vram) ;; *) echo "gpu-check: unknown stage '$s'" >&2; exit 2 ;; esac
done
mkdir -p "$logdir"
logdir=$(cd "$logdir" && pwd)
JOBS=${JOBS:-$(nproc)}
BUILD=${GPU_CHECK_BUILD:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
LLAMA=${GPU_CHECK_LLAMA:-1}
REPS=${BENCH_REPS:-3}
CARRY=$ROOT/.gpu-carry
summary=()   # "stage|check|result|detail"
failed=0

if ! command -v nvcc >/dev/null; then
  for d in "${CUDA_HOME:-}" /usr/local/cuda; do
    [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi
CUDA_BIN=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")

note() { echo "gpu-check: $*"; }
record() {  # stage check status detail
  summary+=("$1|$2|$3|$4")
  [ "$3" = FAIL ] && failed=1
  note "$1 / $2: $3 ${4:+($4)}"
}
# Runs a command with its output in LOGDIR/NAME.log; prints the elapsed seconds.
logged() {
  local name=$1; shift
  local t0=$SECONDS
  { echo "\$ $*"; "$@"; } >"$logdir/$name.log" 2>&1
  local rc=$?
  echo "[exit $rc after $((SECONDS - t0)) s]" >>"$logdir/$name.log"
  LAST_SECONDS=$((SECONDS - t0))
  return "$rc"
}
gtest_counts() {  # log -> "N passed, M skipped, K failed"
  local log=$1
  local p s f
  # Per-test result lines end with the test's time; gtest's closing lists do not.
  p=$(grep -Ec '^\[       OK \] .*\([0-9]+ ms\)$' "$log" || true)
  s=$(grep -Ec '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$log" || true)
  f=$(grep -Ec '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log" || true)
  echo "$p passed, $s skipped, $f failed"
}

# ------------------------------------------------------------------------------------- build
stage_build() {
  local tp=()
  if [ -d "$CARRY" ]; then
    tp=(-DMOEFLOW_THIRD_PARTY_DIR="$CARRY")
  else
    note "no .gpu-carry/ (scripts/gpu-bundle.sh): using the system's fmt, CLI11, nlohmann-json, httplib, GoogleTest"
  fi
  # The shared test data beside the tree does not travel: the carried corpus stands in for it.
  if [ ! -d "$ROOT/../shared/data/corpus" ] && [ -f "$CARRY/shared-data.tar.gz" ]; then
    mkdir -p "$BUILD/shared-data" && tar xzf "$CARRY/shared-data.tar.gz" -C "$BUILD/shared-data"
    tp+=(-DMOEFLOW_SHARED_DATA_DIR="$BUILD/shared-data")
  fi
  local launch=()
  command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  if logged build-moeflow bash -c "cmake -S . -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEFLOW_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DMOEFLOW_TESTS=ON -DMOEFLOW_BENCH=OFF ${tp[*]} ${launch[*]} && \
        cmake --build '$BUILD' -j $JOBS"; then
    record build moeflow PASS "CUDA sm_90+PTX, ${LAST_SECONDS} s"
  else
    record build moeflow FAIL "see build-moeflow.log"
    return
  fi
  if [ "$LLAMA" = 0 ]; then
    record build llama.cpp SKIP "GPU_CHECK_LLAMA=0"
    return
  fi
  if [ ! -f "$CARRY/llama.cpp.tar.gz" ]; then
    record build llama.cpp FAIL "no .gpu-carry/llama.cpp.tar.gz (run scripts/gpu-bundle.sh)"
    return
  fi
  local src=$BUILD/llama.cpp-src
  if [ ! -f "$src/.stamp" ] || ! cmp -s "$src/.stamp" <(sha256sum "$CARRY/llama.cpp.tar.gz"); then
    rm -rf "$src" && mkdir -p "$src"
    tar xzf "$CARRY/llama.cpp.tar.gz" -C "$src" --strip-components=1
    sha256sum "$CARRY/llama.cpp.tar.gz" >"$src/.stamp"
  fi
  # llama-bench only, CUDA for Hopper, no network features.
  if logged build-llama bash -c "cmake -S '$src' -B '$BUILD/llama.cpp' -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_OPENSSL=OFF -DGGML_CUDA_NCCL=OFF ${launch[*]} && \
        cmake --build '$BUILD/llama.cpp' --target llama-bench -j $JOBS"; then
    record build llama.cpp PASS "llama-bench with CUDA, ${LAST_SECONDS} s"
  else
    record build llama.cpp FAIL "see build-llama.log"
  fi
}

# -------------------------------------------------------------------------------------- test
stage_test() {
  local t=$BUILD/tests
  [ -x "$t/test_backend" ] || { record test all FAIL "no $t/test_backend: run the build stage"; return; }
  nvidia-smi >"$logdir/nvidia-smi.log" 2>&1 || true
  local name
  for spec in "ops:test_backend:*cuda*:CudaDevice.*:BlockDecode.*" "logits:test_gpu:*" "choice:test_runtime:BackendChoice.*"; do
    name=${spec%%:*}; spec=${spec#*:}
    local bin=${spec%%:*} filter=${spec#*:}
    if logged "test-gpu-$name" env MOEFLOW_REQUIRE_GPU=1 "$t/$bin" --gtest_filter="$filter"; then
      record test "gpu $name ($bin)" PASS "$(gtest_counts "$logdir/test-gpu-$name.log"), ${LAST_SECONDS} s"
    else
      record test "gpu $name ($bin)" FAIL "$(gtest_counts "$logdir/test-gpu-$name.log"), see test-gpu-$name.log"
    fi
  done
  # The CPU suite of this build, the GPU cases excluded (run above), the Python oracles
  # excluded (their packages are not on GPU machines).
  if logged test-cpu bash -c "cd '$BUILD' && ctest -j $JOBS -LE 'python|slow|gpu' -E 'cuda|CudaDevice' --timeout 600 --output-on-failure"; then
    record test "cpu suite" PASS "$(grep -Eo '[0-9]+% tests passed.*' "$logdir/test-cpu.log" | tail -1), ${LAST_SECONDS} s"
  else
    record test "cpu suite" FAIL "$(grep -Eo '[0-9]+% tests passed.*' "$logdir/test-cpu.log" | tail -1), see test-cpu.log"
  fi
}

# ---------------------------------------------------------------------------------- sanitize
stage_sanitize() {
  local cs=""
  for c in "$(command -v compute-sanitizer 2>/dev/null)" "$CUDA_BIN/compute-sanitizer" \
           "$CUDA_BIN/../compute-sanitizer/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { cs=$c; break; }
  done
  [ -n "$cs" ] || { record sanitize compute-sanitizer FAIL "not found next to nvcc ($CUDA_BIN)"; return; }
  local t=$BUILD/tests
  [ -x "$t/test_backend" ] || { record sanitize all FAIL "no $t/test_backend: run the build stage"; return; }
  # memcheck: every CUDA op test; racecheck / synccheck: the kernels with shared memory and
  # barriers (attention, norms, routing); memcheck again on whole models (graphs, cuBLAS, routing
  # round trips) and on the VRAM expert cache (copy lanes, events, retiring slots). Time limits
  # keep the stage under 10 minutes.
  local ops='EveryBackend/BackendOps.*/cuda:CudaDevice.*'
  local shared='EveryBackend/BackendOps.Attention*/cuda:EveryBackend/BackendOps.*Norm*/cuda:EveryBackend/BackendOps.Route*/cuda'
  local model='*mixtral_Q4_K:*qwen2moe_Q4_0:*qwen3moe_IQ4_XS:*olmoe_F16'
  for spec in "memcheck:200:test_backend:$ops" "racecheck:150:test_backend:$shared" \
              "synccheck:90:test_backend:$shared" "memcheck-models:130:test_gpu:$model" \
              "memcheck-vram:120:test_gpu:GpuVramCache.*"; do
    local name=${spec%%:*}; spec=${spec#*:}
    local limit=${spec%%:*}; spec=${spec#*:}
    local bin=${spec%%:*} filter=${spec#*:} tool=${name%%-*}
    if logged "sanitize-$name" env MOEFLOW_REQUIRE_GPU=1 timeout "$limit" "$cs" --tool "$tool" \
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
  MF=$BUILD/moeflow
  [ -x "$MF" ] || { record "$1" all FAIL "no $MF: run the build stage"; return 1; }
  LB=$BUILD/llama.cpp/bin/llama-bench
  [ "$LLAMA" = 0 ] || [ -x "$LB" ] || { record "$1" llama-bench FAIL "no $LB: run the build stage"; LB=""; }
  [ "$LLAMA" = 0 ] && LB=""
  mkdir -p "$BUILD/bench-models"
  return 0
}
# llama-bench -ngl 99 FLAGS -p 512 -n 128 on PATH, recorded as CHECK; sets LPP and LTG (tok/s,
# "-" when it failed). Output in LOGDIR/STAGE-llama-NAME.json.
llama_bench() {  # stage name path check flags
  local out=$logdir/$1-llama-$2.json
  LPP=- LTG=-
  if logged "$1-llama-$2" bash -c "'$LB' -m '$3' -ngl 99 $5 -p 512 -n 128 -r $REPS -o json >'$out'"; then
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
    logged "$stage-gen-$name" "$MF" gen-model "$@" -q -t "$JOBS" -o "$path.part" && mv "$path.part" "$path" || return 1
  fi
  echo "$path"
}

# ------------------------------------------------------------------------------------- bench
bench_rows=()  # "model|moeflow pp|moeflow tg|moeflow tg no graphs|llama pp|llama tg"
stage_bench() {
  bench_tools bench || return
  local mf=$MF lb=$LB
  # name : gen-model arguments. Four layers of the real Mixtral-8x7B shape (bench/bench_engine.py's
  # model) and eight of Qwen3-30B-A3B's (128 small experts, top-8): the whole model in VRAM.
  local models=("mixtral8x7b-4l-q4k:--arch mixtral --preset 8x7b --layers 4 --type Q4_K"
                "qwen3-30b-a3b-8l-q4k:--arch qwen3moe --preset 30b-a3b --layers 8 --type Q4_K")
  for m in "${models[@]}"; do
    local name=${m%%:*} args=${m#*:} path
    # shellcheck disable=SC2086  # args are words
    path=$(bench_model bench "$name" $args) || { record bench "gen $name" FAIL "see bench-gen-$name.log"; continue; }
    local pp tg tg0 lpp="-" ltg="-"
    if logged "bench-moeflow-$name" "$mf" bench --backend cuda -m "$path" -p 512 -n 128 --reps "$REPS" --json &&
       logged "bench-moeflow-nographs-$name" env MOEFLOW_CUDA_GRAPHS=0 "$mf" bench --backend cuda -m "$path" -p 0 -n 128 --reps "$REPS" --json; then
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
    if logged "$log" "$mf" bench --backend cuda -m "$path" -p 512 -n 128 --reps "$REPS" \
         --vram-limit "${vram}GiB" --json; then
      pp=$(json_field "$logdir/$log.log" prefill_tps)
      tg=$(json_field "$logdir/$log.log" decode_tps)
      bw=$(vram_copy_rates "$logdir/$log.log")
      record vram "moeflow $name in ${vram} GiB" PASS "pp512 $pp, tg128 $tg tok/s; copies $bw GB/s (achieved/pinned)"
    else
      record vram "moeflow $name in ${vram} GiB" FAIL "see $log.log"
    fi
    # Opt-in modes on the same budget, one repetition each (the stage stays under 10 minutes):
    # the CPU/GPU hybrid (misses the CPU finishes first are computed there), DuoServe's prefill
    # pipeline, and DAOP's CPU pre-calculation (lossy).
    local variant vlog
    for variant in "--cpu-experts auto" "--prefill-slots 8" "--precalc"; do
      vlog=vram-moeflow-${name}-$(tr -dc 'a-z0-9' <<<"$variant")
      # shellcheck disable=SC2086  # variant is words
      if logged "$vlog" "$mf" bench --backend cuda -m "$path" -p 512 -n 128 --reps 1 \
           --vram-limit "${vram}GiB" $variant --json; then
        record vram "moeflow $name in ${vram} GiB, $variant" PASS \
          "pp512 $(json_field "$logdir/$vlog.log" prefill_tps), tg128 $(json_field "$logdir/$vlog.log" decode_tps) tok/s"
      else
        record vram "moeflow $name in ${vram} GiB, $variant" FAIL "see $vlog.log"
      fi
    done
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
