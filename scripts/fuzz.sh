#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan, coverage-instrumented libraries) and runs
# each for a bounded time on a scratch copy of its seed corpus. Fails on any crash, leak,
# timeout (one input > 10 s), out-of-memory (> 2048 MB, or one malloc above it) or property
# violation; the offending input is kept under DIR/fuzz-artifacts/ and the command to replay it
# is printed. See docs/fuzzing.md.
#
# Usage: scripts/fuzz.sh [--seconds N] [--runs N] [--build DIR] [--jobs N] [targets...]
#   --seconds N  time per target (default 60); targets run --jobs at a time, one core each
#   --runs N     stop a target after N executions (its time limit still applies); the long run
#                of docs/fuzzing.md is --runs 1000000 --seconds 14400
#   --build DIR  the fuzz build directory (default build-fuzz)
#   --jobs N     build parallelism and targets fuzzed at once (default: all cores)
#   targets      names without the fuzz_ prefix (default: every tests/fuzz/fuzz_<name>.cpp)
# Prints one line per target: executions, exec/s, coverage (edges), features, corpus size, time.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=60
RUNS=-1
BUILD=build-fuzz
JOBS=${JOBS:-$(nproc)}
targets=()
while (($#)); do
  case "$1" in
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("${1#fuzz_}"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do
    n=$(basename "$f" .cpp)
    targets+=("${n#fuzz_}")
  done
fi
for t in "${targets[@]}"; do
  [ -f "tests/fuzz/fuzz_$t.cpp" ] || { echo "fuzz.sh: no target tests/fuzz/fuzz_$t.cpp" >&2; exit 2; }
done

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
echo "== fuzz build ($BUILD, clang, ASan+UBSan+libFuzzer): ${targets[*]/#/fuzz_}"
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMOEFLOW_FUZZ=ON -DMOEFLOW_UNITY=ON \
  -DMOEFLOW_TESTS=OFF -DMOEFLOW_BENCH=OFF "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]/#/fuzz_}"

artifacts="$PWD/$BUILD/fuzz-artifacts"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Artifacts newer than this stamp are this run's findings (a file: the folder's own time moves
# whenever a target adds something to it).
started_stamp="$scratch/.started"
touch "$started_stamp"
# Targets run side by side, JOBS at a time: each libFuzzer process uses one core, so a 2-core
# machine fuzzes two targets in the wall time of one (the time per target is unchanged). Each
# target writes its report to its own file; the reports are printed in target order.
fuzz_target() {  # target name; prints the report, ends with status 1 when it found something
  local t=$1
  local bin="$PWD/$BUILD/tests/fuzz/fuzz_$t"
  local seeds="tests/fuzz/corpus/$t"
  # libFuzzer adds the inputs it finds interesting to the first corpus folder: a copy, so the
  # committed seeds never change behind git's back.
  mkdir -p "$scratch/$t" "$artifacts/$t"
  cp -R "$seeds/." "$scratch/$t/"
  local log="$artifacts/$t/fuzz.log"
  local limit="$SECONDS_PER_TARGET s"
  [ "$RUNS" -ge 0 ] && limit="$RUNS runs (at most $SECONDS_PER_TARGET s)"
  echo "== fuzz_$t: $limit on $(ls "$seeds" | wc -l) seeds (log: $log)"
  local rc=0 started=$SECONDS
  # detect_leaks: at exit and after inputs that grew the heap; max_len: the largest seed, at
  # least 4096 bytes (libFuzzer's default rule, made explicit).
  local max_len
  max_len=$(find "$seeds" -type f -printf '%s\n' | sort -n | tail -n1)
  max_len=$(( max_len > 4096 ? max_len : 4096 ))
  # The reproducers of fixed bugs (tests/fuzz/regressions/<name>, read only) are inputs too.
  local extra=()
  [ -d "tests/fuzz/regressions/$t" ] && extra=("tests/fuzz/regressions/$t")
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1:${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
    "$bin" -max_total_time="$SECONDS_PER_TARGET" -runs="$RUNS" -rss_limit_mb=2048 -timeout=10 -detect_leaks=1 \
      -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$artifacts/$t/" \
      "$scratch/$t" "${extra[@]}" >"$log" 2>&1 || rc=$?
  local elapsed=$((SECONDS - started))
  local found
  found=$(find "$artifacts/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o \
          -name 'timeout-*' -o -name 'oom-*' \) -newer "$started_stamp" | sort)
  local execs rate done_line cov ft corp line
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  done_line=$(grep -aE '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$done_line")
  line=$(printf '%-22s %12s execs %8s exec/s  cov %6s  ft %7s  corpus %-12s %5ss' "fuzz_$t" \
         "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$elapsed")
  local bad=0
  if [ "$rc" != 0 ] || [ -n "$found" ]; then
    line+="  FAILED (exit $rc)"
    bad=1
    grep -aE 'ERROR: |SUMMARY: |fuzz property violated|runtime error|==[0-9]+== ?ERROR' "$log" | head -n 5 | sed 's/^/   /'
    for a in $found; do
      echo "   input: $a"
      echo "   replay: $bin $a"
    done
    [ -n "$found" ] || tail -n 20 "$log" | sed 's/^/   /'
  fi
  echo "   $line"
  echo "$line" > "$scratch/$t.line"
  return "$bad"
}

for t in "${targets[@]}"; do
  [ -d "tests/fuzz/corpus/$t" ] || { echo "fuzz.sh: no seed corpus tests/fuzz/corpus/$t" >&2; exit 2; }
done
# A target's status goes to a file: it runs in a condition, where a failing command inside it
# does not end it early (set -e), and nothing depends on which job `wait` reaped first.
for t in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
  ( if fuzz_target "$t" >"$scratch/$t.out" 2>&1; then echo 0; else echo 1; fi >"$scratch/$t.rc" ) &
done
wait
summary=()
failed=()
for t in "${targets[@]}"; do
  cat "$scratch/$t.out"
  summary+=("$(cat "$scratch/$t.line" 2>/dev/null || echo "fuzz_$t: no report")")
  [ "$(cat "$scratch/$t.rc" 2>/dev/null)" = 0 ] || failed+=("$t")
done

echo "== fuzz summary (at most ${SECONDS_PER_TARGET} s per target$([ "$RUNS" -ge 0 ] && echo ", $RUNS runs"))"
printf '   %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "== fuzzing FAILED: ${failed[*]/#/fuzz_} (inputs under $artifacts)" >&2
  exit 1
fi
echo "== fuzzing passed: no crash, leak, timeout or out-of-memory"
