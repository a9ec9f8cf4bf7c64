"""bench/trace_locality.py, the temporal-locality statistics of bench/REPORT-replay.md ("More
real traces"): a hand-computed three-token trace, malformed rows, and reuse@1 on the real
HumanEval trace against the simulator's per-layer LRU with k places, which hits exactly when a
routed expert was in the previous token's set at that layer.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import trace_locality as tl  # noqa: E402
from oracle_import import require  # noqa: E402
from oracle_models import moeflow_binary  # noqa: E402

SHARED = os.environ.get("MOEFLOW_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
HUMANEVAL = os.path.join(SHARED, "traces", "mixtral-8x7b-instruct_speculative-moe",
                         "routing_data_collected", "humaneval_2_routing.jsonl")


def write_rows(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def row(step, layer, experts, problem=0):
    return {"problem_id": problem, "layer": layer, "token_idx": step, "experts": experts}


def test_three_tokens_by_hand(tmp_path):
    # one layer, top-2 of 4: {0,1} -> {1,2} -> {0,3}
    p = tmp_path / "t.jsonl"
    write_rows(p, [row(0, 0, [0, 1]), row(1, 0, [1, 2]), row(2, 0, [0, 3])])
    reqs = tl.load_decode_rows(str(p))
    hits, uses, same, pairs, per_layer = tl.reuse(reqs)
    # reuse@1: step 1 finds 1 (not 2) in {0,1}, step 2 finds neither 0 nor 3 in {1,2} -> 1 of 4
    assert (hits[1], uses[1]) == (1, 4)
    assert per_layer[0] == [1, 4]
    # reuse@2: only step 2 has two previous steps; {0,1,2} holds 0, not 3 -> 1 of 2
    assert (hits[2], uses[2]) == (1, 2)
    assert (same, pairs) == (0, 2)
    s = tl.locality(reqs)
    assert s["n_experts"] == 4 and s["top_k"] == 2 and s["decode_steps"] == 3
    assert s["reuse_chance"]["1"] == pytest.approx(0.5)
    # experts 0 and 1 are used twice each, 2 and 3 once: the top two take 4 of 6 uses
    assert s["topk_share"] == pytest.approx(4 / 6)


def test_gap_in_steps_and_missing_layer_are_not_pairs(tmp_path):
    p = tmp_path / "t.jsonl"
    # step 2 lacks layer 1; steps 3 -> 5 skip step 4
    write_rows(p, [row(0, 0, [0, 1]), row(0, 1, [2, 3]), row(1, 0, [0, 1]), row(1, 1, [2, 3]),
                   row(2, 0, [0, 1]), row(3, 0, [0, 1]), row(3, 1, [2, 3]), row(5, 0, [0, 1]), row(5, 1, [2, 3])])
    hits, uses, same, pairs, _ = tl.reuse(tl.load_decode_rows(str(p)))
    # pairs: (1,0) both layers, (2,1) layer 0, (3,2) layer 0 only; every one the same set
    assert (pairs, same, hits[1], uses[1]) == (4, 4, 8, 8)


@pytest.mark.parametrize("bad, message", [
    ({"problem_id": 0, "layer": 0, "token_pos": 3, "experts": [1, 2]}, "lacks token_idx (token_pos rows are prefill"),
    ({"problem_id": 0, "layer": 0, "token_idx": 3, "experts": []}, "'experts' must be a non-empty list"),
])
def test_malformed_rows_name_the_problem(tmp_path, bad, message):
    p = tmp_path / "bad.jsonl"
    write_rows(p, [row(0, 0, [0, 1]), bad])
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_locality.py"), str(p)],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{p}:2: " in r.stderr and message in r.stderr


def test_duplicate_route_is_an_error(tmp_path):
    p = tmp_path / "dup.jsonl"
    write_rows(p, [row(0, 0, [0, 1]), row(0, 0, [2, 3])])
    with pytest.raises(SystemExit, match="layer 0 of request 0 step 0 appears twice"):
        tl.load_decode_rows(str(p))


def test_reuse1_matches_simulated_lru_with_k_places():
    binary = moeflow_binary()
    require(binary is not None, "moeflow binary not built (MOEFLOW_BINARY unset, no build*/moeflow)")
    require(os.path.exists(HUMANEVAL), f"shared HumanEval trace {HUMANEVAL} missing (../shared/data)")
    hits, uses, *_ = tl.reuse(tl.load_decode_rows(HUMANEVAL))
    out = subprocess.run([binary, "sim", "-t", HUMANEVAL, "--policy", "lru", "--predictor", "none",
                          "--cache-rate", "25", "--hw", "instant", "--json"],
                         capture_output=True, text=True, check=True)
    lru = next(r for r in json.loads(out.stdout)["results"] if r["policy"] == "lru")
    assert lru["capacity"] == 2
    # Not exact: the simulator's cache carries request 0's last experts into request 1 and, where
    # a token misses a layer, compares with the token before; the script counts neither pair.
    assert hits[1] / uses[1] == pytest.approx(lru["hit_rate"], abs=0.005)
    # and it is far from reuse@2, so the check tells the windows apart
    assert abs(hits[2] / uses[2] - lru["hit_rate"]) > 0.1
