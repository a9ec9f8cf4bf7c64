#!/usr/bin/env python3
"""Offloading benchmark: decode tok/s of a Mixtral-shaped Q4_K model whose experts are >= 3x the
expert budget (--cache-rate 0.3), for
  ondemand   : LRU, no prefetch, no early preemption (every miss loaded inside acquire)
  lookahead  : + next-layer gate-lookahead prefetch (LOW)
  full       : + early preemption / reordering (routed experts raised to HIGH at route time)
and the lower bound max(compute time all-resident, missed bytes / O_DIRECT bandwidth).

usage: bench/bench_offload.py [--model M.gguf | --layers N] [--moeflow build/moeflow] [-n 16]
Writes a JSON report to stdout (and --out FILE)."""
import argparse
import json
import os
import subprocess
import sys


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeflow", default="build/moeflow")
    ap.add_argument("--model")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("-n", type=int, default=16, help="decode tokens")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--cache-rate", type=float, default=0.3)
    ap.add_argument("--io-threads", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    model = a.model
    if not model:
        model = f"/tmp/moeflow_bench_mixtral_{a.layers}l_q4k.gguf"
        if not os.path.exists(model):
            subprocess.run([a.moeflow, "gen-model", "--arch", "mixtral", "--preset", "8x7b",
                            "--layers", str(a.layers), "--type", "Q4_K", "-q", "-o", model], check=True)
    bw = run([a.moeflow, "pack", "--measure", "-m", model, "--seconds", "4",
              "--threads", str(a.io_threads)])
    base = [a.moeflow, "bench", "-m", model, "-p", "0", "-n", str(a.n), "--reps", str(a.reps),
            "--json", "-t", str(a.threads)]
    resident = run(base)
    off = ["--cache-rate", str(a.cache_rate), "--cache-policy", "lru", "--io-threads", str(a.io_threads)]
    modes = {
        "ondemand": ["--prefetch", "none", "--no-early-preemption"],
        "lookahead": ["--prefetch", "lookahead", "--no-early-preemption"],
        "full": ["--prefetch", "lookahead"],
    }
    report = {"model": model, "bandwidth": bw, "resident_decode_tps": resident["decode_tps"],
              "expert_bytes": resident["expert_bytes"], "modes": {}}
    compute_s = 1.0 / resident["decode_tps"] if resident["decode_tps"] else 0
    for name, flags in modes.items():
        r = run(base + off + flags)
        t = r["offload"]["total"]
        tpot = 1.0 / r["decode_tps"] if r["decode_tps"] else float("inf")
        # Bytes the cache had to fetch for demanded experts per token (misses + late ones).
        missed_bytes = t["bytes_read"] / a.n
        read_s = missed_bytes / (bw["read_GBps"] * 1e9)
        lower = max(compute_s, read_s)
        stall = t["stall_s"] / a.n
        report["modes"][name] = {
            "decode_tps": r["decode_tps"], "tpot_s": tpot, "lower_bound_tpot_s": lower,
            "read_s_per_token": read_s, "stall_s_per_token": stall,
            "hidden_read_fraction": max(0.0, 1 - stall / read_s) if read_s > 0 else 1.0,
            "hit_rate": t["hit_rate"], "prefetch_issued": t["prefetch_issued"],
            "prefetch_used": t["prefetch_used"], "prefetch_wasted": t["prefetch_wasted"],
            "bytes_read": t["bytes_read"], "direct_io": r["offload"]["direct_io"],
        }
    od = report["modes"]["ondemand"]["decode_tps"]
    for m in report["modes"].values():
        m["speedup_vs_ondemand"] = m["decode_tps"] / od if od else 0
    s = json.dumps(report, indent=1)
    print(s)
    if a.out:
        with open(a.out, "w") as f:
            f.write(s + "\n")


if __name__ == "__main__":
    main()
