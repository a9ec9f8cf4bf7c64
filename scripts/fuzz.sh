#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan, coverage-instrumented libraries) and runs
# each for a bounded time on a scratch copy of its seed corpus. Fails on any crash, leak,
# timeout (one input > 10 s), out-of-memory (> 2048 MB, or one malloc above it) or property
# violation; the offending input is kept under DIR/fuzz-artifacts/ and the command to replay it
# is printed. See docs/fuzzing.md.
#
# Usage: scripts/fuzz.sh [--seconds N] [--runs N] [--build DIR] [--jobs N] [targets...]
#   --seconds N  time per target (default 60); targets run one after another
#   --runs N     stop a target after N executions (its time limit still applies); the long run
#                of docs/fuzzing.md is --runs 1000000 --seconds 14400
#   --build DIR  the fuzz build directory (default build-fuzz)
#   --jobs N     build parallelism (default: all cores)
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
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMOEFLOW_FUZZ=ON \
  -DMOEFLOW_TESTS=OFF -DMOEFLOW_BENCH=OFF "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]/#/fuzz_}"

artifacts="$PWD/$BUILD/fuzz-artifacts"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
summary=()
failed=()
for t in "${targets[@]}"; do
  bin="$PWD/$BUILD/tests/fuzz/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  [ -d "$seeds" ] || { echo "fuzz.sh: no seed corpus $seeds" >&2; exit 2; }
  # libFuzzer adds the inputs it finds interesting to the first corpus folder: a copy, so the
  # committed seeds never change behind git's back.
  mkdir -p "$scratch/$t" "$artifacts/$t"
  cp -R "$seeds/." "$scratch/$t/"
  log="$artifacts/$t/fuzz.log"
  limit="$SECONDS_PER_TARGET s"
  [ "$RUNS" -ge 0 ] && limit="$RUNS runs (at most $SECONDS_PER_TARGET s)"
  echo "== fuzz_$t: $limit on $(ls "$seeds" | wc -l) seeds (log: $log)"
  rc=0
  started=$SECONDS
  # detect_leaks: at exit and after inputs that grew the heap; max_len: the largest seed, at
  # least 4096 bytes (libFuzzer's default rule, made explicit).
  max_len=$(find "$seeds" -type f -printf '%s\n' | sort -n | tail -n1)
  max_len=$(( max_len > 4096 ? max_len : 4096 ))
  # The reproducers of fixed bugs (tests/fuzz/regressions/<name>, read only) are inputs too.
  extra=()
  [ -d "tests/fuzz/regressions/$t" ] && extra=("tests/fuzz/regressions/$t")
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1:${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
    "$bin" -max_total_time="$SECONDS_PER_TARGET" -runs="$RUNS" -rss_limit_mb=2048 -timeout=10 -detect_leaks=1 \
      -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$artifacts/$t/" \
      "$scratch/$t" "${extra[@]}" >"$log" 2>&1 || rc=$?
  elapsed=$((SECONDS - started))
  found=$(find "$artifacts/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o \
          -name 'timeout-*' -o -name 'oom-*' \) -newer "$scratch" | sort)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  done_line=$(grep -aE '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$done_line")
  line=$(printf '%-22s %12s execs %8s exec/s  cov %6s  ft %7s  corpus %-12s %5ss' "fuzz_$t" \
         "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$elapsed")
  if [ "$rc" != 0 ] || [ -n "$found" ]; then
    line+="  FAILED (exit $rc)"
    failed+=("$t")
    grep -aE 'ERROR: |SUMMARY: |fuzz property violated|runtime error|==[0-9]+== ?ERROR' "$log" | head -n 5 | sed 's/^/   /'
    for a in $found; do
      echo "   input: $a"
      echo "   replay: $bin $a"
    done
    [ -n "$found" ] || tail -n 20 "$log" | sed 's/^/   /'
  fi
  echo "   $line"
  summary+=("$line")
done

echo "== fuzz summary (at most ${SECONDS_PER_TARGET} s per target$([ "$RUNS" -ge 0 ] && echo ", $RUNS runs"))"
printf '   %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "== fuzzing FAILED: ${failed[*]/#/fuzz_} (inputs under $artifacts)" >&2
  exit 1
fi
echo "== fuzzing passed: no crash, leak, timeout or out-of-memory"
