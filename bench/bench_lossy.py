#!/usr/bin/env python3
"""Lossy expert modes benchmark (mixed-precision issue): what each opt-in lossy mode gains in
bytes read and decode speed, and what it costs in accuracy, at expert budgets of 25% and 50%.

Models
  demo     models/demo-moe.gguf (trained, F16 experts, real text) packed with --low Q4_0;
           thresholds for `hobbit (calibrated)` come from `moeflow calibrate` on the first 40 kB
           of the Wikipedia corpus for a 1% perplexity target; accuracy is measured on its
           last 80 kB (disjoint).
  mixtral  random-weight models of the exact Mixtral-8x7B layer shape: 2 layers of Q4_K with
           --low Q2_K copies (KL; random weights have no meaningful perplexity), and 1 layer of
           F16 with --low Q4_0 copies (HOBBIT's setting; decode speed with O_DIRECT, where a
           Mixtral-sized miss is bandwidth-bound while the demo's 200 kB experts are not).

Speed and bytes (demo): `moeflow run -n 200 --temp 0` with the budget (200 decode tokens: the
cold-cache start weighs less than in shorter runs; the demo's context is 256), every mode once per rep
in a fresh process, modes interleaved, medians over --reps. Bytes per token = all expert bytes
read (misses and prefetches, both precisions) / (prompt + generated tokens).
Accuracy: `moeflow perplexity -b 1` (one token per step, so the cache-aware modes decide as in
decode) with the same budget, against the logits of the exact run (`--kl-divergence`).
Mixtral Q4_K: perplexity runs (-c 64, 4 chunks, -b 1, --buffered-io: the page cache as the slow
tier keeps the run short; the bytes are the same) give KL and bytes per token. Mixtral F16:
`moeflow run -n 64` (--random-tokens) per mode and rep, interleaved, medians over --reps-random
(default 5; 2 reps of 8 tokens carried the first F16 speed-ups, too few to tell noise from gain).

usage: bench/bench_lossy.py [--moeflow build/moeflow] [--reps 5] [--reps-random 5] [--random-tokens 64]
                            [--no-mixtral]
                            [--out F.json] [--report F.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from moeflow_version import binary_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "wikipedia_texts.txt")
PROMPT = "The history of the city begins in the early middle ages, when"
RATES = (0.25, 0.5)
DEMO_DECODE_TOKENS = 200


def sh(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stderr[-3000:]}")
    return p


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


# DAOP's stale-input pre-calculation on exact experts: while a layer waits for a read, the next
# layer's predicted resident experts run on this layer's input.
PRECALC_MODE = {"name": "precalc (exact experts, stale input)", "args": ["--mode", "exact", "--precalc"]}


def demo_modes(t1, t2):
    return [
        {"name": "exact", "args": ["--mode", "exact"]},
        {"name": "hobbit (T1 0.6, T2 0.9)", "args": ["--mode", "hobbit"]},
        {"name": f"hobbit (calibrated: T1 {t1:g}, T2 {t2:g})",
         "args": ["--mode", "hobbit", "--hobbit-t1", str(t1), "--hobbit-t2", str(t2)], "calibrated": True},
        {"name": f"hobbit-all (T1 {t1:g}, T2 {t2:g})",
         "args": ["--mode", "hobbit-all", "--hobbit-t1", str(t1), "--hobbit-t2", str(t2)]},
        {"name": "skip 0.1", "args": ["--mode", "skip", "--skip-threshold", "0.1"]},
        {"name": "daop", "args": ["--mode", "daop"]},
        PRECALC_MODE,
    ]


def run_decode(mf, model, rate, m, threads):
    p = sh([mf, "run", "-m", model, "-p", PROMPT, "-n", DEMO_DECODE_TOKENS, "--temp", 0, "-t", threads,
            "--cache-rate", rate, "--stats", "json", *m["args"]])
    j = last_json(p.stderr)
    o = j["offload"]
    t = o["total"]
    n = j["n_prompt"] + j["n_generated"]
    return {"decode_tps": j["decode_tps"], "bytes_per_token": t["bytes_read"] / n,
            "bytes_low_per_token": t.get("bytes_read_low", 0) / n, "hit_rate": t["hit_rate"],
            "stall_ms_per_token": 1e3 * t["stall_s"] / n, "uses": o.get("uses")}


def run_ppl(mf, model, text, ctx, chunks, base, extra, threads):
    p = sh([mf, "perplexity", "-m", model, "-f", text, "-c", ctx, "--chunks", chunks, "-t", threads,
            "--json", *extra] + (["--kl-divergence", base] if base else []))
    return last_json(p.stdout)


def median_of(rows, key):
    return statistics.median(r[key] for r in rows)


def demo_part(a, work):
    mf = a.moeflow
    model = os.path.join(work, "demo-q4.gguf")
    sh([mf, "pack", "-m", os.path.join(ROOT, "models", "demo-moe.gguf"), "-o", model, "--low", "Q4_0"])
    with open(CORPUS, "rb") as f:
        data = f.read()
    calib, ppl_text = os.path.join(work, "calib.txt"), os.path.join(work, "ppl.txt")
    with open(calib, "wb") as f:
        f.write(data[:40000])
    with open(ppl_text, "wb") as f:
        f.write(data[-80000:])
    t0 = time.time()
    cal = last_json(sh([mf, "calibrate", "-m", model, "-f", calib, "-c", 128, "--chunks", 16,
                        "-t", a.threads, "--json"]).stdout)
    print(f"calibrate: T1 {cal['t1']} T2 {cal['t2']} ({time.time() - t0:.0f} s)", file=sys.stderr)
    modes = demo_modes(cal["t1"], cal["t2"])
    exact_logits = os.path.join(work, "demo-exact.logits")
    ctx, chunks = 128, a.chunks
    base = run_ppl(mf, model, ppl_text, ctx, chunks, None, ["--save-logits", exact_logits], a.threads)
    out = {"model": "models/demo-moe.gguf packed --low Q4_0", "calibration": cal,
           "ppl_exact": base["perplexity"], "rates": {}}
    for rate in RATES:
        speed = {m["name"]: [] for m in modes}
        for rep in range(a.reps):
            order = modes if rep % 2 == 0 else list(reversed(modes))
            for m in order:
                speed[m["name"]].append(run_decode(mf, model, rate, m, a.threads))
        rows = []
        for m in modes:
            r = {"mode": m["name"], "args": " ".join(m["args"]), "calibrated": m.get("calibrated", False),
                 "decode_tps": median_of(speed[m["name"]], "decode_tps"),
                 "decode_tps_reps": [x["decode_tps"] for x in speed[m["name"]]],
                 "bytes_per_token": median_of(speed[m["name"]], "bytes_per_token"),
                 "bytes_low_per_token": median_of(speed[m["name"]], "bytes_low_per_token"),
                 "hit_rate": median_of(speed[m["name"]], "hit_rate"),
                 "stall_ms_per_token": median_of(speed[m["name"]], "stall_ms_per_token"),
                 "uses": speed[m["name"]][0]["uses"]}
            if m["name"] == "exact":
                r.update(perplexity=base["perplexity"], kl_divergence=0.0, top1_agreement=1.0)
            else:
                p = run_ppl(mf, model, ppl_text, ctx, chunks, exact_logits,
                            ["-b", 1, "--cache-rate", rate, *m["args"]], a.threads)
                r.update(perplexity=p["perplexity"], kl_divergence=p["kl_divergence"],
                         top1_agreement=p["top1_agreement"])
            r["ppl_increase"] = r["perplexity"] / base["perplexity"] - 1
            rows.append(r)
            print(f"demo rate {rate} {m['name']}: {r['bytes_per_token'] / 1e6:.3f} MB/tok, "
                  f"{r['decode_tps']:.0f} tok/s, ppl {r['perplexity']:.3f}", file=sys.stderr)
        ex = rows[0]
        for r in rows:
            r["bytes_saved"] = 1 - r["bytes_per_token"] / ex["bytes_per_token"]
            r["speedup"] = r["decode_tps"] / ex["decode_tps"]
            # Same-rep ratios (noise shared within a rep), median over reps.
            r["speedup_paired"] = statistics.median(
                x["decode_tps"] / e["decode_tps"] for x, e in zip(speed[r["mode"]], speed[ex["mode"]]))
        out["rates"][str(rate)] = rows
    return out


RANDOM_MODES = [
    {"name": "exact", "args": ["--mode", "exact"]},
    {"name": "hobbit (T1 0.6, T2 0.9)", "args": ["--mode", "hobbit"]},
    {"name": "hobbit (T1 0, T2 0.9)", "args": ["--mode", "hobbit", "--hobbit-t1", "0", "--hobbit-t2", "0.9"]},
    {"name": "hobbit-all (T1 0, T2 0.9)", "args": ["--mode", "hobbit-all", "--hobbit-t1", "0", "--hobbit-t2", "0.9"]},
    {"name": "skip 0.1", "args": ["--mode", "skip", "--skip-threshold", "0.1"]},
    {"name": "daop", "args": ["--mode", "daop"]},
    PRECALC_MODE,
]

# Random-weight models of the exact Mixtral-8x7B layer shape. The Q4_K one is the engine
# benchmark's format (KL and bytes, page cache as the slow tier to keep it short); the F16 one
# is HOBBIT's own setting (16-bit experts, 4-bit copies) and is read with O_DIRECT, where a
# Mixtral-sized miss is bandwidth-bound: its decode speed is the speed measurement.
RANDOM_MODELS = [
    {"key": "mixtral_q4k", "desc": "Mixtral-8x7B layer shape, 2 layers, Q4_K experts, --low Q2_K copies",
     "gen": ["--layers", 2, "--type", "Q4_K"], "low": "Q2_K", "kl": True, "speed": False},
    {"key": "mixtral_f16", "desc": "Mixtral-8x7B layer shape, 2 layers, F16 experts, --low Q4_0 copies",
     "gen": ["--layers", 2, "--type", "F16"], "low": "Q4_0", "kl": False, "speed": True},
]


def random_model_part(a, work, spec):
    mf = a.moeflow
    plain = os.path.join(work, spec["key"] + ".gguf")
    model = os.path.join(work, spec["key"] + "-low.gguf")
    if not os.path.exists(model):
        sh([mf, "gen-model", "--arch", "mixtral", "--preset", "8x7b", *spec["gen"], "--seed", 7, "-q",
            "-o", plain])
        sh([mf, "pack", "-m", plain, "-o", model, "--low", spec["low"]])
        os.remove(plain)
    out = {"model": spec["desc"], "rates": {}}
    text = os.path.join(work, "ppl.txt")
    base_logits = os.path.join(work, spec["key"] + "-exact.logits")
    ctx, chunks = 64, 4
    if spec["kl"]:
        run_ppl(mf, model, text, ctx, chunks, None, ["--save-logits", base_logits], a.threads)
        out.update(ctx=ctx, chunks=chunks)
    for rate in RATES:
        rows = []
        modes = [m for m in RANDOM_MODES if spec["kl"] or not m["name"].startswith("hobbit-all")]
        speed = {m["name"]: [] for m in modes}
        if spec["speed"]:
            for rep in range(a.reps_random):
                order = modes if rep % 2 == 0 else list(reversed(modes))
                for m in order:
                    p = sh([mf, "run", "-m", model, "-p", PROMPT, "-n", a.random_tokens, "--temp", 0, "-t", a.threads,
                            "--cache-rate", rate, "--stats", "json", *m["args"]])
                    j = last_json(p.stderr)
                    t = j["offload"]["total"]
                    n = j["n_prompt"] + j["n_generated"]
                    speed[m["name"]].append({"decode_tps": j["decode_tps"], "bytes_per_token": t["bytes_read"] / n,
                                             "uses": j["offload"].get("uses")})
        for m in modes:
            r = {"mode": m["name"], "args": " ".join(m["args"])}
            if spec["speed"]:
                rs = speed[m["name"]]
                r.update(decode_tps=median_of(rs, "decode_tps"), decode_tps_reps=[x["decode_tps"] for x in rs],
                         bytes_per_token=median_of(rs, "bytes_per_token"), uses=rs[0]["uses"])
            if spec["kl"]:
                if m["name"] == "exact":
                    r.update(kl_divergence=0.0, top1_agreement=1.0)
                p = run_ppl(mf, model, text, ctx, chunks, base_logits,
                            ["-b", 1, "--buffered-io", "--cache-rate", rate, *m["args"]], a.threads)
                t = p["offload"]["total"]
                r.update(kl_divergence=p["kl_divergence"], top1_agreement=p["top1_agreement"],
                         uses=p["offload"].get("uses"))
                if not spec["speed"]:
                    r["bytes_per_token"] = t["bytes_read"] / p["n_tokens_evaluated"]
            rows.append(r)
            print(f"{spec['key']} rate {rate} {m['name']}: {r['bytes_per_token'] / 1e6:.1f} MB/tok "
                  f"KL {r.get('kl_divergence', float('nan')):.5f} tok/s {r.get('decode_tps', float('nan')):.2f}",
                  file=sys.stderr)
        for r in rows:
            r["bytes_saved"] = 1 - r["bytes_per_token"] / rows[0]["bytes_per_token"]
            if spec["speed"]:
                r["speedup_paired"] = statistics.median(
                    x["decode_tps"] / e["decode_tps"] for x, e in zip(speed[r["mode"]], speed["exact"]))
        out["rates"][str(rate)] = rows
    return out


def report(res):
    L = ["# Lossy expert modes: bytes, speed and accuracy", "",
         f"Command: `python3 bench/bench_lossy.py --reps {res['reps']} -t {res['threads']}` "
         f"(commit {res['commit']}, {res['date']}). Machine: {res['machine']}.", ""]
    d = res["demo"]
    cal = d["calibration"]
    L += [f"## Demo model ({d['model']}), real text", "",
          f"Exact perplexity {d['ppl_exact']:.4f}. `moeflow calibrate` (1% target) chose "
          f"T1 = {cal['t1']:g}, T2 = {cal['t2']:g} (hobbit-all on the calibration text: "
          f"{100 * cal['best']['ppl_increase']:+.2f}% perplexity, a miss moves "
          f"{100 * cal['best']['miss_bytes_ratio']:.1f}% of the exact bytes).", ""]
    for rate, rows in d["rates"].items():
        L += [f"### Budget {float(rate):.0%} of the expert bytes", "",
              "| mode | bytes read / token | saved vs exact | low-copy bytes / token | decode tok/s (median) | speedup (paired median) | perplexity | ppl increase | mean KL | top-1 agreement |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            L.append(f"| {r['mode']} | {r['bytes_per_token'] / 1e6:.3f} MB | {100 * r['bytes_saved']:.1f}% | "
                     f"{r['bytes_low_per_token'] / 1e6:.3f} MB | {r['decode_tps']:.0f} | {r['speedup_paired']:.2f}x | "
                     f"{r['perplexity']:.3f} | {100 * r['ppl_increase']:+.2f}% | {r['kl_divergence']:.5f} | "
                     f"{r['top1_agreement']:.3f} |")
        L.append("")
    for spec in RANDOM_MODELS:
        if spec["key"] not in res:
            continue
        m = res[spec["key"]]
        L += [f"## {m['model']} (random weights)", ""]
        if spec["kl"]:
            L += [f"KL over {m['chunks']} chunks of {m['ctx']} tokens (their scored second halves), one token "
                  "per step, page cache as the slow tier; bytes per evaluated token.", ""]
        if spec["speed"]:
            L += [f"`moeflow run -n {res.get('random_tokens', 8)}` (13-token prompt), O_DIRECT, "
                  f"{res['reps_random']} reps interleaved; "
                  "medians; bytes per prompt + generated token.", ""]
        for rate, rows in m["rates"].items():
            cols = ["mode", "bytes read / token", "saved vs exact"]
            if spec["speed"]:
                cols += ["decode tok/s (median)", "speedup (paired median)"]
            if spec["kl"]:
                cols += ["mean KL", "top-1 agreement"]
            L += [f"### Budget {float(rate):.0%}", "", "| " + " | ".join(cols) + " |",
                  "|---|" + "---:|" * (len(cols) - 1)]
            for r in rows:
                cells = [r["mode"], f"{r['bytes_per_token'] / 1e6:.1f} MB", f"{100 * r['bytes_saved']:.1f}%"]
                if spec["speed"]:
                    cells += [f"{r['decode_tps']:.3f}", f"{r['speedup_paired']:.2f}x"]
                if spec["kl"]:
                    cells += [f"{r['kl_divergence']:.5f}", f"{r['top1_agreement']:.3f}"]
                L.append("| " + " | ".join(cells) + " |")
            L.append("")
    L += ["## Stale-input pre-calculation (demo)", ""]
    for rate, rows in d["rates"].items():
        for r in rows:
            u = r.get("uses") or {}
            if "--precalc" in r["args"] and u.get("high"):
                L.append(f"- budget {float(rate):.0%}: {u.get('precalc_computed', 0)} experts pre-calculated in the "
                         f"first decode run, {u.get('precalc', 0)} of them taken by the router "
                         f"({100 * u.get('precalc', 0) / u['high']:.1f}% of the {u['high']} expert uses)")
    L += [""]
    L += ["## Target (mixed-precision issue): HOBBIT saves >= 30% of miss bytes and decodes >= 1.2x "
          "at the same budget for <= 1% perplexity increase", ""]
    for rate, rows in d["rates"].items():
        h = next(r for r in rows if r["calibrated"])
        ok = h["bytes_saved"] >= 0.30 and h["speedup_paired"] >= 1.2 and h["ppl_increase"] <= 0.01
        L.append(f"- budget {float(rate):.0%}: {h['mode']} saves {100 * h['bytes_saved']:.1f}% of the bytes, "
                 f"decodes {h['speedup_paired']:.2f}x (paired median), perplexity {100 * h['ppl_increase']:+.2f}% "
                 f"-> {'met' if ok else 'NOT met'}")
    L.append("")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=40, help="demo perplexity chunks of 128 tokens")
    ap.add_argument("--work", default="/tmp/moeflow_bench_lossy")
    ap.add_argument("--reps-random", type=int, default=5, help="reps of the Mixtral-shaped F16 decode runs")
    ap.add_argument("--random-tokens", type=int, default=64,
                    help="decode tokens of each Mixtral-shaped F16 run")
    ap.add_argument("--no-mixtral", action="store_true", help="demo model only")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "lossy.json"))
    ap.add_argument("--report", default=os.path.join(ROOT, "bench", "REPORT-lossy.md"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    # The measured binary's own version (commit + dirty flag), not the checkout's HEAD.
    ver = binary_version(a.moeflow)
    commit = ver["moeflow_commit"]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    res = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "reps": a.reps,
           "moeflow_version": ver["moeflow_version"], "threads": a.threads, "machine": f"{cpu}, {os.cpu_count()} cores"}
    res["demo"] = demo_part(a, a.work)
    res["reps_random"] = a.reps_random
    res["random_tokens"] = a.random_tokens
    if not a.no_mixtral:
        for spec in RANDOM_MODELS:
            res[spec["key"]] = random_model_part(a, a.work, spec)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    with open(a.report, "w") as f:  # bench/render_tables.py re-renders it from the JSON
        f.write("<!-- table:lossy-report -->\n" + report(res) + "<!-- /table -->\n")
    print(report(res))


if __name__ == "__main__":
    main()
