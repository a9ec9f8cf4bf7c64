#!/usr/bin/env python3
"""What the CPU kernels' own layouts (Q4_K_R8, MXFP4_R8, Q8_0_R8; docs/kernels.md) are worth
once experts are offloaded, and what they cost:

  file        the default: every weight in the GGUF layout (the non-expert copies and the slots)
  repacked    --repack-offloaded: the non-expert weights' copies repacked at load, and every
              expert rewritten as it arrives in its cache slot

Each configuration runs `moeflow bench -p P -n N --reps 1 --json --cache-rate R` as its own
process (a cold expert cache: the slots fill as the run goes, as they would for a user), the two
interleaved within every rep; medians over reps, ratios against `file` from the same reps. The
offload counters of each run are kept (hit rate, stall, bytes rewritten and the time spent on it).

usage: bench/bench_offload_repack.py --model LABEL=M.gguf [--model ...] [--rates 0.5,0.9]
                                     [--reps 5] [-t 2] [-p 64] [-n 64] [--moeflow build/moeflow]
                                     [--out bench/offload-repack.json] [--report F.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from bench_engine import cpu_model
from moeflow_version import binary_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"file": [], "repacked": ["--repack-offloaded"]}


def run_one(a, model, rate, flags):
    cmd = [a.moeflow, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "--reps", "1", "--json",
           "-t", str(a.t), "--cache-rate", str(rate), *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    j = json.loads(r.stdout)
    t = j["offload"]["total"]
    return {"decode_tps": j["decode_tps"], "prefill_tps": j["prefill_tps"], "simd": j["simd"],
            "hit_rate": t["hit_rate"], "stall_s": t["stall_s"], "read_s": t["read_s"],
            "bytes_read": t["bytes_read"], "bytes_rewritten": t["bytes_rewritten"],
            "rewrite_s": t["rewrite_s"],
            "weights_repacked_bytes": j["memory"]["weights_repacked_bytes"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True, help="LABEL=PATH")
    ap.add_argument("--rates", default="0.5,0.9")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "offload-repack.json"))
    ap.add_argument("--report")
    a = ap.parse_args()
    models = [m.split("=", 1) for m in a.model]
    rates = [float(x) for x in a.rates.split(",")]
    names = list(CONFIGS)
    runs = []
    for rep in range(a.reps):
        for label, path in models:
            for rate in rates:
                # Rotate the order every rep: no configuration always runs first (cold page
                # cache, a busy neighbour).
                for k in range(len(names)):
                    name = names[(k + rep) % len(names)]
                    r = run_one(a, path, rate, CONFIGS[name])
                    r.update(model=label, rate=rate, config=name, rep=rep)
                    runs.append(r)
                    print(f"rep {rep} {label} rate {rate} {name:7s} decode {r['decode_tps']:.2f} "
                          f"prefill {r['prefill_tps']:.2f} hit {r['hit_rate']:.3f} "
                          f"rewrite {r['rewrite_s']:.2f}s", flush=True)
    rows = []
    for label, _ in models:
        for rate in rates:
            med = {}
            for name in names:
                rs = [r for r in runs if r["model"] == label and r["rate"] == rate and r["config"] == name]
                med[name] = {k: statistics.median(r[k] for r in rs)
                             for k in ("decode_tps", "prefill_tps", "hit_rate", "stall_s",
                                       "bytes_rewritten", "rewrite_s", "weights_repacked_bytes")}
            for name in names:
                row = {"model": label, "rate": rate, "config": name, **med[name],
                       "decode_vs_file": med[name]["decode_tps"] / med["file"]["decode_tps"],
                       "prefill_vs_file": med[name]["prefill_tps"] / med["file"]["prefill_tps"]}
                rows.append(row)
    out = {"benchmark": "offload-repack", "cpu": cpu_model(), "threads": a.t,
           "simd": sorted({r["simd"] for r in runs}), "n_prompt": a.p, "n_gen": a.n,
           "reps": a.reps, "models": dict(models), **binary_version(a.moeflow), "medians": rows,
           "runs": runs}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    lines = [f"CPU {out['cpu']}, SIMD {'/'.join(out['simd'])}, {a.t} threads, pp{a.p} + tg{a.n}, "
             f"medians of {a.reps} interleaved reps; moeflow {out['moeflow_commit']}", "",
             "| model | cache rate | layout | prefill tok/s | decode tok/s | decode vs file | "
             "hit rate | stall s | rewritten GB | rewrite s |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['rate']} | {r['config']} | {r['prefill_tps']:.2f} | "
                     f"{r['decode_tps']:.2f} | {r['decode_vs_file']:.3f}x | {r['hit_rate']:.3f} | "
                     f"{r['stall_s']:.2f} | {r['bytes_rewritten'] / 1e9:.2f} | {r['rewrite_s']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        with open(a.report, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
