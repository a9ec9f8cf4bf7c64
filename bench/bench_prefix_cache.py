#!/usr/bin/env python3
"""Prompt (prefix) cache benchmark: time to first token of every turn of a 10-turn chat served
by `moeflow serve` with experts offloaded (--cache-rate 0.3), with the prefix cache (the default)
and without it (--no-prefix-cache: every request prefills its whole prompt, as the server did
before the cache existed).

The model is a generated Qwen3-MoE of the 30B-A3B layer shape, cut down (GEN_ARGS: 4 layers, 32
experts of which 8 are routed, Q4_K; its size is recorded as model_bytes): its experts are 3.3x
the budget, so a prefill of the whole history reads most of them from the file every turn. The
conversation is real text: each user turn is a few sentences of the shared corpus (wikipedia),
each reply --max-tokens (16) greedy tokens; the prompt lengths per turn are in the JSON
(prompt_tokens_by_turn). TTFT is measured by the client: request sent -> first streamed text.

Each rep starts a fresh server per mode (cold expert cache, modes interleaved) and runs all ten
turns; medians over reps are reported.

usage: bench/bench_prefix_cache.py [--model M.gguf] [--moeflow build/moeflow] [--reps 3]
                                   [--turns 10] [--max-tokens 16] [--out bench/prefix-cache.json]
                                   [--report bench/REPORT-prefix-cache.md]
"""
import argparse
import http.client
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

from moeflow_version import binary_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(os.environ.get("MOEFLOW_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data")),
                      "corpus", "wikipedia_texts.txt")
GEN_ARGS = ["--arch", "qwen3moe", "--preset", "30b-a3b", "--layers", "4", "--experts", "32",
            "--vocab", "32000", "--type", "Q4_K", "--seed", "11"]


def user_turns(n, words=20):
    """n user messages of real text, ~`words` words each, from the corpus."""
    with open(CORPUS, encoding="utf-8") as f:
        text = " ".join(l.strip() for l in f.read().split("\n")[:400] if l.strip())
    w = text.split()
    return [" ".join(w[i * words:(i + 1) * words]) for i in range(n)]


def start_server(moeflow, model, extra):
    log = tempfile.NamedTemporaryFile(prefix="bench_prefix_", suffix=".log", delete=False)
    p = subprocess.Popen([moeflow, "serve", "-m", model, "--port", "0", "-c", "4096", "--cache-rate", "0.3",
                          "--alias", "bench", *extra], stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 120
    while time.time() < deadline:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log.name).read())
        if m:
            return p, int(m.group(1)), log.name
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    sys.exit("serve did not start:\n" + open(log.name).read())


def stop_server(p, log):
    p.terminate()
    p.wait(timeout=60)
    os.unlink(log)


