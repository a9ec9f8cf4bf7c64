#!/usr/bin/env python3
"""Byte-for-byte comparison of two moeflow binaries on the same models and inputs.

Used to prove that a restructuring changed no arithmetic: both binaries score the same token
ids (`eval`: batched prefill + greedy decode steps, raw float32 logits), score real text with
and without expert offloading (`perplexity --save-logits`, several budgets, prefetchers and
chunkings) and generate greedily with offloading (`run --temp 0`). Every artefact must be
identical; the first difference is reported with its file and offset.

Models are generated once by the OLD binary (`gen-model`), one per architecture x block type,
so both binaries read the very same files. Runs at every SIMD level the CPU has (the kernels
differ per level, each must match its own old counterpart).

  python3 scripts/check_bit_identical.py --old-bin OLD/moeflow --new-bin NEW/moeflow [--quick]
      [--models arch:TYPE,...] [--levels scalar,avx2]
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

# (gen-model arch, block type): every architecture, every family of block formats.
MODELS = [
    ("mixtral", "F32"), ("mixtral", "Q4_K"), ("mixtral", "Q8_0"), ("mixtral", "IQ4_XS"),
    ("qwen2moe", "F16"), ("qwen2moe", "Q4_0"), ("qwen2moe", "Q6_K"),
    ("qwen3moe", "BF16"), ("qwen3moe", "Q5_K"), ("qwen3moe", "Q4_1"),
    ("olmoe", "Q3_K"), ("olmoe", "Q5_0"), ("olmoe", "Q2_K"), ("olmoe", "IQ4_NL"),
]
QUICK = [("mixtral", "Q4_K"), ("qwen2moe", "Q4_0"), ("qwen3moe", "Q5_K"), ("olmoe", "F16")]

TOKENS = "1,17,300,42,99,5,250,7,180,33,64,128,3,77,201,16,90,11,240,8,150,61,2,199,45,120,9,230,70,14,111,55"

# Offloading configurations for `perplexity` (all exact modes, plus a deterministic lossy one).
OFFLOAD_CONFIGS = [
    [],
    ["--cache-rate", "0.5"],
    ["--cache-rate", "0.6", "--prefetch", "lookahead", "--cache-policy", "lfu"],
    ["--cache-rate", "0.75", "--cache-per-layer", "--prefetch", "none"],
    ["--cache-rate", "0.5", "--mode", "skip", "--skip-threshold", "0.3"],
]


def simd_levels():
    flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line
                break
    levels = ["scalar"]
    if " avx2 " in flags:
        levels.append("avx2")
    if " avx512f " in flags and " avx512bw " in flags:
        levels.append("avx512")
    return levels


def run(cmd, env, out_file=None):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    if out_file:
        with open(out_file, "w") as f:
            f.write(p.stdout)
    return p.stdout


def first_difference(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        da, db = fa.read(), fb.read()
    if da == db:
        return None
    n = min(len(da), len(db))
    for i in range(n):
        if da[i] != db[i]:
            return f"first differing byte at offset {i} (sizes {len(da)} / {len(db)})"
    return f"sizes differ: {len(da)} / {len(db)}"


def artefacts(binary, model, text, out, env):
    """Runs every scenario of one model with `binary`; returns the artefact paths."""
    files = []
    for tag, extra in (("b256", []), ("b7", ["-b", "7"]), ("seq", ["--sequential"])):
        lf = f"{out}.eval-{tag}.f32"
        js = f"{out}.eval-{tag}.json"
        run([binary, "eval", "-m", model, "--tokens", TOKENS, "--greedy", "16", "-t", "2",
             "--logits-out", lf] + extra, env, js)
        files += [lf, js]
    for i, cfg in enumerate(OFFLOAD_CONFIGS):
        lf = f"{out}.ppl{i}.f32"
        run([binary, "perplexity", "-m", model, "-f", text, "-c", "64", "--chunks", "3", "-b", "32",
             "-t", "2", "--save-logits", lf, "--buffered-io"] + cfg, env)
        files.append(lf)
    for i, cfg in enumerate(OFFLOAD_CONFIGS[1:4]):
        tf = f"{out}.run{i}.txt"
        run([binary, "run", "-m", model, "-p", "ids:" + TOKENS, "-n", "24", "--temp", "0", "-t", "2",
             "--stats", "none", "--buffered-io"] + cfg, env, tf)
        files.append(tf)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-bin", required=True)
    ap.add_argument("--new-bin", required=True)
    ap.add_argument("--work", help="scratch folder (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="4 models instead of 14")
    ap.add_argument("--levels", help="comma-separated SIMD levels (default: every level the CPU has)")
    ap.add_argument("--models", help="comma-separated arch:TYPE pairs instead of the list above "
                    "(e.g. qwen3next:F32,gemma4:Q8_0)")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    corpus = os.path.join(root, "..", "shared", "data", "corpus", "wikipedia_texts.txt")
    if not os.path.exists(corpus):
        sys.exit(f"missing {corpus} (../shared/data beside the repository)")
    work = args.work or tempfile.mkdtemp(prefix="moeflow-bitid-")
    os.makedirs(work, exist_ok=True)
    text = os.path.join(work, "text.txt")
    with open(corpus, encoding="utf-8", errors="replace") as f:
        with open(text, "w", encoding="utf-8") as g:
            g.write(f.read(6000))
    models = []
    chosen = QUICK if args.quick else MODELS
    if args.models:
        chosen = [tuple(m.split(":", 1)) for m in args.models.split(",")]
    for arch, typ in chosen:
        path = os.path.join(work, f"{arch}-{typ}.gguf")
        if not os.path.exists(path):
            run([args.old_bin, "gen-model", "--arch", arch, "--preset", "small", "--type", typ,
                 "--seed", "7", "-q", "-o", path], dict(os.environ))
        models.append(path)
    models.append(os.path.join(root, "models", "demo-moe.gguf"))
    levels = args.levels.split(",") if args.levels else simd_levels()
    compared = 0
    failures = []
    for level in levels:
        env = dict(os.environ, MOEFLOW_SIMD=level)
        for m in models:
            name = os.path.basename(m)
            old = artefacts(args.old_bin, m, text, os.path.join(work, f"old-{level}-{name}"), env)
            new = artefacts(args.new_bin, m, text, os.path.join(work, f"new-{level}-{name}"), env)
            for a, b in zip(old, new):
                compared += 1
                diff = first_difference(a, b)
                if diff:
                    failures.append(f"{level} {name} {os.path.basename(a)}: {diff}")
            digest = hashlib.sha256(b"".join(open(f, "rb").read() for f in new)).hexdigest()[:16]
            print(f"{level:7s} {name:28s} {len(new)} artefacts  sha256 {digest}  "
                  f"{'DIFFERENT' if any(name in x and x.startswith(level) for x in failures) else 'identical'}",
                  flush=True)
    if failures:
        print("\n".join(["", "DIFFERENCES:"] + failures))
        sys.exit(1)
    print(f"\nall {compared} artefacts byte-identical ({len(models)} models x {len(levels)} SIMD levels)")


if __name__ == "__main__":
    main()
