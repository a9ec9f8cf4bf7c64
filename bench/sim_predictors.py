#!/usr/bin/env python3
"""The learned-predictor evaluation of docs/simulator.md ("Live traces and learned predictors,
measured on the demo model"), as data: bench/sim/demo_predictors.json.

Held-out prompts for the demo model (it trained on all but the last 5% of each corpus file):
the evaluation set is the last 40 lines of >= 80 characters of each corpus file, the ProMoE
training set the 200 such lines before those, both cut at 300 bytes. The script records the
routing of both (`moeflow trace`), trains ProMoE's predictor at stride 1 and 2
(`moeflow train-predictor`, its held-out recall parsed from its output), and replays the
evaluation trace in the simulator with LRU per layer at 25% and 50% for every predictor, with
the demo-sized profile bench/sim/demo_local_profile.json. Everything here is deterministic
(greedy decode, seeded training, a simulator): it needs no quiet machine.

usage: python3 bench/sim_predictors.py [--moeflow build/moeflow] [--work /tmp/moeflow_sim_pred]
                                       [--out bench/sim/demo_predictors.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

from moeflow_version import binary_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("MOEFLOW_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def held_out(select: str) -> bytes:
    """The documented shell pipeline, per corpus file: non-blank lines of >= 80 characters
    (awk's length), `select` of them, cut at 300 bytes (kept as shell so that the prompts are
    byte for byte the ones docs/simulator.md lists)."""
    files = " ".join(f"'{f}'" for f in sorted(glob.glob(os.path.join(SHARED, "corpus", "*.txt"))))
    script = (f"for f in {files}; do grep -v '^\\s*$' \"$f\" | awk 'length($0) >= 80' | {select} | "
              "cut -c1-300; done")
    return subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout


def sh(cmd: list, stdout_only: bool = False) -> str:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    return p.stdout if stdout_only else p.stdout + p.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo-moe.gguf"))
    ap.add_argument("--work", default="/tmp/moeflow_sim_pred")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "sim", "demo_predictors.json"))
    ap.add_argument("--fresh", action="store_true", help="record the traces again even if --work has them")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    mf, w = a.moeflow, a.work
    sets = {"eval": held_out("tail -n 40"), "train": held_out("tail -n 240 | head -n 200")}
    for name, text in sets.items():
        path = os.path.join(w, f"{name}.txt")
        if not os.path.exists(path) or open(path, "rb").read() != text:
            with open(path, "wb") as f:
                f.write(text)
    # The traces take the longest; one left in --work by an earlier run of the same prompts is
    # reused (--fresh records them again).
    for name, extra in (("eval", ["--routers"]), ("train", [])):
        mft = f"{w}/{name}.mft"
        if a.fresh or not os.path.exists(mft) or os.path.getmtime(mft) < os.path.getmtime(f"{w}/{name}.txt"):
            sh([mf, "trace", "-m", a.model, "--prompts", f"{w}/{name}.txt", "-o", mft + ".part", "-n", 48,
                "--hidden", *extra])
            os.replace(mft + ".part", mft)
    recall = {}
    for stride in (1, 2):
        out = sh([mf, "train-predictor", "-t", f"{w}/train.mft", "-o", f"{w}/promoe{stride}.bin", "--epochs", 20,
                  "--stride", stride], stdout_only=True)
        j = json.loads(out.strip().splitlines()[-1])
        recall[str(stride)] = {"held_out_recall": j["test_recall"], "train_recall": j["train_recall"],
                               "untrained_recall": j["test_recall_untrained"], "chance_recall": j["chance_recall"],
                               "train_samples": j["train_samples"], "test_samples": j["test_samples"]}
    profile = os.path.join(ROOT, "bench", "sim", "demo_local_profile.json")
    rows = {}
    for name, extra in (("none", ["--predictor", "none"]), ("gate", ["--predictor", "gate"]),
                        ("token", ["--predictor", "token"]),
                        ("promoe1", ["--predictor", "promoe", "--predictor-model", f"{w}/promoe1.bin"]),
                        ("promoe2", ["--predictor", "promoe", "--predictor-model", f"{w}/promoe2.bin"]),
                        ("oracle", ["--predictor", "oracle"])):
        out = sh([mf, "sim", "--trace", f"{w}/eval.mft", "--policy", "lru", *extra, "--cache-rate", "0.25,0.5",
                  "--hw", profile, "--json", "--per-layer"], stdout_only=True)
        rows[name] = json.loads(out[out.index("{"):])["results"]
    res = {**binary_version(mf), "model": os.path.relpath(a.model, ROOT), "prompts": {k: len(v.splitlines()) for k, v in sets.items()},
           "train_predictor": recall, "sim": rows}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: [(r["policy"], r["predictor"], r["cache_rate"], round(r["hit_rate"], 4)) for r in v]
                      for k, v in rows.items()}))


if __name__ == "__main__":
    main()
