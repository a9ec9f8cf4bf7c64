#!/usr/bin/env python3
"""Engine speed benchmark: moeflow vs llama.cpp (llama-cpp-python) on the same GGUF file.

Model: a Mixtral-8x7B-shaped model (real 8x7b layer shape: n_embd 4096, 8 experts of 14336, top-2,
32 heads / 8 KV heads, vocab 32000) with only --layers layers (default 4, ~3.4 GB in Q4_K),
written by `moeflow gen-model` and cached in /tmp. --arch deepseek2: DeepSeek-V2-Lite's shape
instead (n_embd 2048, MLA with kv_lora_rank 512 over 16 heads, a leading dense layer of 10944,
64 experts of 1408 top-6 + 2 shared, vocab 102400, YaRN), --layers layers (1 dense + the rest
MoE); the KV cache bytes per token (MLA's latent vs every head's keys and values) are reported
from `moeflow bench --json`.
`--arch gpt-oss` (preset 20b: n_embd 2880,
32 experts of 2880, top-4, 64 heads / 8 KV heads of 64, window 128 on every other layer, vocab
201088) with `--type Q8_0 --expert-type MXFP4`: the real gpt-oss-20b layers as the released
MXFP4 files store them.
The 2026 families at their released shapes: `--arch qwen35moe` (Qwen3.6-35B-A3B: 3 gated DeltaNet
layers per gated full-attention layer, 256 experts of 512 top-8 + a shared expert, vocab 248320),
`qwen3next` (Qwen3-Next-80B-A3B: 512 experts top-10), `gemma4` (Gemma 4 26B-A4B: sliding and
global layers, a dense GELU FFN beside 128 experts top-8, vocab 262144), `minimax-m2` (256
experts of 1536 top-8, n_embd 3072). With 4 layers a hybrid has 3 DeltaNet layers and one
attention layer, the released models' mix.

Per rep (interleaved, the order alternating between reps so drift hits both sides alike):
  moeflow : `moeflow bench -m M -p P -n N --reps 1 --json -t T` (fresh process)
  llama   : a fresh python process (this script, --llama-worker) with llama-cpp-python on the same
            file, same threads, n_batch = n_ubatch = 512, default settings otherwise; times one
            P-token prefill and N single-token decode steps from an empty context, on the same
            token ids as `moeflow bench` (its LCG is replicated here).
Before the measured reps every engine runs once, discarded (recorded as warmup_runs): the first
run after the bandwidth measurement is cold (page cache, CPU frequency) and was always an
outlier. Medians over the reps are reported (default 5 reps).

Memory bandwidth: build/bench/bench_micro BM_membw_read/thr:T/huge:1 (streaming read of a 640
MiB buffer in 2 MiB pages with T threads, every line prefetched as the kernels do: the engine's
weights are in huge pages when the model fits; the 4 KiB pages' figure, lower, is recorded
beside it), measured before and after the engine runs; the larger is used. Decode bandwidth
fraction = active weight bytes per token / decode time per token / bandwidth, where active bytes =
every non-expert tensor except token_embd (+ one token_embd row) + top-k experts of every layer.

Targets (issue 35, CPU decode at the bandwidth limit): decode >= 1.1x llama.cpp, decode >= 90% of
the measured bandwidth, prefill (512 tokens) >= 1.2x llama.cpp. (The engine-core issue's were
1.0x, 70% and 0.8x.) The JSON names the CPU model (`cpu_model`) and moeflow's SIMD level per run.

With --baseline OLD/moeflow an older moeflow binary runs in the same rotation (A/B of a change:
a restructuring must stay within 3% of the old binary on decode and prefill).

usage: bench/bench_engine.py [--model M.gguf | [--arch mixtral|deepseek2|gpt-oss|qwen35moe|qwen3next|
                             gemma4|minimax-m2] --layers 4
                             --type Q4_K [--expert-type MXFP4]] [--moeflow build/moeflow]
                             [--baseline OLD/moeflow]
                             [-p 512] [-n 32] [-t 2] [--reps 5] [--out F.json] [--report F.md]
One JSON object on stdout (and --out); a markdown table on stderr (and --report).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from moeflow_version import binary_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# llama-cpp-python built for this CPU by scripts/setup-deps.sh (site-packages may hold a foreign
# one). --llama-deps names another build (e.g. one without AVX-512, the fair baseline of a
# MOEFLOW_SIMD=avx2 run); it reaches the worker processes through MOEFLOW_LLAMA_DEPS.
DEFAULT_LLAMA_DEPS = os.path.join(ROOT, ".deps", "python")
LLAMA_DEPS = os.path.abspath(os.environ.get("MOEFLOW_LLAMA_DEPS") or DEFAULT_LLAMA_DEPS)
sys.path.insert(0, LLAMA_DEPS)


def llama_build_flags(deps: str) -> str:
    """The build settings setup-deps.sh (or whoever built it) stamped beside llama-cpp-python."""
    try:
        with open(os.path.join(deps, ".llama-cpp-stamp")) as f:
            return f.read().strip()
    except OSError:
        return "unknown (no .llama-cpp-stamp)"


def require_llama_cpp() -> None:
    """The llama.cpp baseline is part of the report: an import failure stops the run at once,
    naming the cause, instead of the baseline going missing (--no-llama leaves it out on purpose)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        sys.exit(f"llama-cpp-python cannot be imported from {LLAMA_DEPS} "
                 f"({type(e).__name__}: {e}); run scripts/setup-deps.sh, or pass --no-llama")


