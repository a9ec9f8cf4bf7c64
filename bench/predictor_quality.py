#!/usr/bin/env python3
"""Issue 34: which predictor quality would bring a causal cache within 10 points of Belady.

The history predictors measured on the real Mixtral-8x7B routing (bench/REPORT-replay.md) leave
the best causal policy + predictor 14-17 points of hit rate below Belady's. This replays the same
HumanEval trace in the simulator with an imperfect oracle in their place (`moeflow sim
--predictor oracle --oracle-recall R --oracle-wrong W --oracle-lookahead D`: each expert of the
next D routes predicted with probability R, plus W experts per route it does not use), with
the logical timing the replay tables use (`--hw instant`: every prefetch arrives) and with issue
34's PCIe profile (`--hw pcie4x16`: a late prefetch is no hit) or, with `--hw disk`, this
machine's disk as the live full-model replay measured it (bench/sim/mixtral_full_disk_profile.json),
`--max-prefetch 0`, for each
cache policy at 25% and 50% of the experts. It reports the recall each policy needs at each
number of wrong guesses to come within 10 points of demand-only Belady, and where the history
predictors stand on the same map (their recall and wrong guesses per route, measured on the same
trace). Writes JSON and prints Markdown.

  python3 bench/predictor_quality.py --moeflow build/moeflow --out bench/predictor-quality.json
  python3 bench/predictor_quality.py --moeflow build/moeflow --hw disk --out bench/predictor-quality-disk.json
"""
import argparse
import json
import os
import subprocess
import sys

DATA = os.environ.get("MOEFLOW_SHARED_DATA", "../shared/data")
TRACES = os.path.join(DATA, "traces/mixtral-8x7b-instruct_speculative-moe")
TRACE = os.path.join(TRACES, "routing_data_collected/humaneval_2_routing.jsonl")
CALIB = os.path.join(TRACES, "analysis/deep_analysis/routing_raw.jsonl")
# daop: the one policy that does not admit every miss (it computes some on the CPU), so its
# link is not saturated by demand misses and prediction can pay under PCIe timing.
POLICIES = ["lru", "lfu-cycle", "moe-infinity", "daop"]
HISTORY = ["token", "duoserve", "eamc"]
RATES = [0.25, 0.5]
RECALLS = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
# instant: every prefetch arrives (the replay tables' logical mode); pcie4x16: issue 34's P7
# profile, where a prefetch issued too late is no hit; the disk profile: the read rate and compute
# time measured in the live full-model replay runs (a CPU reading misses from its SSD).
HWS = ["instant", "pcie4x16"]
DISK_PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim",
                            "mixtral_full_disk_profile.json")
WRONG = [0.0, 0.5, 1.0, 2.0]
DISTANCES = [1, 32]  # the next layer (lookahead's distance) / the next token's layers
TOP_K = 2
TARGET_POINTS = 10.0


def sim(moeflow, hw, *args):
    cmd = [moeflow, "sim", "--trace", TRACE, "--calib", CALIB, "--hw", hw,
           "--max-prefetch", "0", "--cache-rate", ",".join(str(r) for r in RATES), "--json",
           *args]
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)["results"]


def by_rate(results, policy, predictor):
    return {round(x["cache_rate"], 4): x for x in results
            if x["policy"] == policy and x["predictor"] == predictor}


def wrong_per_route(x):
    """Wrong guesses per predicted route of a measured predictor: it predicts recall x top-k
    right experts per route, which are precision of all it predicts."""
    p, r = x.get("prediction_precision", 0), x.get("prediction_recall", 0)
    return TOP_K * r * (1 - p) / p if p > 0 else None