def streamed_turn(port, messages, max_tokens):
    """One streamed chat request: (ttft_s, total_s, reply text, usage)."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"HTTP {r.status}: {r.read()[:500]}")
    ttft, text, usage = None, "", None
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text += piece
    total = time.perf_counter() - t0
    c.close()
    return ttft, total, text, usage


def chat(port, users, max_tokens):
    messages = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    turns = []
    for i, u in enumerate(users):
        messages.append({"role": "user", "content": u})
        ttft, total, text, usage = streamed_turn(port, messages, max_tokens)
        messages.append({"role": "assistant", "content": text})
        turns.append({"turn": i + 1, "prompt_tokens": usage["prompt_tokens"],
                      "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
                      "completion_tokens": usage["completion_tokens"], "ttft_s": ttft, "total_s": total,
                      "text": text})
    return turns


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    page = c.getresponse().read().decode()
    return sum(float(l.split()[-1]) for l in page.splitlines() if l.startswith(name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "prefix-cache.json"))
    ap.add_argument("--report", default=os.path.join(ROOT, "bench", "REPORT-prefix-cache.md"))
    a = ap.parse_args()
    model = a.model
    if not model:
        model = os.path.join(tempfile.gettempdir(), "moeflow_bench_prefix_qwen3moe.gguf")
        if not os.path.exists(model):
            print(f"generating {model} ...", file=sys.stderr)
            subprocess.run([a.moeflow, "gen-model", *GEN_ARGS, "-q", "-o", model], check=True,
                           stdout=subprocess.DEVNULL)
    users = user_turns(a.turns)
    modes = {"prefix-cache": [], "no-prefix-cache": ["--no-prefix-cache"]}
    runs = []
    for rep in range(a.reps):
        order = list(modes) if rep % 2 == 0 else list(reversed(modes))
        for mode in order:
            p, port, log = start_server(a.moeflow, model, modes[mode] + ["-t", str(a.threads)])
            try:
                turns = chat(port, users, a.max_tokens)
                read_mb = metric(port, "moeflow_expert_bytes_read_total") / 1e6
            finally:
                stop_server(p, log)
            runs.append({"mode": mode, "rep": rep, "expert_read_mb": read_mb, "turns": turns})
            last = turns[-1]
            print(f"rep {rep} {mode:16s} turn {last['turn']}: prompt {last['prompt_tokens']} "
                  f"(cached {last['cached_tokens']}) TTFT {last['ttft_s']*1e3:.0f} ms; "
                  f"experts read {read_mb:.0f} MB", file=sys.stderr)
    # The replies must be the same text in both modes (the cache is exact).
    texts = {m: [t["text"] for t in r["turns"]] for r in runs for m in [r["mode"]]}
    identical = len({json.dumps(v) for v in texts.values()}) == 1

    def med(mode, turn, key):
        return statistics.median(r["turns"][turn - 1][key] for r in runs if r["mode"] == mode)

    summary = {m: {"ttft_s_by_turn": [med(m, t, "ttft_s") for t in range(1, a.turns + 1)],
                   "prompt_tokens_by_turn": [med(m, t, "prompt_tokens") for t in range(1, a.turns + 1)],
                   "cached_tokens_by_turn": [med(m, t, "cached_tokens") for t in range(1, a.turns + 1)],
                   "expert_read_mb": statistics.median(r["expert_read_mb"] for r in runs if r["mode"] == m)}
               for m in modes}
    after, before = summary["prefix-cache"], summary["no-prefix-cache"]
    result = {
        **binary_version(a.moeflow),
        "model": os.path.basename(model), "model_bytes": os.path.getsize(model), "gen_model_args": GEN_ARGS if not a.model else None,
        "server": {"cache_rate": 0.3, "ctx": 4096, "threads": a.threads}, "turns": a.turns,
        "max_tokens": a.max_tokens, "reps": a.reps, "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "replies_identical_across_modes": identical,
        "turn10_ttft_s": {"no_prefix_cache": before["ttft_s_by_turn"][-1], "prefix_cache": after["ttft_s_by_turn"][-1]},
        "speedup_turn10": before["ttft_s_by_turn"][-1] / after["ttft_s_by_turn"][-1],
        "summary": summary, "runs": [{**r, "turns": [{k: v for k, v in t.items() if k != "text"} for t in r["turns"]]}
                                     for r in runs]}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("turn10_ttft_s", "speedup_turn10", "replies_identical_across_modes")}))
    if a.report:
        write_report(a, result)


def report_text(r):
    """The report, from the JSON alone (bench/render_tables.py rewrites it from
    bench/prefix-cache.json, so the two cannot disagree)."""
    s = r["summary"]
    g = r.get("gen_model_args") or []
    arg = lambda k: g[g.index(k) + 1] if k in g else "?"  # noqa: E731
    size = f"{r['model_bytes'] / 1e6:.{0 if r['model_bytes'] >= 1e7 else 1}f} MB, " if r.get("model_bytes") else ""
    model = (f"a generated Qwen3-MoE of the 30B-A3B layer shape, cut\ndown to {arg('--layers')} layers of "
             f"{arg('--experts')} experts (`gen-model {' '.join(g)}`; {size}experts" if g
             else f"`{r['model']}` ({size}experts")
    built = f" at {r['moeflow_commit']}" if r.get("moeflow_commit") else ""
    rows = "\n".join(
        f"| {t} | {s['no-prefix-cache']['prompt_tokens_by_turn'][t-1]:.0f} | "
        f"{s['prefix-cache']['cached_tokens_by_turn'][t-1]:.0f} | "
        f"{s['no-prefix-cache']['ttft_s_by_turn'][t-1]*1e3:.0f} | {s['prefix-cache']['ttft_s_by_turn'][t-1]*1e3:.0f} |"
        for t in range(1, r["turns"] + 1))
    return f"""# Prompt (prefix) cache: time to first token of a {r['turns']}-turn chat

`python3 bench/bench_prefix_cache.py --reps {r['reps']}` ({r['cpus']} CPUs, {r['machine']}): `moeflow serve
--cache-rate {r['server']['cache_rate']} -c {r['server']['ctx']}`{built} on {model}
{1 / r['server']['cache_rate']:.1f}x the budget), a {r['turns']}-turn chat of wikipedia sentences with
{r['max_tokens']}-token greedy replies. "before" is `--no-prefix-cache` (every request prefills its
whole prompt: the server's behaviour before the cache); "after" is the default. TTFT is measured
by the client (request sent -> first streamed text); medians of {r['reps']} reps, each a fresh
server per mode (cold expert cache).

| turn | prompt tokens | reused from the cache | TTFT before (ms) | TTFT after (ms) |
|---:|---:|---:|---:|---:|
{rows}

**Turn {r['turns']}: {r['turn10_ttft_s']['no_prefix_cache']*1e3:.0f} ms before, {r['turn10_ttft_s']['prefix_cache']*1e3:.0f} ms after
({r['speedup_turn10']:.1f}x).** Expert bytes read over the whole chat: {s['no-prefix-cache']['expert_read_mb']:.0f} MB before,
{s['prefix-cache']['expert_read_mb']:.0f} MB after. Replies identical in both modes:
{'yes' if r['replies_identical_across_modes'] else 'NO'} (the cache is exact: logits after a hit are bit-identical to a
cold run, tests/runtime/test_prefix_cache.cpp and tests/server/test_server_api.cpp).

Raw numbers: bench/prefix-cache.json.
"""


def write_report(a, r):
    with open(a.report, "w") as f:
        f.write("<!-- table:prefix-cache-report -->\n" + report_text(r) + "<!-- /table -->\n")


if __name__ == "__main__":
    main()