def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo), which platform.processor() leaves empty on Linux."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bench_tokens(n: int, n_vocab: int) -> list[int]:
    """The ids `moeflow bench` feeds (src/cli/cmd_bench.cpp): a 64-bit LCG from 12345."""
    s, out = 12345, []
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        out.append((s >> 33) % n_vocab)
    return out


# ----------------------------------------------------------------------------------------------
# llama.cpp worker (run in its own process per rep)

def llama_worker(model: str, n_prompt: int, n_gen: int, threads: int) -> None:
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model, n_ctx=max(n_prompt, n_gen) + 64, n_batch=512,
                          n_ubatch=512, n_threads=threads, n_threads_batch=threads,
                          logits_all=False, verbose=False)
    toks = bench_tokens(max(n_prompt, n_gen), llm.n_vocab())
    res = {"llama_cpp_version": getattr(llama_cpp, "__version__", "?")}
    if n_prompt > 0:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks[:n_prompt])
        res["prefill_s"] = time.perf_counter() - t0
        res["prefill_tps"] = n_prompt / res["prefill_s"]
    if n_gen > 0:
        llm.reset()  # n_tokens = 0: the next eval drops the KV cache from position 0
        t0 = time.perf_counter()
        for t in toks[:n_gen]:
            llm.eval([t])
        res["decode_s"] = time.perf_counter() - t0
        res["decode_tps"] = n_gen / res["decode_s"]
    print(json.dumps(res))


# ----------------------------------------------------------------------------------------------

def run_json(cmd: list[str], timeout: float | None = None) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --arch: gen-model's preset of the released model's shape.
PRESETS = {"mixtral": "8x7b", "deepseek2": "v2-lite", "gpt-oss": "20b",
           "qwen35moe": "35b-a3b", "qwen3next": "80b-a3b", "gemma4": "26b-a4b", "minimax-m2": "m2"}


REPEAT_EXPERTS = ("qwen35moe", "qwen3next", "gemma4", "minimax-m2")


