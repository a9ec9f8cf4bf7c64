#!/usr/bin/env bash
# The C++/CUDA sources follow .clang-format (Google style, 100 columns). Checks every tracked
# source file with clang-format and lists the files that differ; --fix rewrites them in place.
# Generated files are left out (src/tokenizer/unicode_tables.cpp: gen_unicode_tables.py writes it).
# clang-format's output differs between major versions: the check uses Debian 12's
# clang-format 14, which scripts/setup-deps.sh installs.
# Usage: scripts/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
list_sources() {  # tracked files in a git checkout; every file under src/ tests/ bench/ otherwise
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files '*.h' '*.cpp' '*.cu' '*.cuh'
  else
    find src tests bench -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort
  fi
}
mapfile -t files < <(list_sources | grep -v -x 'src/tokenizer/unicode_tables.cpp')
if [ "${1:-}" = --fix ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "== format: ${#bad[@]} of ${#files[@]} files differ from clang-format ($(clang-format --version | grep -o 'version [0-9.]*')):" >&2
  printf '   %s\n' "${bad[@]}" >&2
  echo "   fix: bash scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "== format: ${#files[@]} files clang-format clean"
