#!/usr/bin/env python3
"""Issue 34: the live full-model replay runs next to the simulator with the disk's timing.

bench_bigger_than_ram.py compares each live run with the simulator in the logical mode (`--hw
instant`: every prefetch in time). That is exact for a cache without a predictor, but a history
predictor on a disk loses most of its prefetches to timing (a read takes ~50 ms against ~10 ms of
compute per layer), so the logical count is no model of such a run. This script replays the same
routing in the simulator with the run's own timing: a hardware profile whose read rate is the rate
the live run achieved (`achieved_read_GBps`), whose slot is the run's slot, and whose compute time
is the all-resident decode the same JSON measured (split between the two routed experts and the
rest of a layer by bytes). It prints, for every live run of the given JSONs, hit rate and bytes per
token live next to the simulator's, and writes JSON.

The routing is recorded once from a tiny model of the trace's shape (`moeflow bench
--routing-trace ... --trace-out`): a replay routes as the trace says whatever the weights, so the
recording is the full-model runs' routing.

  MOEFLOW_SHARED_DATA=../shared/data python3 bench/replay_timed_parity.py --moeflow build/moeflow \
      --out bench/replay-timed-parity.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_bigger_than_ram import cache_rate

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("MOEFLOW_SHARED_DATA", os.path.join(HERE, "..", "..", "shared", "data"))
RUNS = [os.path.join(HERE, f) for f in ("bigger-than-ram-replay-full-grid.json",
                                        "bigger-than-ram-replay-full-duoserve.json")]
# The share of an all-resident Mixtral-8x7B layer's bytes that are its two routed experts (2 x 99.1
# MB of ~212 MB: attention and router the rest): how the measured decode time is split between
# expert compute and the rest of a layer.
EXPERT_SHARE = 0.933
LATENCY_MS = 0.08  # per read set-up, as the nvme-gen4 profile


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def resolve_trace(path):
    """The JSON names the trace by the path of the machine it ran on; find it under DATA."""
    if os.path.exists(path):
        return path
    tail = path.split("/traces/", 1)[-1]
    cand = os.path.join(DATA, "traces", tail)
    if os.path.exists(cand):
        return cand
    sys.exit(f"routing trace {path} not found (set MOEFLOW_SHARED_DATA)")


def record(moeflow, trace, request, n_gen, tmp):
    """The routing of the live runs: a tiny 32-layer, 8-expert top-2 model replaying the trace
    (the model written once per directory, each routing once)."""
    model = os.path.join(tmp, "m32.gguf")
    rec = os.path.join(tmp, f"{os.path.basename(trace)}.req{request}_{n_gen}.mft")
    if os.path.exists(rec):
        return rec
    if not os.path.exists(model):
        run([moeflow, "gen-model", "--arch", "mixtral", "--preset", "tiny", "--layers", "32",
             "--experts", "8", "--expert-used", "2", "-o", model, "-q"])
    run([moeflow, "bench", "-m", model, "-p", "0", "-n", str(n_gen), "--reps", "1", "-t", "1",
         "--json", "--routing-trace", trace, "--routing-request", str(request),
         "--trace-out", rec])
    return rec


def profile(tmp, name, read_gbps, slot_bytes, compute_s_per_token, n_layers):
    layer_s = compute_s_per_token / n_layers
    p = {"name": name, "read_gb_s": read_gbps, "latency_ms": LATENCY_MS,
         "expert_bytes": slot_bytes, "expert_compute_ms": 1e3 * layer_s * EXPERT_SHARE / 2,
         "layer_ms": 1e3 * layer_s * (1 - EXPERT_SHARE), "cpu_expert_ms": 0}
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(p, f)
    return path, p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moeflow", default="build/moeflow")
    ap.add_argument("--runs", nargs="+", default=RUNS, help="bench_bigger_than_ram.py JSONs")
    ap.add_argument("--out")
    a = ap.parse_args()

    rows = []
    instant = {}  # the logical count depends on the configuration only, not on the run
    print("| run file | free RAM | configuration | read GB/s (live) | hit % live / sim timed / sim "
          "instant | MB/token live / sim timed / sim instant | timed sim vs live bytes |")
    print("|---|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for path in a.runs:
            d = json.load(open(path))
            trace = resolve_trace(d["routing_trace"])
            rec = record(a.moeflow, trace, d["routing_request"], d["n_gen"], tmp)
            m = d["models"]["mixtral"]
            info = m["info"]
            for level, lv in m["levels"].items():
                for i, r in enumerate(lv["runs"]):
                    if not r.get("ok") or not r.get("n_slots"):
                        continue
                    eng = r["engine"]
                    args = lv["candidates"].get(eng[len("moeflow-"):], [])
                    if eng != "moeflow-auto" and not eng.startswith(("moeflow-prefetch-",
                                                                      "moeflow-noprefetch")):
                        continue  # policy candidates: exact in the logical mode already
                    opt = {args[j]: args[j + 1] for j in range(len(args) - 1)
                           if args[j].startswith("--")}
                    predictor = opt.get("--prefetch", "none")
                    policy, per_layer = r["policy"], bool(r["per_layer_budget"])
                    rate = cache_rate(info, r["n_slots"])
                    hw, prof = profile(tmp, f"live-{level}-{i}", r["achieved_read_GBps"],
                                       r["slot_bytes"], m["resident"]["compute_s_per_token"],
                                       info["n_moe_layers"])

                    def simulate(h):
                        out = json.loads(run([
                            a.moeflow, "sim", "-t", rec, "--policy", policy, "--predictor",
                            predictor, "--cache-rate", repr(rate), "--hw", h, "--max-prefetch",
                            "0", "--with-prefill", "--json",
                            *([] if per_layer else ["--global-budget"])]))["results"][0]
                        reads = out["demand_loads"] + out["prefetches"]
                        return {"hit_rate": out["hit_rate"], "experts_read": reads,
                                "prefetches": out["prefetches"],
                                "late_prefetch_hits": out.get("late_prefetch_hits", 0),
                                "bytes_per_token": reads * r["slot_bytes"] / d["n_gen"]}

                    key = (rec, policy, predictor, rate, per_layer, r["slot_bytes"], d["n_gen"])
                    if key not in instant:
                        instant[key] = simulate("instant")
                    sims = {"timed": simulate(hw), "instant": instant[key]}
                    live_b = r["bytes_read_per_token"]
                    dev = sims["timed"]["bytes_per_token"] / live_b - 1
                    rows.append({"file": os.path.basename(path), "level": float(level), "rep": r["rep"],
                                 "engine": eng, "policy": policy, "predictor": predictor,
                                 "per_layer": per_layer, "places": r["n_slots"],
                                 "live": {"hit_rate": r["hit_rate"], "bytes_per_token": live_b,
                                          "read_GBps": r["achieved_read_GBps"]},
                                 "profile": prof, "sim": sims, "timed_bytes_vs_live": dev})
                    print(f"| {os.path.basename(path)} | {level} | {policy} + {predictor} "
                          f"({'per layer' if per_layer else 'one budget'}, {r['n_slots']}), rep "
                          f"{r['rep']} | {r['achieved_read_GBps']:.2f} | "
                          f"{100 * r['hit_rate']:.1f} / {100 * sims['timed']['hit_rate']:.1f} / "
                          f"{100 * sims['instant']['hit_rate']:.1f} | {live_b / 1e6:.1f} / "
                          f"{sims['timed']['bytes_per_token'] / 1e6:.1f} / "
                          f"{sims['instant']['bytes_per_token'] / 1e6:.1f} | {100 * dev:+.1f}% |")
    worst = max((abs(x["timed_bytes_vs_live"]) for x in rows), default=0)
    print(f"\nlargest |timed sim - live| bytes per token: {100 * worst:.1f}% over {len(rows)} runs")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"expert_share": EXPERT_SHARE, "latency_ms": LATENCY_MS, "runs": rows,
                       "largest_bytes_deviation": worst}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
