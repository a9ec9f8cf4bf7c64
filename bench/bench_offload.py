#!/usr/bin/env python3
"""Offloading benchmark (expert-offloading issue): decode of a Mixtral-shaped Q4_K model whose
experts are >= 3x the expert budget (--cache-rate 0.3 of all expert bytes), in four modes:
  resident   : every expert in RAM (mmap, page cache warmed first): the compute-only time
  ondemand   : LRU, no prefetch, no early preemption (every miss read inside acquire)
  lookahead  : + next-layer gate-lookahead prefetch (LOW priority)
  full       : + early preemption / reordering (routed experts raised to HIGH at route time)
and the lower bound on time per token, the best any prefetcher could do without reading fewer
bytes: from the disk (O_DIRECT), max(resident compute time, on-demand missed bytes / best O_DIRECT
bandwidth), reads overlapping compute; with --buffered-io, resident compute time + on-demand missed
bytes / the page cache's own copy rate, measured here (the copies run on the same CPUs as the
compute, so their time adds to it instead of hiding under it; the O_DIRECT rate says nothing
about this path).

Each rep runs every mode once in a fresh process (order interleaved); medians are reported.
Bandwidth: `moeflow pack --measure` with the same number of I/O threads before and after the
runs, and the bandwidth the on-demand run itself reached on its critical path (its bytes / its
stall time: nothing overlaps a demand read there); the largest is used, so the bound is never
too loose (--buffered-io: `page_cache_copy_GBps`, the warm page cache copied into user buffers
by --io-threads threads with pread, the path `--buffered-io` reads through, before and after the
runs, and the on-demand run's critical-path rate; the largest). "Miss read time" is the
on-demand run's critical-path stall per token (pure read time of its misses); a mode "hides" 1 - (its stall / that). The ceiling on any speedup over on-demand
is on-demand time / lower bound. llama.cpp (llama-cpp-python, mmap, page cache warm, no budget)
decodes the same file as a reference when it is installed.

usage: bench/bench_offload.py [--model M.gguf | --layers N] [--moeflow build/moeflow] [-n 16]
                              [--reps 5] [--buffered-io] [--out F.json] [--report F.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from moeflow_version import binary_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# llama-cpp-python built for this CPU by scripts/setup-deps.sh (site-packages may hold a foreign one)
sys.path.insert(0, os.path.join(ROOT, ".deps", "python"))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def warm_page_cache(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def page_cache_copy_GBps(path, threads, seconds=3.0, chunk=8 << 20):
    """The warm page cache's copy rate into user buffers (GB/s): `threads` threads pread the file
    in `chunk`-byte requests (os.preadv releases the GIL), round-robin over the file, for about
    `seconds`; what --buffered-io's I/O workers do for a miss."""
    warm_page_cache(path)
    size = os.path.getsize(path)
    n_chunks = max(1, size // chunk)
    total = [0] * threads
    stop = time.monotonic() + seconds

    def worker(i):
        buf = bytearray(chunk)
        fd = os.open(path, os.O_RDONLY)
        try:
            k = i
            while time.monotonic() < stop:
                total[i] += os.preadv(fd, [buf], (k % n_chunks) * chunk)
                k += threads
        finally:
            os.close(fd)

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(total) / (time.monotonic() - t0) / 1e9


def require_llama_cpp() -> None:
    """The llama.cpp baseline is part of the report: an import failure stops the run at once,
    naming the cause, instead of the baseline going missing (--no-llama leaves it out on purpose)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        sys.exit(f"llama-cpp-python cannot be imported from {os.path.join(ROOT, '.deps', 'python')} "
                 f"({type(e).__name__}: {e}); run scripts/setup-deps.sh, or pass --no-llama")


def llama_decode_tps(model, n, threads):
    """llama.cpp decode tok/s through bench_engine.py's worker (same token ids as moeflow bench)."""
    r = run([sys.executable, os.path.join(ROOT, "bench", "bench_engine.py"), "--llama-worker",
             model, "0", str(n), str(threads)])
    return r.get("decode_tps")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--model")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("-n", type=int, default=16, help="decode tokens")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-rate", type=float, default=0.3)
    ap.add_argument("--io-threads", type=int, default=2)
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--buffered-io", action="store_true",
                    help="slow tier = the (warm) page cache instead of O_DIRECT from the disk: "
                         "RAM-speed copies, the CPU analogue of the GPU tier's host-to-VRAM link")
    ap.add_argument("--out")
    ap.add_argument("--report")
    a = ap.parse_args()
    if not a.no_llama:
        require_llama_cpp()
    model = a.model
    if not model:
        model = f"/tmp/moeflow_bench_mixtral_{a.layers}l_q4k.gguf"
        if not os.path.exists(model):
            subprocess.run([a.moeflow, "gen-model", "--arch", "mixtral", "--preset", "8x7b",
                            "--layers", str(a.layers), "--type", "Q4_K", "-q", "-o", model], check=True)
    measure = [a.moeflow, "pack", "--measure", "-m", model, "--seconds", "4",
               "--threads", str(a.io_threads)]
    bws = [run(measure)]
    pc = [page_cache_copy_GBps(model, a.io_threads)] if a.buffered_io else []
    base = [a.moeflow, "bench", "-m", model, "-p", "0", "-n", str(a.n), "--reps", "1",
            "--json", "-t", str(a.threads)]
    off = ["--cache-rate", str(a.cache_rate), "--cache-policy", "lru", "--io-threads", str(a.io_threads)]
    if a.buffered_io:
        off.append("--buffered-io")
    modes = {
        "resident": None,
        "ondemand": ["--prefetch", "none", "--no-early-preemption"],
        "lookahead": ["--prefetch", "lookahead", "--no-early-preemption"],
        "full": ["--prefetch", "lookahead"],
        # the full protocol without the arrival rule (experts/arrival_estimate.h)
        "full-always": ["--prefetch", "lookahead", "--prefetch-always"],
    }
    offloaded = [m for m in modes if m != "resident"]
    runs = {m: [] for m in modes}
    llama = []
    for rep in range(a.reps):
        order = list(modes) if rep % 2 == 0 else list(reversed(modes))
        for name in order:
            if name == "resident":
                warm_page_cache(model)
                runs[name].append(run(base))
            else:
                if a.buffered_io:
                    warm_page_cache(model)
                runs[name].append(run(base + off + modes[name]))
        if not a.no_llama:
            warm_page_cache(model)
            t = llama_decode_tps(model, a.n, a.threads)
            if t:
                llama.append(t)
    bws.append(run(measure))
    if a.buffered_io:
        pc.append(page_cache_copy_GBps(model, a.io_threads))
    odirect = max(b["read_GBps"] for b in bws)
    # The slow tier's own rate: O_DIRECT from the disk, or the page cache's copies.
    bw = max(pc) if a.buffered_io else odirect

    med = statistics.median
    resident_tps = med(r["decode_tps"] for r in runs["resident"])
    compute_s = 1.0 / resident_tps
    report = {**binary_version(a.moeflow), "model": model, "threads": a.threads, "io_threads": a.io_threads, "reps": a.reps,
              "n_decode": a.n, "cache_rate": a.cache_rate, "odirect_GBps": odirect,
              "odirect_GBps_runs": [b["read_GBps"] for b in bws],
              "buffered_io": a.buffered_io,
              "page_cache_copy_GBps_runs": pc,
              "expert_bytes": runs["resident"][0]["expert_bytes"],
              "resident_decode_tps": resident_tps,
              "llama_cpp_mmap_decode_tps": med(llama) if llama else None, "modes": {}}
    agg = {}
    for name in offloaded:
        tot = [r["offload"]["total"] for r in runs[name]]
        agg[name] = {"bytes": med(t["bytes_read"] for t in tot) / a.n,
                     "stall": med(t["stall_s"] for t in tot) / a.n,
                     "tps": med(r["decode_tps"] for r in runs[name])}
    demand_bytes, demand_stall = agg["ondemand"]["bytes"], agg["ondemand"]["stall"]
    inrun_bw = demand_bytes / demand_stall / 1e9 if demand_stall > 0 else 0.0
    bw = max(bw, inrun_bw)
    read_s = demand_bytes / (bw * 1e9)
    # From the disk the reads overlap compute at best; the page cache's copies take the compute's
    # own CPUs, so their time is charged on top.
    lower_bound = compute_s + read_s if a.buffered_io else max(compute_s, read_s)
    report.update({"odirect_GBps_best": odirect if a.buffered_io else bw, "slow_tier_GBps_best": bw,
                   "ondemand_critical_path_GBps": inrun_bw,
                   "lower_bound_rule": "compute + copy" if a.buffered_io else "max(compute, read)",
                   "read_s_per_token_at_best": read_s,
                   "compute_s_per_token": compute_s, "lower_bound_tpot_s": lower_bound,
                   "miss_read_s_per_token": demand_stall,
                   "speedup_ceiling_vs_ondemand": (1 / agg["ondemand"]["tps"]) / lower_bound})
    for name in offloaded:
        rs = runs[name]
        tot = [r["offload"]["total"] for r in rs]
        stall = agg[name]["stall"]
        report["modes"][name] = {
            "decode_tps": agg[name]["tps"], "decode_tps_runs": [r["decode_tps"] for r in rs],
            "tpot_s": 1 / agg[name]["tps"], "bytes_read_per_token": agg[name]["bytes"],
            "stall_s_per_token": stall,
            "hidden_read_fraction": 1 - stall / demand_stall if demand_stall > 0 else 1.0,
            "hit_rate": med(t["hit_rate"] for t in tot),
            "prefetch_issued": med(t["prefetch_issued"] for t in tot),
            "prefetch_used": med(t["prefetch_used"] for t in tot),
            "prefetch_wasted": med(t["prefetch_wasted"] for t in tot),
            "prefetch_too_late": med(t.get("prefetch_too_late", 0) for t in tot),
            "prefetch_paused": med(t.get("prefetch_paused", 0) for t in tot),
            "budget_bytes": rs[0]["offload"].get("budget_bytes"),
            "direct_io": rs[0]["offload"].get("direct_io"),
        }
    od = report["modes"]["ondemand"]["decode_tps"]
    for m in report["modes"].values():
        m["speedup_vs_ondemand"] = m["decode_tps"] / od if od else 0
    s = json.dumps(report, indent=1)
    print(s)
    if a.out:
        with open(a.out, "w") as f:
            f.write(s + "\n")

    tier = "page cache (--buffered-io)" if a.buffered_io else "O_DIRECT"
    report["slow_tier"] = tier
    lines = [f"slow tier {tier}; model `{os.path.basename(model)}`, {a.threads} threads, {a.io_threads} I/O threads, "
             f"cache rate {a.cache_rate}, {a.n} decode tokens, median of {a.reps} reps; "
             f"read bandwidth best {bw:.2f} GB/s ("
             + (f"page cache copy {max(pc):.2f}" if a.buffered_io
                else f"pack --measure {max(report['odirect_GBps_runs']):.2f}")
             + f", on-demand critical path {inrun_bw:.2f}); compute {1000 * compute_s:.0f} ms/token, "
             f"on-demand miss read time {1000 * demand_stall:.0f} ms/token; lower bound "
             f"({report['lower_bound_rule']}) {1000 * lower_bound:.0f} ms/token = {1 / lower_bound:.2f} tok/s, so no prefetcher "
             f"can beat on-demand by more than {report['speedup_ceiling_vs_ondemand']:.2f}x "
             f"without reading fewer bytes",
             "", "| mode | decode tok/s | × ondemand | hit rate | read MB/token | "
             "stall ms/token | miss read time hidden | prefetches issued / held back |",
             "|---|---|---|---|---|---|---|---|",
             f"| resident (all experts in RAM) | {resident_tps:.3f} | | 1.00 | 0 | 0 | | |"]
    for name, m in report["modes"].items():
        lines.append(f"| {name} | {m['decode_tps']:.3f} | {m['speedup_vs_ondemand']:.2f} | "
                     f"{m['hit_rate']:.2f} | {m['bytes_read_per_token'] / 1e6:.0f} | "
                     f"{1000 * m['stall_s_per_token']:.0f} | "
                     f"{100 * m['hidden_read_fraction']:.0f}% | "
                     f"{m['prefetch_issued']:.0f} / {m['prefetch_too_late']:.0f} |")
    lines.append(f"| lower bound | {1 / lower_bound:.3f} | "
                 f"{report['speedup_ceiling_vs_ondemand']:.2f} | | | | | |")
    if llama:
        lines.append(f"| llama.cpp mmap (page cache, no budget) | {med(llama):.3f} | | | | | | |")
    md = "\n".join(lines)
    print(md, file=sys.stderr)
    if a.report:
        with open(a.report, "w") as f:
            f.write(md + "\n")


if __name__ == "__main__":
    main()