def coverage(hit, no_prefetch_hit):
    """Share of the no-prefetch misses a predictor turned into hits (net of the hits its wrong
    guesses cost): what a prediction is worth, whereas raw recall also counts experts that were
    resident anyway."""
    return (hit - no_prefetch_hit) / (1 - no_prefetch_hit) if no_prefetch_hit < 1 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moeflow", default="build/moeflow")
    ap.add_argument("--out")
    ap.add_argument("--hw", default=",".join(HWS),
                    help="timings to sweep, comma-separated: profile names or JSON files; 'disk' "
                         f"is {os.path.relpath(DISK_PROFILE)} (default: %(default)s)")
    a = ap.parse_args()
    hws = [DISK_PROFILE if h == "disk" else h for h in a.hw.split(",")]
    label = lambda hw: "disk" if hw == DISK_PROFILE else hw

    rows, summary = [], []
    fmt = lambda v: "none" if v is None else f"{v:.1f}"
    print("| timing | policy | cache | Belady demand-only hit % | no prefetch | best history "
          "predictor: hit %, raw recall, wrong/route, misses covered | oracle recall needed for "
          "Belady - 10, at 0 / 0.5 / 1 / 2 wrong per route: next layer | the same, next token "
          "(32 layers ahead) | misses covered there (next token) | perfect oracle, next layer / next "
          "token: hit % |")
    print("|---|---|---:|---:|---:|---|---|---|---|---|")
    for hw in hws:
        belady = by_rate(sim(a.moeflow, hw, "--policy", "belady"), "belady", "none")
        for pol in POLICIES:
            base = by_rate(sim(a.moeflow, hw, "--policy", pol), pol, "none")
            hist = {pr: by_rate(sim(a.moeflow, hw, "--policy", pol, "--predictor", pr), pol, pr)
                    for pr in HISTORY}
            grid = {}
            for d in DISTANCES:
                for w in WRONG:
                    for rec in RECALLS:
                        grid[(d, w, rec)] = by_rate(sim(
                            a.moeflow, hw, "--policy", pol, "--predictor", "oracle",
                            "--oracle-lookahead", str(d), "--oracle-recall", str(rec),
                            "--oracle-wrong", str(w)), pol, "oracle")
            for rate in RATES:
                bel, nop = belady[rate]["hit_rate"], base[rate]["hit_rate"]
                for (d, w, rec), res in grid.items():
                    x = res[rate]
                    rows.append({"hw": label(hw), "policy": pol, "predictor": "oracle", "distance": d,
                                 "wrong": w, "recall": rec, "cache_rate": rate,
                                 "hit_rate": x["hit_rate"],
                                 "covered": coverage(x["hit_rate"], nop),
                                 "experts_read": x["demand_loads"] + x["prefetches"],
                                 "belady_hit_rate": bel, "no_prefetch_hit_rate": nop})
                hrows = []
                for pr, res in hist.items():
                    x = res[rate]
                    hrows.append({"hw": label(hw), "policy": pol, "predictor": pr, "cache_rate": rate,
                                  "hit_rate": x["hit_rate"],
                                  "covered": coverage(x["hit_rate"], nop),
                                  "experts_read": x["demand_loads"] + x["prefetches"],
                                  "recall": x.get("prediction_recall"),
                                  "precision": x.get("prediction_precision"),
                                  "wrong": wrong_per_route(x),
                                  "belady_hit_rate": bel, "no_prefetch_hit_rate": nop})
                rows += hrows
                need, cov = {}, {}
                for d in DISTANCES:
                    need[d], cov[d] = [], []
                    for w in WRONG:
                        ok = [(rec, grid[(d, w, rec)][rate]) for rec in RECALLS
                              if grid[(d, w, rec)][rate]["hit_rate"] >= bel - TARGET_POINTS / 100]
                        if ok:
                            rec, x = min(ok, key=lambda o: o[0])
                            need[d].append(rec)
                            cov[d].append(coverage(x["hit_rate"], nop))
                        else:
                            need[d].append(None)
                            cov[d].append(None)
                best = max(hrows, key=lambda r: r["hit_rate"])
                pct = lambda v: None if v is None else 100 * v
                print(f"| {label(hw)} | {pol} | {rate:.0%} | {100 * bel:.1f} | {100 * nop:.1f} | "
                      f"{best['predictor']}: {100 * best['hit_rate']:.1f}, "
                      f"{100 * best['recall']:.0f}%, {best['wrong']:.2f}, "
                      f"{100 * best['covered']:.1f}% | "
                      f"{' / '.join(fmt(pct(v)) for v in need[1])} | "
                      f"{' / '.join(fmt(pct(v)) for v in need[32])} | "
                      f"{' / '.join(fmt(pct(v)) for v in cov[32])} | "
                      f"{100 * grid[(1, 0.0, 1.0)][rate]['hit_rate']:.1f} / "
                      f"{100 * grid[(32, 0.0, 1.0)][rate]['hit_rate']:.1f} |")
                summary.append({"hw": label(hw), "policy": pol, "cache_rate": rate,
                                "belady_hit_rate": bel, "no_prefetch_hit_rate": nop,
                                "best_history": best,
                                "recall_needed": {str(d): dict(zip([str(w) for w in WRONG], need[d]))
                                                  for d in DISTANCES},
                                "covered_at_need": {str(d): dict(zip([str(w) for w in WRONG], cov[d]))
                                                    for d in DISTANCES}})
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"trace": TRACE, "calibration": CALIB, "hws": [label(h) for h in hws], "top_k": TOP_K,
                       "max_prefetch": 0, "target_points": TARGET_POINTS, "summary": summary,
                       "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