def ensure_model(a) -> str:
    if a.model:
        return a.model
    preset = PRESETS[a.arch]
    types = a.type.lower().replace("_", "") + (f"_{a.expert_type.lower()}" if a.expert_type else "")
    name = "mixtral" if a.arch == "mixtral" else a.arch.replace("-", "") + preset
    path = f"/tmp/moeflow_bench_{name}_{a.layers}l_{types}.gguf"
    if not os.path.exists(path):
        tmp = f"{path}.part{os.getpid()}"
        print(f"generating {path} (once; cached) ...", file=sys.stderr)
        extra = ["--expert-type", a.expert_type] if a.expert_type else []
        # The 2026 presets' 128-512 experts per layer make K-quant generation slow (hours on 2
        # cores): their MoE layers share the first one's expert weights (the same bytes per token
        # and the same arithmetic; only the text is meaningless, and speed does not read it).
        if a.arch in REPEAT_EXPERTS:
            extra.append("--repeat-experts")
        subprocess.run([a.moeflow, "gen-model", "--arch", a.arch, "--preset", preset, "--layers",
                        str(a.layers), "--type", a.type, *extra, "-q", "-t", str(a.threads), "-o", tmp],
                       check=True, stdout=subprocess.DEVNULL)
        os.replace(tmp, path)
    return path


