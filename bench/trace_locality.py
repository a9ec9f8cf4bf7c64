#!/usr/bin/env python3
"""Temporal locality of a recorded routing trace (speculative-moe JSONL, decode rows), next to
what uniform random routing would give: the statistics behind "consecutive tokens reuse experts
far more often than chance" (bench/REPORT-replay.md, "More real traces").

Per trace, over every (decode token, layer) whose previous token at that layer is recorded:
  reuse@w   share of expert uses whose expert the same request used at that layer in one of the
            w previous tokens (chance: 1 - (1 - k/n)^w, each token an independent uniform
            k-subset of n experts). reuse@1 is what a per-layer LRU cache of k places hits.
  same set  share of (token, layer) routed to exactly the previous token's experts (chance
            1 / C(n, k)).
  shuffled  reuse@w with each request's decode steps put in a random order per layer (mean of
            20 seeded shuffles): the same expert frequencies without the temporal order, so the
            gap to it is locality in time, not skew.
  top-k share  share of a layer's uses that go to its k most used experts over the whole trace
            (frequency skew, which LFU and static placement exploit; chance k/n).
Requests are problem_id; decode step is token_idx (prefill rows, token_pos, are not decode).

usage: python3 bench/trace_locality.py TRACE.jsonl [...] [--json]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter, defaultdict

WINDOWS = (1, 2, 4, 8)


def load_decode_rows(path: str) -> dict:
    """{request: {step: {layer: tuple(experts)}}} from speculative-moe JSONL decode rows."""
    reqs: dict = defaultdict(lambda: defaultdict(dict))
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{no}: not JSON ({e.msg})")
            missing = [k for k in ("problem_id", "layer", "token_idx", "experts") if k not in row]
            if missing:
                hint = " (token_pos rows are prefill; this tool reads decode rows)" if "token_pos" in row else ""
                sys.exit(f"{path}:{no}: row lacks {', '.join(missing)}{hint}")
            experts = row["experts"]
            if not isinstance(experts, list) or not experts or not all(isinstance(e, int) and e >= 0 for e in experts):
                sys.exit(f"{path}:{no}: 'experts' must be a non-empty list of expert ids, got {experts!r}")
            step = reqs[row["problem_id"]][row["token_idx"]]
            if row["layer"] in step:
                sys.exit(f"{path}:{no}: layer {row['layer']} of request {row['problem_id']} "
                         f"step {row['token_idx']} appears twice")
            step[row["layer"]] = tuple(experts)
    if not reqs:
        sys.exit(f"{path}: no routing rows")
    return reqs


def shuffled(reqs: dict, seed: int) -> dict:
    """The trace with each request's sets at each layer permuted across its decode steps."""
    rng = random.Random(seed)
    out: dict = {}
    for q, r in reqs.items():
        out[q] = {t: {} for t in r}
        for layer in {l for s in r.values() for l in s}:
            steps = [t for t in sorted(r) if layer in r[t]]
            sets = [r[t][layer] for t in steps]
            rng.shuffle(sets)
            for t, e in zip(steps, sets):
                out[q][t][layer] = e
    return out


def reuse(reqs: dict) -> tuple:
    """(hits, uses) per window, (same, pairs), per-layer reuse@1 [hits, uses]."""
    hits = {w: 0 for w in WINDOWS}
    uses = {w: 0 for w in WINDOWS}
    same = pairs = 0
    per_layer = defaultdict(lambda: [0, 0])
    for r in reqs.values():
        order = sorted(r)
        for i, t in enumerate(order):
            for layer, cur in r[t].items():
                # pairs need the previous decode step with this layer recorded
                if i == 0 or order[i] - order[i - 1] != 1 or layer not in r[order[i - 1]]:
                    continue
                # the sets of the w previous decode steps of this request that recorded this layer
                prev = [r[order[j]][layer] for j in range(i - 1, max(-1, i - 1 - max(WINDOWS)), -1)
                        if layer in r[order[j]]]
                for w in WINDOWS:
                    if len(prev) < w:
                        continue
                    seen = set().union(*prev[:w])
                    hits[w] += sum(e in seen for e in cur)
                    uses[w] += len(cur)
                pairs += 1
                same += set(cur) == set(prev[0])
                per_layer[layer][0] += sum(e in prev[0] for e in cur)
                per_layer[layer][1] += len(cur)
    return hits, uses, same, pairs, per_layer


def locality(reqs: dict) -> dict:
    layers = sorted({l for r in reqs.values() for s in r.values() for l in s})
    k = max(len(e) for r in reqs.values() for s in r.values() for e in s.values())
    n = 1 + max(x for r in reqs.values() for s in r.values() for e in s.values() for x in e)
    freq = defaultdict(Counter)
    steps = routes = 0
    for r in reqs.values():
        steps += len(r)
        for st in r.values():
            for layer, cur in st.items():
                routes += 1
                freq[layer].update(cur)
    hits, uses, same, pairs, per_layer = reuse(reqs)
    n_shuffles = 20
    sh = {w: 0.0 for w in WINDOWS}
    for seed in range(n_shuffles):
        h, u, _, _, _ = reuse(shuffled(reqs, seed))
        for w in WINDOWS:
            sh[w] += h[w] / u[w] / n_shuffles if u[w] else 0.0
    top_share = []
    for layer in layers:
        c = freq[layer]
        top_share.append(sum(v for _, v in c.most_common(k)) / sum(c.values()))
    pl = {l: h / u for l, (h, u) in per_layer.items() if u}
    lo, hi = min(pl, key=pl.get), max(pl, key=pl.get)
    return {
        "requests": len(reqs), "decode_steps": steps, "layers": len(layers), "n_experts": n, "top_k": k,
        "routes": routes, "missing_routes": steps * len(layers) - routes,
        "reuse": {str(w): hits[w] / uses[w] for w in WINDOWS if uses[w]},
        "reuse_chance": {str(w): 1 - (1 - k / n) ** w for w in WINDOWS},
        "reuse_shuffled": {str(w): sh[w] for w in WINDOWS if uses[w]},
        "same_set": same / pairs if pairs else 0.0, "same_set_chance": 1 / math.comb(n, k),
        "reuse1_min_layer": [lo, pl[lo]], "reuse1_max_layer": [hi, pl[hi]],
        "topk_share": sum(top_share) / len(top_share), "topk_share_chance": k / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args()
    out = {p: locality(load_decode_rows(p)) for p in a.traces}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for p, s in out.items():
        print(f"{p}: {s['requests']} requests, {s['decode_steps']} decode steps, {s['layers']} layers, "
              f"top-{s['top_k']} of {s['n_experts']}, {s['missing_routes']} routes missing")
        print("  reuse@w (measured / shuffled / chance): " + ", ".join(
            f"w={w}: {s['reuse'][str(w)]:.3f} / {s['reuse_shuffled'][str(w)]:.3f} / {s['reuse_chance'][str(w)]:.3f}"
            for w in WINDOWS if str(w) in s["reuse"]))
        print(f"  same set as previous token: {s['same_set']:.3f} / {s['same_set_chance']:.3f}")
        print(f"  reuse@1 by layer: min {s['reuse1_min_layer'][1]:.3f} (layer {s['reuse1_min_layer'][0]}), "
              f"max {s['reuse1_max_layer'][1]:.3f} (layer {s['reuse1_max_layer'][0]})")
        print(f"  top-{s['top_k']} experts' share of a layer's uses: "
              f"{s['topk_share']:.3f} / {s['topk_share_chance']:.3f}")


if __name__ == "__main__":
    main()
