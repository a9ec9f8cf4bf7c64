#!/usr/bin/env python3
"""Constrained decoding speed: requests with response_format json_schema against the same
requests without it, interleaved on one `moeflow serve` process.

One server (one engine, one process) so that both sides share the process, its caches and the
machine's state; per rep the two requests run back to back, their order alternating between reps
(drift on a shared machine hits both sides alike). Each request: /v1/completions, the same
prompt, seed, temperature and max_tokens, ignore_eos (the plain side never stops early);
constrained adds response_format json_schema with bench/grammar_schema.json (records of objects
with strings, numbers, enums, nested arrays: every kind of state the masks meet), which asks for
at least 40 records so that it never completes before max_tokens either: both sides time the
same number of tokens. A request's decode speed is read from the server's own counters
(/metrics: moeflow_generated_tokens_total and moeflow_decode_seconds_total, the time from the
first token to the last, sampling and the grammar included) before and after it.

Reported: the median decode tok/s of each side, and the median over reps of the per-rep ratio
constrained / plain (the issue's target: >= 0.9).

Models: the demo model (models/demo-moe.gguf, 4096-token byte-level BPE) and --mixtral, a
4-layer Mixtral-8x7B-shaped model (32000-token SentencePiece vocabulary with byte fallback)
written by `moeflow gen-model` and cached in /tmp as bench_engine.py caches it.

usage: bench/bench_grammar.py [--moeflow build/moeflow] [--model M.gguf | --mixtral]
                              [-n 256] [--reps 15] [-t 1] [--schema S.json] [--out F.json]
One JSON object on stdout (and --out); a summary line on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moeflow_version import binary_version  # noqa: E402
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = os.path.join(ROOT, "bench", "grammar_schema.json")
PROMPT = "Here is the inventory as JSON:\n"


def ensure_mixtral(a) -> str:
    path = "/tmp/moeflow_bench_mixtral_4l_q4k.gguf"
    if not os.path.exists(path):
        tmp = f"{path}.part{os.getpid()}"
        print(f"generating {path} (once; cached) ...", file=sys.stderr)
        subprocess.run([a.moeflow, "gen-model", "--arch", "mixtral", "--preset", "8x7b", "--layers", "4",
                        "--type", "Q4_K", "-q", "-t", str(a.threads), "-o", tmp],
                       check=True, stdout=subprocess.DEVNULL)
        os.replace(tmp, path)
    return path


def start_server(a, model: str, ctx: int):
    log = tempfile.NamedTemporaryFile(prefix="moeflow_bench_grammar_", suffix=".log", delete=False)
    proc = subprocess.Popen([a.moeflow, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0",
                             "-t", str(a.threads), "-c", str(ctx)], stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log.name).read())
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}", log.name
        time.sleep(0.1)
    proc.kill()
    sys.exit("serve did not start:\n" + open(log.name).read())


def counters(url: str) -> tuple[float, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode()
    get = lambda name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))
    return get("moeflow_generated_tokens_total"), get("moeflow_decode_seconds_total")


def request(url: str, a, seed: int, schema) -> dict:
    body = {"prompt": PROMPT, "max_tokens": a.n, "seed": seed, "temperature": a.temp, "ignore_eos": True}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "inventory", "schema": schema}}
    t0, d0 = counters(url)
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as resp:
        choice = json.load(resp)["choices"][0]
    t1, d1 = counters(url)
    n = t1 - t0
    return {"n_generated": n, "decode_s": d1 - d0, "decode_tps": (n - 1) / (d1 - d0),
            "finish_reason": choice["finish_reason"], "head": choice["text"][:80]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo-moe.gguf"))
    ap.add_argument("--mixtral", action="store_true", help="the 4-layer Mixtral-8x7B shape instead")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--schema", default=SCHEMA, help="the JSON schema of the constrained side")
    ap.add_argument("--out")
    a = ap.parse_args()
    model = ensure_mixtral(a) if a.mixtral else a.model
    schema = json.load(open(a.schema))
    proc, url, log = start_server(a, model, a.n + 64)
    rows = {"plain": [], "constrained": []}
    try:
        request(url, a, 1, None)  # warm-up: first-request costs (the vocabulary's trie) on neither side
        request(url, a, 1, schema)
        for rep in range(a.reps):
            order = ["plain", "constrained"] if rep % 2 == 0 else ["constrained", "plain"]
            for side in order:
                rows[side].append(request(url, a, 100 + rep, schema if side == "constrained" else None))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        os.unlink(log)
    med = {side: statistics.median(r["decode_tps"] for r in rs) for side, rs in rows.items()}
    ratios = [c["decode_tps"] / p["decode_tps"] for p, c in zip(rows["plain"], rows["constrained"])]
    result = {
        "model": os.path.basename(model), "schema": os.path.relpath(a.schema, ROOT), "n": a.n, "reps": a.reps, "threads": a.threads, "temp": a.temp,
        "median_decode_tps": med,
        "ratio_of_medians": med["constrained"] / med["plain"],
        "median_ratio": statistics.median(ratios),
        "ratios": ratios,
        "runs": rows,
        **binary_version(a.moeflow),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
    }
    print(f"{result['model']}: decode tok/s plain {med['plain']:.1f}, constrained {med['constrained']:.1f}; "
          f"median per-rep ratio {result['median_ratio']:.3f} (ratio of medians {result['ratio_of_medians']:.3f})",
          file=sys.stderr)
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