def model_bytes(path: str) -> dict:
    """Byte counts from the GGUF tensor table (gguf-py): experts, non-experts, token_embd."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")

    def kv(key):
        f = r.fields.get(f"{arch}.{key}")
        return int(f.parts[-1][0]) if f else 0

    n_expert, n_used = kv("expert_count"), kv("expert_used_count")
    expert = non_expert = embd = embd_row = 0
    moe_layers = set()
    for t in r.tensors:
        nb = int(t.n_bytes)
        if "_exps." in t.name:
            expert += nb
            moe_layers.add(t.name.split(".")[1])
        else:
            non_expert += nb
        if t.name == "token_embd.weight":
            embd = nb
            embd_row = nb // int(t.shape[1])
    active_expert = expert // n_expert * n_used if n_expert else 0
    # token_embd: only the token's row is read per step -- unless the output projection is tied
    # to it (no output.weight: gemma4), when the logits read all of it every step.
    tied = not any(t.name == "output.weight" for t in r.tensors)
    active = non_expert - (0 if tied else embd - embd_row) + active_expert
    return {"arch": arch, "n_layer": kv("block_count"), "n_moe_layers": len(moe_layers), "n_expert": n_expert,
            "n_expert_used": n_used, "file_bytes": os.path.getsize(path), "expert_bytes": expert,
            "non_expert_bytes": non_expert, "token_embd_bytes": embd,
            "active_expert_bytes_per_token": active_expert, "active_bytes_per_token": active,
            "output_tied_to_token_embd": tied}


def membw(a) -> dict:
    """Streaming read bandwidth with a.threads threads (GB/s, 1e9), in 2 MiB pages as the
    engine's weights are when the model fits (the bar); the 4 KiB pages' figure beside it."""
    binp = a.membw_bin
    if binp and os.path.exists(binp):
        want = f"BM_membw_read/thr:{a.threads}/"
        p = subprocess.run([binp, f"--benchmark_filter={want}", "--benchmark_format=json",
                            "--benchmark_repetitions=3"], capture_output=True, text=True)
        if p.returncode == 0:
            j = json.loads(p.stdout)
            runs = [b for b in j["benchmarks"] if b.get("run_type") == "iteration"]
            vals = [b["bytes_per_second"] for b in runs if "/huge:1" in b["name"]]
            small = [b["bytes_per_second"] / 1e9 for b in runs if "/huge:0" in b["name"]]
            if vals:
                return {"GBps": max(vals) / 1e9, "samples_GBps": [v / 1e9 for v in vals],
                        "pages_4k_GBps": small,
                        "source": f"{os.path.relpath(binp, ROOT)} {want}huge:1 (2 MiB pages)"}
    # Fallback: numpy sum over a 1 GiB buffer (single thread).
    import numpy as np
    x = np.ones(1 << 27, dtype=np.int64)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum()
        best = max(best, x.nbytes / (time.perf_counter() - t0))
    return {"GBps": best / 1e9, "samples_GBps": [best / 1e9], "source": "numpy sum (1 thread)"}


def loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--membw-bin", default=os.path.join(ROOT, "build", "bench", "bench_micro"))
    ap.add_argument("--model")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--type", default="Q4_K")
    ap.add_argument("--arch", default="mixtral", choices=tuple(PRESETS),
                    help="gen-model shape: Mixtral-8x7B, DeepSeek-V2-Lite or gpt-oss-20b layers")
    ap.add_argument("--expert-type", help="type of the routed experts (default: --type)")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens")
    ap.add_argument("-n", type=int, default=32, help="decode tokens")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-llama", action="store_true", help="moeflow only")
    ap.add_argument("--llama-deps", default=DEFAULT_LLAMA_DEPS,
                    help="folder holding the llama-cpp-python build to compare with (default .deps/python)")
    ap.add_argument("--baseline", help="an older moeflow binary to compare in the same rotation")
    ap.add_argument("--out")
    ap.add_argument("--report")
    ap.add_argument("--llama-worker", nargs=4, metavar=("MODEL", "P", "N", "T"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.llama_worker:
        m, p, n, t = a.llama_worker
        llama_worker(m, int(p), int(n), int(t))
        return
    if os.path.abspath(a.llama_deps) != LLAMA_DEPS:
        # Re-run with the chosen build first on the path of this process and of its workers.
        os.environ["MOEFLOW_LLAMA_DEPS"] = os.path.abspath(a.llama_deps)
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]])
    if not a.no_llama:
        require_llama_cpp()

    model = ensure_model(a)
    info = model_bytes(model)
    load0 = loadavg()
    bw0 = membw(a)
    runs, warmup, kv = [], [], {}
    engines = ["moeflow"] + (["baseline"] if a.baseline else []) + ([] if a.no_llama else ["llama.cpp"])

    def one_run(eng: str, rep: int) -> dict:
        nonlocal kv
        if eng in ("moeflow", "baseline"):
            binp = a.moeflow if eng == "moeflow" else a.baseline
            r = run_json([binp, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n),
                          "--reps", "1", "--json", "-t", str(a.threads)])
        else:
            r = run_json([sys.executable, os.path.abspath(__file__), "--llama-worker", model,
                          str(a.p), str(a.n), str(a.threads)])
        if eng == "moeflow":
            kv = {k: r[k] for k in ("kv_bytes_per_token", "kv_bytes_per_token_per_head") if k in r}
        r = {"engine": eng, "rep": rep, "prefill_tps": r.get("prefill_tps", 0.0),
             "decode_tps": r.get("decode_tps", 0.0),
             **({"simd": r["simd"], "threads": r["threads"]} if eng != "llama.cpp" else
                {"llama_cpp_version": r.get("llama_cpp_version")}),
             "loadavg": loadavg()}
        print(f"{'warm-up' if rep < 0 else f'rep {rep}':7s} {eng:9s}: prefill {r['prefill_tps']:8.2f} tok/s  decode "
              f"{r['decode_tps']:7.3f} tok/s  (load {r['loadavg'][0]})", file=sys.stderr)
        return r

    # One discarded run per engine first (rep -1): the first run after the bandwidth measurement
    # is cold and was always the slowest of its engine.
    for eng in engines:
        warmup.append(one_run(eng, -1))
    for rep in range(a.reps):
        # Rotate the order so that drift and warm caches hit every engine alike.
        order = engines[rep % len(engines):] + engines[:rep % len(engines)]
        for eng in order:
            runs.append(one_run(eng, rep))
    bw1 = membw(a)
    bw = max(bw0["GBps"], bw1["GBps"])

    def med(eng, key):
        v = [r[key] for r in runs if r["engine"] == eng]
        return statistics.median(v) if v else None

    # The measured binary's own version (commit + dirty flag), not the checkout's HEAD.
    ver = binary_version(a.moeflow)
    res = {**ver, "model": model, "model_info": info, "n_prompt": a.p, "n_gen": a.n, "threads": a.threads,
           "reps": a.reps, "cpu": platform.processor() or platform.machine(), "cpu_model": cpu_model(),
           "nproc": os.cpu_count(),
           "loadavg_start": load0, "loadavg_end": loadavg(),
           "membw": {"GBps": bw, "before": bw0, "after": bw1}, "kv_cache": kv,
           **({} if a.no_llama else {"llama_deps": os.path.relpath(LLAMA_DEPS, ROOT),
                                     "llama_build": llama_build_flags(LLAMA_DEPS)}),
           "warmup_runs": warmup, "runs": runs,
           "engines": {}}
    for eng in ("moeflow", "baseline", "llama.cpp"):
        d = med(eng, "decode_tps")
        if d is None:
            continue
        tpot = 1.0 / d if d else float("inf")
        res["engines"][eng] = {
            "prefill_tps": med(eng, "prefill_tps"), "decode_tps": d, "tpot_s": tpot,
            "decode_GBps": info["active_bytes_per_token"] / tpot / 1e9,
            "decode_bw_fraction": info["active_bytes_per_token"] / tpot / (bw * 1e9)}
    mf = res["engines"]["moeflow"]
    lc = res["engines"].get("llama.cpp")
    targets = {"decode_bw_fraction_ge_0.90": {"value": mf["decode_bw_fraction"],
                                              "met": mf["decode_bw_fraction"] >= 0.90}}
    if lc:
        dr = mf["decode_tps"] / lc["decode_tps"]
        pr = mf["prefill_tps"] / lc["prefill_tps"] if a.p else None
        res["decode_speedup_vs_llama"] = dr
        res["prefill_speedup_vs_llama"] = pr
        targets["decode_vs_llama_ge_1.1"] = {"value": dr, "met": dr >= 1.1}
        if pr is not None:
            targets["prefill_vs_llama_ge_1.2"] = {"value": pr, "met": pr >= 1.2}
    bl = res["engines"].get("baseline")
    if bl:
        res["baseline"] = a.baseline
        res["baseline_commit"] = binary_version(a.baseline)["moeflow_commit"]
        for key, name in (("decode_tps", "decode"), ("prefill_tps", "prefill")):
            if bl[key]:
                ratio = mf[key] / bl[key]
                res[f"{name}_vs_baseline"] = ratio
                targets[f"{name}_vs_baseline_ge_0.97"] = {"value": ratio, "met": ratio >= 0.97}
    res["targets"] = targets

    s = json.dumps(res, indent=1)
    print(s)
    if a.out:
        with open(a.out, "w") as f:
            f.write(s + "\n")
    gib = 1 << 30
    lines = [
        f"moeflow {ver['moeflow_commit']}, model `{model}` ({info['n_layer']} layers, {info['file_bytes'] / gib:.2f} GiB, "
        f"active {info['active_bytes_per_token'] / 1e6:.0f} MB/token), {a.threads} threads, "
        f"median of {a.reps} reps, memory bandwidth {bw:.2f} GB/s ({bw0['source']}); "
        f"CPU {res['cpu_model']}, moeflow SIMD level "
        f"{'/'.join(sorted({r['simd'] for r in runs if 'simd' in r})) or '?'}"
        + ("" if a.no_llama else f"; llama.cpp from {res['llama_deps']} ({res['llama_build']})"),
        "",
        f"| engine | prefill pp{a.p} tok/s | decode tg{a.n} tok/s | ms/token | decode GB/s | % of membw |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for eng, e in res["engines"].items():
        lines.append(f"| {eng} | {e['prefill_tps']:.2f} | {e['decode_tps']:.3f} | {e['tpot_s'] * 1e3:.1f} | "
                     f"{e['decode_GBps']:.2f} | {100 * e['decode_bw_fraction']:.1f}% |")
    lines.append("")
    for k, v in targets.items():
        lines.append(f"- {k}: {v['value']:.3f} -> {'met' if v['met'] else 'NOT met'}")
    if kv.get("kv_bytes_per_token"):
        kt, kh = kv["kv_bytes_per_token"], kv.get("kv_bytes_per_token_per_head", 0)
        lines.append(f"- KV cache: {kt} bytes/token over {info['n_layer']} layers "
                     f"({kt // max(1, info['n_layer'])} per layer); every head's keys and values "
                     f"would take {kh} ({kh / kt:.2f}x)")
    md = "\n".join(lines) + "\n"
    print(md, file=sys.stderr)
    if a.report:
        with open(a.report, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
