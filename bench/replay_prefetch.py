#!/usr/bin/env python3
"""Issue 34: the live engine under a replayed routing next to the simulator, prefetching on.

For each request, cache size, eviction policy and history predictor: `moeflow bench` replays the
request's decode rows on a 32-layer, 8-expert, top-2 model (the Mixtral-8x7B trace's shape)
with --prefetch-wait (every prefetch read before the next layer routes) and records the routing
it ran; `moeflow sim --hw instant --max-prefetch 0` replays that recording with the live cache's
exact place count. Both count logically (hits, misses, experts read), so the machine's load does
not matter. Belady's row is the simulator's, demand only. Writes JSON and prints Markdown.

  python3 bench/replay_prefetch.py --moeflow build/moeflow --out bench/replay-prefetch.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TRACE = os.path.join(os.environ.get("MOEFLOW_SHARED_DATA", "../shared/data"),
                     "traces/mixtral-8x7b-instruct_speculative-moe/routing_data_collected/"
                     "humaneval_2_routing.jsonl")
POLICIES = ["lru", "lfu", "lfu-cycle", "moe-infinity", "hobbit"]
PREDICTORS = ["none", "token", "duoserve", "eamc"]
REQUESTS = [(1, 96), (0, 83)]  # (request, decode rows: its first 96; all 83 of request 0)
RATES = [0.25, 0.5]
# The simulator's expert size (trace/hw_profile.cpp: a Mixtral-8x7B expert at ~4.5 bits).
EXPERT_MB = 3.0 * 4096 * 14336 * 4.5 / 8 / 1e6


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    try:  # sim prints one JSON document; bench's is the last line
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeflow", default="build/moeflow")
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--out", default="bench/replay-prefetch.json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="replay_prefetch_")
    model = os.path.join(tmp, "m32.gguf")
    subprocess.run([a.moeflow, "gen-model", "--arch", "mixtral", "--preset", "tiny", "--layers",
                    "32", "--experts", "8", "--expert-used", "2", "-o", model, "-q"], check=True,
                   capture_output=True)
    rec = os.path.join(tmp, "rec.mft")
    rows = []
    slot_bytes = None
    for req, n in REQUESTS:
        for rate in RATES:
            places = round(rate * 256)
            for pol in POLICIES:
                for pred in PREDICTORS:
                    if slot_bytes is None:
                        j = run([a.moeflow, "bench", "-m", model, "-p", "0", "-n", "1", "--reps",
                                 "1", "-t", "1", "--json", "--cache-rate", "0.5",
                                 "--prefetch", "none"])
                        slot_bytes = j["offload"]["slot_bytes"]
                    live = run([a.moeflow, "bench", "-m", model, "-p", "0", "-n", str(n),
                                "--reps", "1", "-t", "1", "--json", "--routing-trace", a.trace,
                                "--routing-request", str(req), "--expert-cache",
                                str(places * slot_bytes), "--cache-policy", pol, "--prefetch",
                                pred, "--trace-out", rec] +
                               (["--prefetch-wait"] if pred != "none" else []))
                    o = live["offload"]
                    assert o["n_slots"] == places, o["n_slots"]
                    t = o["total"]
                    w = ["--hobbit-weights", "0.4,0.3,0.1,0.2"] if pol == "hobbit" else []
                    sim = run([a.moeflow, "sim", "-t", rec, "--policy", pol, "--predictor", pred,
                               "--cache-rate", str(places / 256), "--global-budget", "--hw",
                               "instant", "--max-prefetch", "0", "--json"] + w)["results"][0]
                    row = {
                        "request": req, "tokens": n, "rate": rate, "places": places,
                        "policy": pol, "predictor": pred,
                        "live_hit_rate": t["hits"] / (t["hits"] + t["misses"] + t["late"]),
                        "live_reads": t["chunks_read"] // 3,
                        "live_prefetches": t["prefetch_issued"],
                        "live_prefetch_used": t["prefetch_used"],
                        "sim_hit_rate": sim["hit_rate"],
                        "sim_reads": sim["demand_loads"] + sim["prefetches"],
                        "sim_prefetches": sim["prefetches"],
                        "sim_prefetch_used": sim["prefetch_used"],
                    }
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
            bel = run([a.moeflow, "sim", "-t", rec, "--policy", "belady", "--predictor", "none",
                       "--cache-rate", str(places / 256), "--global-budget", "--hw", "instant",
                       "--json"])["results"]
            bel = [r for r in bel if r["policy"] == "belady"][0]
            rows.append({"request": req, "tokens": n, "rate": rate, "places": places,
                         "policy": "belady", "predictor": "none",
                         "sim_hit_rate": bel["hit_rate"],
                         "sim_reads": bel["demand_loads"] + bel["prefetches"]})
    with open(a.out, "w") as f:
        json.dump({"trace": os.path.basename(a.trace), "expert_mb": EXPERT_MB, "rows": rows}, f,
                  indent=1)
    for req, n in REQUESTS:
        for rate in RATES:
            print(f"\n**Request {req} ({n} decode tokens), {int(rate * 100)}% of the experts "
                  f"({round(rate * 256)} places)**\n")
            print("| policy | predictor | live hit % | sim hit % | live MB/token | "
                  "sim MB/token | prefetches live / sim | used live / sim |")
            print("|---|---|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                if r["request"] != req or r["rate"] != rate:
                    continue
                mb = lambda k: r[k] / n * EXPERT_MB
                if r["policy"] == "belady":
                    print(f"| belady | none | | {100 * r['sim_hit_rate']:.1f} | | "
                          f"{mb('sim_reads'):.0f} | | |")
                    continue
                print(f"| {r['policy']} | {r['predictor']} | {100 * r['live_hit_rate']:.1f} | "
                      f"{100 * r['sim_hit_rate']:.1f} | {mb('live_reads'):.0f} | "
                      f"{mb('sim_reads'):.0f} | {r['live_prefetches']} / {r['sim_prefetches']} | "
                      f"{r['live_prefetch_used']} / {r['sim_prefetch_used']} |")


if __name__ == "__main__":
    main()
