"""bench/replay_timed_parity.py: the simulator, given the disk's timing as each live full-model
replay run measured it, counts what the live engine read (issue 34's "live within 5% of the
simulator for the same configuration", with history predictors on). The live figures are the
recorded runs of bench/bigger-than-ram-replay-full-{grid,duoserve}.json; the routing is recorded
afresh from a tiny model replaying the same HumanEval trace.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_import import require  # noqa: E402
from oracle_models import moeflow_binary  # noqa: E402

SHARED = os.environ.get("MOEFLOW_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
HUMANEVAL = os.path.join(SHARED, "traces", "mixtral-8x7b-instruct_speculative-moe",
                         "routing_data_collected", "humaneval_2_routing.jsonl")


def test_timed_simulator_within_5_percent_of_live_runs(tmp_path):
    binary = moeflow_binary()
    require(binary is not None, "moeflow binary not built (MOEFLOW_BINARY unset, no build*/moeflow)")
    require(os.path.exists(HUMANEVAL), f"shared HumanEval trace {HUMANEVAL} missing (../shared/data)")
    out = tmp_path / "parity.json"
    env = dict(os.environ, MOEFLOW_SHARED_DATA=SHARED)
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "replay_timed_parity.py"),
                    "--moeflow", binary, "--out", str(out)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    rows = json.loads(out.read_text())["runs"]
    predicted = [r for r in rows if r["predictor"] not in ("none", "eamc")]
    # both JSONs, both levels: 6 DuoServe runs and 2 token-predictor runs (eamc predicts nothing
    # from a single request: no library of earlier ones)
    assert len(predicted) == 8, [r["engine"] for r in rows]
    for r in rows:
        live, timed = r["live"], r["sim"]["timed"]
        what = f"{r['file']} {r['level']} {r['engine']} rep {r['rep']}"
        assert abs(timed["bytes_per_token"] / live["bytes_per_token"] - 1) <= 0.05, what
        assert abs(timed["hit_rate"] - live["hit_rate"]) <= 0.015, what
        if r["predictor"] in ("none", "eamc"):  # nothing prefetched: the count is exact
            assert timed["bytes_per_token"] == live["bytes_per_token"], what
    # the logical count (every prefetch in time) is no model of a predictor on a disk: it reads
    # 6-34% more than these runs did
    for r in predicted:
        assert r["sim"]["instant"]["bytes_per_token"] > 1.05 * r["live"]["bytes_per_token"], \
            r["engine"]
