#!/usr/bin/env python3
"""Every benchmark number in README.md, docs/*.md and bench/REPORT-*.md from its JSON in bench/.

A document marks what this script writes:

  <!-- table:NAME -->            a block (a table, or sentences that cite numbers), on lines of
  ...                            its own; everything between the two markers is rewritten
  <!-- /table -->

  <!--v:NAME-->16.4<!--/v-->     one value inside a sentence

NAME is a key of RENDER below, which computes the text from the JSON files (bench/*.json, the
earlier runs' bench/history/*.json and the simulator's bench/sim/grid_*.csv; the GPU test grid's
size is counted from tests/gpu/test_gpu_logits.cpp). Parametrised names: btr-doc:FILE:MODEL and
btr-bytes:FILE:MODEL (FILE relative to bench/). Numbers outside marked regions are not benchmark results (test
counts, sizes, settings) or are quoted from a report with no JSON (they name the report).

usage: python3 bench/render_tables.py          rewrite the documents from the data
       python3 bench/render_tables.py --check  exit 1 naming each document and region that
                                               differs from its data (ctest doc_numbers runs it)
       python3 bench/render_tables.py --list   the regions and their sources
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
DOCS = ["README.md", "docs/*.md", "bench/REPORT-*.md"]
GIB = 1 << 30

BLOCK = re.compile(r"(<!-- table:([\w.@:/-]+) -->\n)(.*?)(<!-- /table -->)", re.S)
INLINE = re.compile(r"(<!--v:([\w.@:/-]+)-->)(.*?)(<!--/v-->)", re.S)

_cache: dict[str, object] = {}


def J(name: str):
    """bench/NAME (JSON), loaded once."""
    if name not in _cache:
        with open(os.path.join(BENCH, name)) as f:
            _cache[name] = json.load(f)
    return _cache[name]


def grid(hw: str) -> list[dict]:
    """bench/sim/grid_HW.csv (bench/sim_report.sh): one row per policy x predictor x cache rate."""
    key = f"sim/grid_{hw}.csv"
    if key not in _cache:
        with open(os.path.join(BENCH, key)) as f:
            _cache[key] = list(csv.DictReader(f))
    return _cache[key]


def x(v: float, d: int = 2) -> str:
    return f"{v:.{d}f}×"


def pct(v: float, d: int = 0, sign: bool = False) -> str:
    return f"{100 * v:{'+' if sign else ''}.{d}f}%".replace("-", "−")


def fewer_or_more(saved: float) -> str:
    """A share of bytes saved (negative: read more) as "4.1% fewer" / "4.1% more"."""
    return f"{pct(abs(saved), 1)} {'fewer' if saved >= 0 else 'more'}"


def mb(v: float) -> str:
    return f"{v / 1e6:.0f}"


# ----------------------------------------------------------------------------------------------
# Engine (bench_engine.py)

def eng(f: str, e: str = "moeflow") -> dict:
    return J(f)["engines"][e]


def engine_table() -> str:
    d = J("engine.json")
    m, l = eng("engine.json"), eng("engine.json", "llama.cpp")
    pr, dr = m["prefill_tps"] / l["prefill_tps"], m["decode_tps"] / l["decode_tps"]
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    return "\n".join([
        "| | moeflow | llama.cpp | ratio | target |",
        "|---|---:|---:|---:|---|",
        f"| prefill, {d['n_prompt']}-token prompt (tok/s) | {m['prefill_tps']:.1f} | {l['prefill_tps']:.1f} | "
        f"{x(pr)} | ≥ 1.2× (issue 35) — {met(pr >= 1.2)} |",
        f"| decode (tok/s) | {m['decode_tps']:.1f} | {l['decode_tps']:.1f} | {x(dr, 3)} | ≥ 1.1× (issue 35) — {met(dr >= 1.1)} |",
        f"| decode read bandwidth (% of measured {d['membw']['GBps']:.1f} GB/s) | {pct(m['decode_bw_fraction'], 1)} | "
        f"{pct(l['decode_bw_fraction'], 1)} | | ≥ 90% (issue 35) — {met(m['decode_bw_fraction'] >= 0.9)} |",
        "",
        f"(moeflow {d['moeflow_commit']}, medians of {d['reps']} interleaved reps, `bench/engine.json`.)"])


def engine_ab() -> str:
    d = J("engine-ab.json")
    m, b, l = (eng("engine-ab.json", e) for e in ("moeflow", "baseline", "llama.cpp"))
    return (f"the three engines interleaved, medians of {d['reps']} reps (moeflow {d['moeflow_commit']}): moeflow decode "
            f"{m['decode_tps']:.2f} tok/s vs {b['decode_tps']:.2f} for the old binary "
            f"({x(m['decode_tps'] / b['decode_tps'], 3)}) and {l['decode_tps']:.2f}\nfor llama.cpp "
            f"({x(m['decode_tps'] / l['decode_tps'], 3)}); prefill {m['prefill_tps']:.1f} vs {b['prefill_tps']:.1f} "
            f"({x(m['prefill_tps'] / b['prefill_tps'], 3)}) and {l['prefill_tps']:.1f} "
            f"({x(m['prefill_tps'] / l['prefill_tps'])}); decode reads {pct(m['decode_bw_fraction'], 1)} of\nthe "
            f"measured {d['membw']['GBps']:.1f} GB/s (`bench/engine-ab.json`).")


def engine_tiles() -> str:
    d = J("engine-prefill-tiles.json")
    m, l = eng("engine-prefill-tiles.json"), eng("engine-prefill-tiles.json", "llama.cpp")
    return (f"8-token prefill tiles (moeflow {d['moeflow_commit']}, `bench/engine-prefill-tiles.json`) on the same "
            f"file, `python3 bench/bench_engine.py --model M\n-t 2 --reps {d['reps']}`: prefill "
            f"**{m['prefill_tps']:.1f} vs {l['prefill_tps']:.1f} tok/s for llama.cpp "
            f"({x(m['prefill_tps'] / l['prefill_tps'])})**, decode {m['decode_tps']:.1f} vs {l['decode_tps']:.1f}\n"
            f"({x(m['decode_tps'] / l['decode_tps'], 3)}, {pct(m['decode_bw_fraction'], 1)} of "
            f"{d['membw']['GBps']:.1f} GB/s).")


def engine_newer() -> str:
    rows = ["| model (command) | prefill pp512 moeflow / llama.cpp | decode moeflow / llama.cpp | "
            "% of membw (decode) | KV cache bytes / token / layer |",
            "|---|---:|---:|---:|---:|"]
    for f, label in (("engine-deepseek2.json", "DeepSeek-V2-Lite shape, Q4_K (`bench_engine.py --arch deepseek2"),
                     ("engine-gptoss.json", "gpt-oss-20b shape, Q8_0 + MXFP4 experts (`--arch gpt-oss --type Q8_0 "
                                            "--expert-type MXFP4"),
                     ("engine-qwen35moe.json", "Qwen3.6-35B-A3B shape (3 DeltaNet + 1 attention layer), Q4_K "
                                               "(`--arch qwen35moe"),
                     ("engine-qwen3next.json", "Qwen3-Next-80B-A3B shape, Q4_K (`--arch qwen3next"),
                     ("engine-gemma4.json", "Gemma 4 26B-A4B shape (3 sliding + 1 global layer), Q4_K "
                                            "(`--arch gemma4"),
                     ("engine-minimax-m2.json", "MiniMax-M2 shape (256 experts, top-8), Q4_K "
                                                "(`--arch minimax-m2")):
        d = J(f)
        m, l = eng(f), eng(f, "llama.cpp")
        kv = d["kv_cache"]
        n_layer = d["model_info"]["n_layer"]
        per_layer = kv["kv_bytes_per_token"] // n_layer
        kv_cell = f"{per_layer:,}"
        if kv.get("kv_bytes_per_token_per_head", 0) > kv["kv_bytes_per_token"]:
            heads = kv["kv_bytes_per_token_per_head"] // n_layer
            kv_cell += (f" (latent 512 + rope 64 floats) vs {heads:,} for every head's K and V: "
                        f"{kv['kv_bytes_per_token_per_head'] / kv['kv_bytes_per_token']:.1f}× smaller")
        rows.append(
            f"| {label} --reps {d['reps']}`) | {m['prefill_tps']:.1f} / {l['prefill_tps']:.1f} = "
            f"**{x(m['prefill_tps'] / l['prefill_tps'])}**{' (target 1.2×)' if 'deepseek' in f else ''} | "
            f"{m['decode_tps']:.1f} / {l['decode_tps']:.1f} = **{x(m['decode_tps'] / l['decode_tps'])}** | "
            f"{pct(m['decode_bw_fraction'], 1)} | {kv_cell} |")
    return "\n".join(rows)


def engine_v(key: str) -> str:
    # The A/B of the prefill tiles: both sides from the same day (the runs of 2a2942f), since
    # later runs of the current files may be on a VM with another memory bandwidth.
    ds0, ds1 = J("history/engine-deepseek2@1031d12.json"), J("history/engine-deepseek2@2a2942f.json")
    go0, go1 = J("history/engine-gptoss@1031d12.json"), J("history/engine-gptoss@2a2942f.json")
    ab, tiles = J("engine-ab.json"), J("engine-prefill-tiles.json")
    pp = lambda d, e="moeflow": d["engines"][e]["prefill_tps"]  # noqa: E731
    vals = {
        "deepseek_before": x(pp(ds0) / pp(ds0, "llama.cpp")),
        "tiles_ab": (f"DeepSeek-V2-Lite shape {pp(ds0):.0f} -> {pp(ds1):.0f} tok/s; Mixtral shape {pp(ab):.0f} -> "
                     f"{pp(tiles):.0f}; gpt-oss (MXFP4) {pp(go0):.0f} -> {pp(go1):.0f}"),
    }
    return vals[key]


# ----------------------------------------------------------------------------------------------
# Offloading (bench_offload.py)

def offload_ceiling(d: dict) -> tuple[float, str]:
    """Lower bound on time per token and its rule. Files written before the rule was recorded:
    from the disk, max(compute, read at the best O_DIRECT rate); through the page cache, compute
    + the copies at the page cache path's own rate (the on-demand run's critical-path rate), since
    the copies run on the compute's CPUs."""
    if "lower_bound_rule" in d:
        return d["lower_bound_tpot_s"], d["lower_bound_rule"]
    demand = d["modes"]["ondemand"]["bytes_read_per_token"]
    if d["modes"]["ondemand"]["direct_io"]:
        return d["lower_bound_tpot_s"], "max(compute, read)"
    return d["compute_s_per_token"] + demand / (d["ondemand_critical_path_GBps"] * 1e9), "compute + copy"


def offload_table() -> str:
    rows = ["| slow tier | on-demand LRU | + lookahead | full protocol | full, every prefetch issued | "
            "ceiling (lower bound) | miss read time hidden (full) | llama.cpp mmap, no budget |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for f in ("offload-odirect.json", "offload-buffered.json"):
        d = J(f)
        md = d["modes"]
        od = md["ondemand"]["decode_tps"]
        bound, _ = offload_ceiling(d)
        tier = (f"file, O_DIRECT ({d['odirect_GBps_best']:.1f} GB/s here)" if md["ondemand"]["direct_io"]
                else f"page cache (`--buffered-io`, copies at "
                     f"{d.get('slow_tier_GBps_best', d['ondemand_critical_path_GBps']):.1f} GB/s)")
        cells = [f"{od:.2f} tok/s"] + [f"{md[k]['decode_tps']:.2f} ({x(md[k]['decode_tps'] / od)})"
                                       for k in ("lookahead", "full", "full-always")]
        llama = d.get("llama_cpp_mmap_decode_tps")
        rows.append(f"| {tier} | " + " | ".join(cells) + f" | {1 / bound:.2f} ({x(1 / bound / od)}) | "
                    f"{pct(md['full']['hidden_read_fraction'])} | {f'{llama:.1f} tok/s' if llama else ''} |")
    return "\n".join(rows)


def offload_buffered_note() -> str:
    d = J("offload-buffered.json")
    bound, rule = offload_ceiling(d)
    od = d["modes"]["ondemand"]["decode_tps"]
    copy = d["modes"]["ondemand"]["bytes_read_per_token"] / (d["ondemand_critical_path_GBps"] * 1e9)
    return (f"The lower bound above is max(compute, copies), as bench_offload.py computed it then. The page "
            f"cache's copies run on the compute's own two vCPUs, so their time adds to the compute's: "
            f"{1000 * d['compute_s_per_token']:.0f} + {1000 * copy:.0f} ms (the on-demand run's "
            f"{d['ondemand_critical_path_GBps']:.2f} GB/s copy rate) = {1000 * bound:.0f} ms/token = "
            f"{1 / bound:.2f} tok/s, {x(1 / bound / od)} on-demand ({rule}; the script now computes this "
            f"bound, with the page cache's copy rate measured on its own). On-demand ({od:.2f} tok/s) is "
            f"within {pct(1 - od * bound)} of it.")


def offload_v(key: str) -> str:
    o, b = J("offload-odirect.json"), J("offload-buffered.json")
    om = o["modes"]
    expert = o["expert_bytes"] / (4 * 8)  # 4 layers x 8 experts
    vals = {
        "expert_mb": f"{expert / 1e6:.0f} MB",
        "expert_read_ms": f"{1000 * expert / (o['odirect_GBps_best'] * 1e9):.0f} ms",
        "full_x": x(om["full"]["speedup_vs_ondemand"]),
        "ceiling_x": x(1 / offload_ceiling(o)[0] / om["ondemand"]["decode_tps"]),
        "always_x": x(om["full-always"]["speedup_vs_ondemand"]),
        "always_bytes": pct(om["full-always"]["bytes_read_per_token"] / om["ondemand"]["bytes_read_per_token"] - 1),
        "hidden_buffered": pct(b["modes"]["full"]["hidden_read_fraction"]),
        "budget": pct(o["cache_rate"]),
        "experts_x_budget": f"{1 / o['cache_rate']:.1f}x",
        "reps": str(o["reps"]),
    }
    return vals[key]


# ----------------------------------------------------------------------------------------------
# Bigger than RAM (bench_bigger_than_ram.py, causal_ceiling.py)

def btr(f: str, model: str) -> dict:
    return J(f)["models"][model]


def btr_table() -> str:
    d = J("bigger-than-ram.json")
    m = btr("bigger-than-ram.json", "mixtral")
    rows = ["| free RAM | llama.cpp default | llama.cpp, repacking off | moeflow, no flags (auto) | ratio | "
            "% of the Belady bound | threads: llama.cpp / moeflow (compute + I/O) |",
            "|---|---:|---:|---:|---:|---:|---|"]
    names = {"0.5": "1/2", "0.25": "1/4"}
    for key, lv in m["levels"].items():
        e = lv["engines"]
        cell = lambda en: ("OOM-killed" if e[en]["status"] == "oom-killed" else f"{e[en]['decode_tps']:.2f} tok/s")  # noqa: E731
        io = (e["moeflow-auto"].get("io_threads") or lv["plan"].get("io_threads"))
        rows.append(f"| {names.get(key, key)} ({lv['limit_bytes'] / GIB:.2f} GiB) | {cell('llama.cpp')} | "
                    f"{cell('llama.cpp-norepack')} | {cell('moeflow-auto')} | {x(lv['auto_vs_norepack'])} | "
                    f"{pct(lv['bound']['auto_fraction'])} | {d['threads']} + 0 / {d['threads']} + {io} |")
    return "\n".join(rows)


def btr_note() -> str:
    d = J("bigger-than-ram.json")
    m = btr("bigger-than-ram.json", "mixtral")
    lv = m["levels"]
    ll = [lv[k]["engines"]["llama.cpp-norepack"]["achieved_read_GBps"] for k in lv]
    mf = [lv[k]["engines"]["moeflow-auto"]["achieved_read_GBps"] for k in lv]
    q = lv["0.25"]
    auto_b = q["engines"]["moeflow-auto"]["bytes_read_per_token"]
    read_s = auto_b / (q["bound_read_GBps"] * 1e9)
    at_disk = max(read_s, m["resident"]["compute_s_per_token"]) * q["engines"]["moeflow-auto"]["decode_tps"]
    return (f"(moeflow {d['moeflow_commit']}, medians of {d['reps']} interleaved reps, "
            f"{1000 * m['resident']['compute_s_per_token']:.0f} ms/token all resident, `bench/bigger-than-ram.json`; "
            f"{d['threads']} compute threads for both engines, moeflow's I/O threads beside them as auto chose. "
            f"llama.cpp's mmap read at {min(ll):.1f}-{max(ll):.1f} GB/s here, moeflow at {min(mf):.1f}-{max(mf):.1f} "
            f"GB/s.) The 85% target is out of reach of any causal cache on this routing: the\nsimulator's best live "
            f"policy ({q['bound']['sim_policy']}) reads {mb(q['bound']['sim_lfu_bytes_per_token'])} MB per token at 1/4 "
            f"where Belady reads {mb(q['bound']['belady_bytes_per_token'])}; moeflow\nreads {mb(auto_b)} and decodes "
            f"at {pct(at_disk)} of what those bytes take at the disk's best measured bandwidth "
            f"({q['bound_read_GBps']:.2f} GB/s at 1/4, the bound's rate).")


def causal_note() -> str:
    c = J("causal-ceiling.json")
    cells, below, auto_share = [], 0, []
    for name, m in c["models"].items():
        for key, lv in m["levels"].items():
            best = max(r["ceiling_best"] for r in lv["routings"].values())
            cells.append((name, key, best))
            below += best < c["target"]
            if name == "mixtral":
                b = lv["routings"]["bench"]
                auto_share.append(lv["auto_fraction"] / b["ceiling_auto"])
    worst = max(b for _, _, b in cells if b < c["target"])
    return (f"in {below} of the {len(cells)} cells no causal policy can reach more than {pct(worst)} of the bound "
            f"(target {pct(c['target'])}), so the target, set for every level, is out of reach of any cache that "
            f"cannot see the future; moeflow\nis at {pct(min(auto_share))}-{pct(max(auto_share))} of its policy's "
            f"ceiling on the Mixtral shape (benchmark routing; `bench/causal-ceiling.json`).")


def qwen3_note() -> str:
    d = J("bigger-than-ram-qwen3.json")
    m = btr("bigger-than-ram-qwen3.json", "qwen3")
    lv = m["levels"]
    h, q = lv["0.5"], lv["0.25"]

    def e(lvl, en, k="decode_tps"):
        return lvl["engines"][en][k]
    oom = all(lvl["engines"]["llama.cpp"]["status"] == "oom-killed" for lvl in lv.values())
    io = "/".join(str(lvl["plan"].get("io_threads")) for lvl in (h, q))
    return (f"The Qwen3-30B-A3B shape ({m['layers']} layers, 128 experts top-8, {m['info']['file_bytes'] / GIB:.2f} GiB; "
            f"`--models qwen3`,\n[report](bench/REPORT-bigger-than-ram-qwen3.md), `bench/bigger-than-ram-qwen3.json`, "
            f"moeflow {d['moeflow_commit']}, disk {m['odirect_best_GBps']:.2f} GB/s best): llama.cpp default "
            f"{'OOM-killed at both levels' if oom else 'see the report'},\nrepacking off {e(h, 'llama.cpp-norepack'):.2f} / "
            f"{e(q, 'llama.cpp-norepack'):.2f} tok/s; moeflow auto **{e(h, 'moeflow-auto'):.1f} / "
            f"{e(q, 'moeflow-auto'):.1f} tok/s ({x(h['auto_vs_norepack'], 1)} / {x(q['auto_vs_norepack'], 1)})**, "
            f"{pct(h['bound']['auto_fraction'])} / {pct(q['bound']['auto_fraction'])} of the\nBelady bound "
            f"({d['threads']} compute threads for both, moeflow with {io} I/O threads beside them). moeflow reads "
            f"{mb(e(h, 'moeflow-auto', 'bytes_read_per_token'))} / {mb(e(q, 'moeflow-auto', 'bytes_read_per_token'))} MB "
            f"per token against the simulator's {h['bound']['sim_policy']}'s {mb(h['bound']['sim_lfu_bytes_per_token'])} / "
            f"{mb(q['bound']['sim_lfu_bytes_per_token'])}. At 1/4 the same auto on the file's `moeflow pack` copy decoded "
            f"{e(q, 'moeflow-packed'):.1f} (auto now names `pack` when it\noffloads an unaligned file), at 1/2 "
            f"prefetching off {e(h, 'moeflow-noprefetch'):.1f}.")


def btr_doc_table(f: str, model: str) -> str:
    """docs/bigger-than-ram.md's per-run table: decode tok/s of every engine the run had, the
    ratio to llama.cpp without repacking and the share of the Belady bound (any run's JSON,
    bench/history/ included)."""
    d = J(f)
    m = d["models"][model]
    cols = [("llama.cpp", "llama.cpp default"), ("llama.cpp-norepack", "llama.cpp no-repack"),
            ("moeflow-auto", "moeflow auto"), ("moeflow-tight", "moeflow tight"),
            ("moeflow-noprefetch", "moeflow no prefetch"), ("moeflow-packed", "moeflow packed")]
    first = next(iter(m["levels"].values()))["engines"]
    cols = [c for c in cols if c[0] in first]
    rows = ["| free RAM | " + " | ".join(c[1] for c in cols) + " | auto / no-repack | % of bound | threads: compute + I/O (auto) |",
            "|---|" + "---:|" * (len(cols) + 2) + "---|"]
    names = {"0.5": "1/2", "0.25": "1/4"}
    for key, lv in m["levels"].items():
        e = lv["engines"]
        cells = []
        for en, _ in cols:
            c = e[en]
            v = ("OOM-killed" if c["status"] == "oom-killed" else "-" if c["decode_tps"] is None
                 else f"{c['decode_tps']:.{3 if c['decode_tps'] < 1 else 2}f}")
            cells.append(f"**{v}**" if en == "moeflow-auto" else v)
        b = lv.get("bound") or {}
        io = e["moeflow-auto"].get("io_threads") or (lv.get("plan") or {}).get("io_threads") or "?"
        rows.append(f"| {names.get(key, key)} ({lv['limit_bytes'] / GIB:.2f} GiB) | " + " | ".join(cells) +
                    f" | **{lv['auto_vs_norepack']:.2f}x** | "
                    f"{pct(b['auto_fraction']) if 'auto_fraction' in b else '-'} | {d['threads']} + {io} |")
    rows += ["", f"(moeflow {d['moeflow_commit']}, {m['shape']}, {m['layers']} layers; all resident "
                 f"{m['resident']['decode_tps']:.1f} tok/s decode, {1000 * m['resident']['compute_s_per_token']:.0f} "
                 f"ms/token; O_DIRECT best {m['odirect_best_GBps']:.2f} GB/s; medians of {d['reps']} reps; "
                 f"llama.cpp {d['threads']} compute threads, no I/O threads; `bench/{f}`.)"]
    return "\n".join(rows)


def btr_bytes(f: str, model: str) -> str:
    """Bytes per decode token at each level: moeflow auto, no prefetching, the simulator's policy
    with auto's partitioning, Belady; and auto's read rate."""
    m = J(f)["models"][model]
    parts = []
    for key, lv in m["levels"].items():
        e, b = lv["engines"], lv["bound"]
        nop = e.get("moeflow-noprefetch")
        parts.append(f"{ {'0.5': '1/2', '0.25': '1/4'}.get(key, key)}: auto {mb(e['moeflow-auto']['bytes_read_per_token'])} MB"
                     + (f", no prefetching {mb(nop['bytes_read_per_token'])}" if nop and nop.get("bytes_read_per_token") else "")
                     + f", the simulator's {b.get('sim_policy', 'lfu')} {mb(b['sim_lfu_bytes_per_token'])}, Belady "
                     f"{mb(b['belady_bytes_per_token'])}; auto read at {e['moeflow-auto']['achieved_read_GBps']:.2f} GB/s")
    return "; ".join(parts)


def causal_doc_table() -> str:
    c = J("causal-ceiling.json")
    rows = ["| shape, level (slots) | routing | Belady | best causal | auto's policy | ceiling: best / auto's | measured |",
            "|---|---|---:|---:|---:|---:|---:|"]
    names = {"0.5": "1/2", "0.25": "1/4"}
    for name, m in c["models"].items():
        for key, lv in m["levels"].items():
            for rname, r in lv["routings"].items():
                bc = r["best_causal"]
                part = "global" if bc["partition"] == "global" else "per layer"
                rows.append(f"| {name.capitalize()} {names.get(key, key)} ({lv['n_slots']}) | {rname} | {r['belady']:.2f} | "
                            f"{bc['reads']:.2f} ({bc['policy']}, {part}) | {r['auto']:.2f} ({lv['auto_policy']}) | "
                            f"{pct(r['ceiling_best'])} / {pct(r['ceiling_auto'])} | "
                            f"{pct(lv['auto_fraction']) if rname == 'bench' else ''} |")
    rows += ["", f"(`bench/causal-ceiling.json`; routings of {c['prompts']} corpus prompts with {c['n_gen_prompt']} "
                 f"generated tokens each, and the benchmark's own.)"]
    return "\n".join(rows)


def dynamic(name: str):
    """Parametrised regions: btr-doc:FILE:MODEL, btr-bytes:FILE:MODEL (FILE relative to bench/)."""
    kind, _, rest = name.partition(":")
    f, _, model = rest.rpartition(":")
    if kind == "btr-doc" and f:
        return (lambda: btr_doc_table(f, model)), f"bench/{f}"
    if kind == "btr-bytes" and f:
        return (lambda: btr_bytes(f, model)), f"bench/{f}"
    return None


# ----------------------------------------------------------------------------------------------
# Lossy modes (bench_lossy.py)

def lossy_row(rate: str, mode_prefix: str, model: str = "demo") -> dict:
    rows = J("lossy.json")[model]["rates"][rate]
    return next(r for r in rows if r["mode"].startswith(mode_prefix))


def lossy_table() -> str:
    rows = ["| budget | mode | bytes / token | decode | perplexity |", "|---|---|---:|---:|---:|"]
    spec = [("0.25", "hobbit (calibrated", "hobbit (calibrated T1 0, T2 0.9)"), ("0.25", "skip 0.1", "skip 0.1"),
            ("0.25", "daop", "daop"), ("0.25", "precalc", "precalc (stale input)"),
            ("0.5", "hobbit (calibrated", "hobbit (calibrated)"), ("0.5", "skip 0.1", "skip 0.1"),
            ("0.5", "daop", "daop"), ("0.5", "precalc", "precalc (stale input)")]
    for rate, prefix, label in spec:
        r = lossy_row(rate, prefix)
        rows.append(f"| {pct(float(rate))} | {label} | {pct(-r['bytes_saved'], sign=True)} | "
                    f"{x(r['speedup_paired'])} | {pct(r['ppl_increase'], 2 if abs(r['ppl_increase']) < 0.01 else 1, True)} |")
    return "\n".join(rows)


def lossy_target() -> str:
    """The hobbit target (>= 30% fewer bytes, >= 1.2x decode, <= 1% perplexity) per budget."""
    met = {}
    for rate in ("0.25", "0.5"):
        h = lossy_row(rate, "hobbit (calibrated")
        met[rate] = h["bytes_saved"] >= 0.30 and h["speedup_paired"] >= 1.2 and h["ppl_increase"] <= 0.01
    say = lambda r: f"{'met' if met[r] else 'not met'} at {pct(float(r))}"  # noqa: E731
    return f"{say('0.5')}, {say('0.25')} in this run"


def lossy_note() -> str:
    d = J("lossy.json")
    ex, hb = lossy_row("0.25", "exact"), lossy_row("0.25", "hobbit (calibrated")
    f16 = d["mixtral_f16"]
    h = [lossy_row(r, "hobbit (T1 0,", "mixtral_f16")["speedup_paired"] for r in ("0.25", "0.5")]
    pc = lossy_row("0.5", "precalc", "mixtral_f16")
    pcd = [lossy_row(r, "precalc") for r in ("0.25", "0.5")]
    return (f"At 25% exact mode decodes the demo at {ex['decode_tps']:.0f} tok/s reading "
            f"{ex['bytes_per_token'] / 1e6:.2f} MB/token and hobbit at {hb['decode_tps']:.0f}; on the demo the "
            f"prefetch arrival rule sits near its threshold and paired speedups swing between runs.\nOn a "
            f"Mixtral-shaped F16 model ({f16['model']}; {d['reps_random']} reps of "
            f"{d.get('random_tokens', 8)} tokens, O_DIRECT) hobbit (T1 0, T2 0.9) decodes "
            f"{x(min(h))}-{x(max(h))} faster. Stale-input pre-calculation costs the demo "
            f"{pct(pcd[0]['ppl_increase'], 0, True)} / {pct(pcd[1]['ppl_increase'], 0, True)} perplexity "
            f"(bytes {pct(-pcd[0]['bytes_saved'], sign=True)} / {pct(-pcd[1]['bytes_saved'], sign=True)}, decode "
            f"{x(pcd[0]['speedup_paired'])} / {x(pcd[1]['speedup_paired'])} at 25% / 50%); on the F16 Mixtral "
            f"shape at 50% it read {fewer_or_more(pc['bytes_saved'])} bytes and decoded {x(pc['speedup_paired'])} "
            f"(its accuracy there is not measured: random weights).\n(moeflow {d['commit']}, {d['date']}, "
            f"`bench/lossy.json`.)")


def lossy_doc_table() -> str:
    """docs/lossy-modes.md's results table: demo, Mixtral F16 (speed) and Mixtral Q4_K (KL)."""
    rows = ["| model, budget | mode | bytes / token vs exact | decode vs exact (paired) | perplexity | mean KL |",
            "|---|---|---:|---:|---:|---:|"]
    demo = [("hobbit (calibrated", "hobbit, calibrated (T1 0, T2 0.9)", "hobbit, calibrated"),
            ("hobbit (T1 0.6", "hobbit, defaults (0.6, 0.9)", "hobbit, defaults"), ("skip 0.1", "skip 0.1", "skip 0.1"),
            ("daop", "daop", "daop"), ("precalc", "precalc (exact experts)", "precalc (exact experts)")]
    for rate in ("0.25", "0.5"):
        for prefix, label25, label50 in demo:
            r = lossy_row(rate, prefix)
            rows.append(f"| demo, {pct(float(rate))} | {label25 if rate == '0.25' else label50} | "
                        f"{pct(-r['bytes_saved'], 1, True)} | {x(r['speedup_paired'])} | "
                        f"{pct(r['ppl_increase'], 2 if abs(r['ppl_increase']) < 0.1 else 1, True)} | "
                        f"{r['kl_divergence']:.4f} |")
    for rate in ("0.25", "0.5"):
        for prefix, label in (("hobbit (T1 0,", "hobbit (0, 0.9), Q4_0 copies"), ("precalc", "precalc")):
            r = lossy_row(rate, prefix, "mixtral_f16")
            rows.append(f"| Mixtral-shaped F16, {pct(float(rate))} | {label} | {pct(-r['bytes_saved'], 1, True)} | "
                        f"{x(r['speedup_paired'])} | | |")
    for rate, prefix, label in (("0.25", "hobbit (T1 0.6", "hobbit (0.6, 0.9), Q2_K copies"),
                                ("0.25", "skip 0.1", "skip 0.1"), ("0.5", "precalc", "precalc")):
        r = lossy_row(rate, prefix, "mixtral_q4k")
        rows.append(f"| Mixtral-shaped Q4_K, {pct(float(rate))} | {label} | {pct(-r['bytes_saved'], 1, True)} | "
                    f"| | {r['kl_divergence']:.4f} |")
    d = J("lossy.json")
    rows += ["", f"(moeflow {d['commit']}, {d['date']}, {d['machine']}; demo: medians of {d['reps']} reps; "
                 f"Mixtral-shaped F16: {d['reps_random']} reps of {d.get('random_tokens', 8)} tokens; `bench/lossy.json`.)"]
    return "\n".join(rows)


def lossy_v(key: str) -> str:
    h25, h50 = lossy_row("0.25", "hobbit (calibrated"), lossy_row("0.5", "hobbit (calibrated")
    ex25, pcs = lossy_row("0.25", "exact"), [lossy_row(r, "precalc") for r in ("0.25", "0.5")]
    f16 = [lossy_row(r, "hobbit (T1 0,", "mixtral_f16")["speedup_paired"] for r in ("0.25", "0.5")]
    pf = lossy_row("0.5", "precalc", "mixtral_f16")
    use = [(p.get("uses") or {}) for p in pcs]
    share = [u.get("precalc", 0) / u["high"] for u in use if u.get("high")]
    taken = [u.get("precalc", 0) / u["precalc_computed"] for u in use if u.get("precalc_computed")]
    q4 = [lossy_row(r, "hobbit (T1 0.6", "mixtral_q4k")["bytes_saved"] for r in ("0.25", "0.5")]
    sk = lossy_row("0.25", "skip 0.1", "mixtral_q4k")["bytes_saved"]
    vals = {
        "h50": f"{pct(-h50['bytes_saved'])}, {x(h50['speedup_paired'])}, {pct(h50['ppl_increase'], 2, True)}",
        "h25": f"{pct(-h25['bytes_saved'])}, {x(h25['speedup_paired'])}, {pct(h25['ppl_increase'], 2, True)}",
        "exact25": f"{ex25['bytes_per_token'] / 1e6:.2f} MB/token and {ex25['decode_tps']:.0f} tok/s",
        "hobbit25_tps": f"{h25['decode_tps']:.0f} tok/s",
        "f16_range": f"{x(min(f16))}-{x(max(f16))}",
        "f16_reps": f"{J('lossy.json')['reps_random']} reps of {J('lossy.json').get('random_tokens', 8)} tokens",
        "q4_hobbit": f"{pct(min(q4))}-{pct(max(q4))}",
        "q4_skip": pct(sk),
        "pc_demo": (f"{pct(-pcs[0]['bytes_saved'], 1, True)} / {pct(-pcs[1]['bytes_saved'], 1, True)} bytes, "
                    f"{x(pcs[0]['speedup_paired'])} / {x(pcs[1]['speedup_paired'])} decode, "
                    f"{pct(pcs[0]['ppl_increase'], 0, True)} / {pct(pcs[1]['ppl_increase'], 0, True)} perplexity"),
        "pc_share": " / ".join(pct(v, 1) for v in share),
        "pc_taken": " / ".join(pct(v) for v in taken),
        "pc_f16": f"{fewer_or_more(pf['bytes_saved'])} bytes and decoded {x(pf['speedup_paired'])}",
    }
    return vals[key]


# ----------------------------------------------------------------------------------------------
# Server (bench_prefix_cache.py, soak_server.py)

def prefix_note() -> str:
    p = J("prefix-cache.json")
    s = p["summary"]
    g = p["gen_model_args"] or []
    arg = lambda k: g[g.index(k) + 1] if k in g else "?"  # noqa: E731
    return (f"`python3 bench/bench_prefix_cache.py`: a {p['turns']}-turn chat ({p['max_tokens']}-token greedy replies) "
            f"through `moeflow serve --cache-rate {p['server']['cache_rate']}` on a\n{arg('--layers')}-layer, "
            f"{arg('--experts')}-expert model of Qwen3-30B-A3B's layer shape ({arg('--type')}); time to first token of "
            f"turn {p['turns']} ({s['no-prefix-cache']['prompt_tokens_by_turn'][-1]:,.0f}-token prompt) "
            f"{p['turn10_ttft_s']['no_prefix_cache']:.1f} s without\nthe prompt cache, "
            f"{p['turn10_ttft_s']['prefix_cache']:.1f} s with it ({p['speedup_turn10']:.1f}×; "
            f"{s['prefix-cache']['cached_tokens_by_turn'][-1]:,.0f} tokens reused), the replies "
            f"{'identical' if p['replies_identical_across_modes'] else 'NOT identical'} (medians of {p['reps']} reps, "
            f"`bench/prefix-cache.json`).")


def soak_note() -> str:
    s = J("soak.json")
    lat = s["latency"]
    kib = s["rss_kib"]
    return (f"`python3 bench/soak_server.py`: {s['requests']:,} requests from {s['clients']} clients: "
            f"{'a crash' if s['crashed'] else '0 crashes'}, {s['valid']['ok']:,}/{s['valid']['n']:,} well-formed "
            f"answered, {s['malformed']['4xx']:,}/{s['malformed']['n']:,} malformed answered\n4xx, "
            f"{s['disconnects']:,} streams dropped mid-way; RSS {kib['soak_start'] / 1024:.1f} MiB at the start of the "
            f"soak, {kib['soak_end'] / 1024:.1f} MiB at its end; p50/p99 latency\n{lat['valid']['p50_ms']:.0f}/"
            f"{lat['valid']['p99_ms']:.0f} ms (generation requests), {lat['malformed']['p50_ms']:.1f}/"
            f"{lat['malformed']['p99_ms']:.1f} ms (malformed); {health_range()} (p50) beside "
            f"{s['phase_idle']['idle_connections']}\nidle connections and beside {s['phase_slowloris']['half_open']} "
            f"half-open + {s['phase_slowloris']['trickling']} slowloris sockets (`bench/soak.json`).")


def prefix_report() -> str:
    """bench/REPORT-prefix-cache.md, whole: bench_prefix_cache.report_text() on the JSON."""
    sys.path.insert(0, BENCH)
    import bench_prefix_cache
    return bench_prefix_cache.report_text(J("prefix-cache.json"))


def lossy_report() -> str:
    """bench/REPORT-lossy.md, whole: bench_lossy.report() on the JSON."""
    sys.path.insert(0, BENCH)
    import bench_lossy
    return bench_lossy.report(J("lossy.json"))


def health_range() -> str:
    s = J("soak.json")
    a, b = sorted((s["phase_idle"]["p50_ms"], s["phase_slowloris"]["p50_ms"]))
    return f"`/health` answers in {a:.1f}-{b:.1f} ms"


# ----------------------------------------------------------------------------------------------
# Simulator (bench/sim_report.sh -> bench/sim/grid_*.csv)

def sim_table() -> str:
    rows = ["| cache rate | LRU | LFU | best policy + predictor | Belady (demand-only) | Belady + perfect prefetch |",
            "|---|---:|---:|---:|---:|---:|"]
    g = grid("pcie4x16")
    for rate in ("0.2500", "0.5000"):
        r = [row for row in g if row["cache_rate"] == rate]
        hit = lambda p, q: 100 * float(next(row["hit_rate"] for row in r  # noqa: E731
                                           if row["policy"] == p and row["predictor"] == q))
        causal = [row for row in r if not row["policy"].startswith("belady") and row["predictor"] != "oracle"]
        best = max(causal, key=lambda row: float(row["hit_rate"]))
        name = best["policy"] + ("" if best["predictor"] == "none" else " + " + best["predictor"])
        rows.append(f"| {float(rate):.0%} | {hit('lru', 'none'):.1f} | {hit('lfu', 'none'):.1f} | "
                    f"{100 * float(best['hit_rate']):.1f} ({name}) | {hit('belady', 'none'):.1f} | "
                    f"{hit('belady', 'oracle'):.1f} |")
    return "\n".join(rows)


def sim_gap() -> str:
    g = [row for row in grid("pcie4x16") if row["cache_rate"] == "0.5000"]
    best = max(float(row["hit_rate"]) for row in g
               if not row["policy"].startswith("belady") and row["predictor"] != "oracle")
    bel = float(next(row["hit_rate"] for row in g if row["policy"] == "belady" and row["predictor"] == "none"))
    return f"{100 * (bel - best):.0f}"


def sim_hit(policy: str, predictor: str, rate: str, hw: str = "pcie4x16") -> str:
    row = next(r for r in grid(hw) if r["policy"] == policy and r["predictor"] == predictor
               and r["cache_rate"] == rate)
    return f"{100 * float(row['hit_rate']):.1f}%"


def gpu_cases(what: str) -> str:
    """The GpuVsCpu case grid, counted from tests/gpu/test_gpu_logits.cpp's cases() (not a
    benchmark, but a count the docs cite and that drifted once: "64 cases, 4 architectures").
    what: "n" (the stand-in device's cases), "grid" (the stand-in's grid in words), "cuda_grid"
    (CUDA's: every format on every architecture)."""
    with open(os.path.join(ROOT, "tests", "gpu", "test_gpu_logits.cpp")) as f:
        src = f.read()
    body = src[src.index("std::vector<Case> cases()"):]
    body = body[:body.index("return out;")]
    archs = re.findall(r'"([\w-]+)"', re.search(r"archs\[\] = \{([^}]*)\}", body).group(1))
    more = re.findall(r"T::(\w+)", re.search(r"more\[\] = \{([^}]*)\}", body).group(1))
    every = re.findall(r"out\.push_back\(\{d, archs\[a\], T::(\w+)\}\)", body)
    assert archs and more and every, "cases(): no archs[] / more[] / per-architecture formats"
    # The architectures run in fewer formats: `for arch : {...}` / `for t : {...}` loop pairs.
    few = [(re.findall(r'"([\w-]+)"', a), re.findall(r"T::(\w+)", t)) for a, t in re.findall(
        r"for \(const char\* arch : \{([^}]*)\}\)\s*for \(T t : \{([^}]*)\}\)", body)]
    few_n = sum(len(a) * len(t) for a, t in few)
    few_words = "".join(f" and {len(a)} x {len(t)}" for a, t in few)
    n = len(archs) * len(every) + len(more) + few_n
    grid = (f"{len(archs)} architectures x {' and '.join(every)}, the {len(more)} other formats one "
            f"architecture each{few_words.replace(' and', ',', 1)}")
    cuda_grid = f"{len(archs)} architectures x {len(every) + len(more)} formats{few_words}"
    return {"n": f"{n}", "grid": grid, "cuda_grid": cuda_grid}[what]


def sim_predictors_table() -> str:
    """docs/simulator.md's learned-predictor table from bench/sim/demo_predictors.json
    (bench/sim_predictors.py): LRU per layer on the demo model's held-out routing."""
    d = J("sim/demo_predictors.json")
    rows = ["| predictor | recall, layers 1-3 | precision | hit % @25% | hit % @50% |", "|---|---:|---:|---:|---:|"]

    def res(name, policy="lru"):
        return {r["cache_rate"]: r for r in d["sim"][name] if r["policy"] == policy}

    def recall(r, first=1):
        ls = [x for x in r["layers"] if x["layer"] >= first]
        return sum(x["prediction_recall"] * x["uses"] for x in ls) / sum(x["uses"] for x in ls)

    labels = [("none", "none"), ("gate", "gate lookahead (`gate`)"), ("token", "token id (`token`)"),
              ("promoe1", "ProMoE MLP, stride 1"), ("promoe2", "ProMoE MLP, stride 2")]
    for name, label in labels:
        r = res(name)
        q = r[0.25]
        if name == "none":
            rec, prec = "", ""
        elif name == "promoe2":
            rec, prec = f"{recall(q):.3f} (layers 2-3: {recall(q, 2):.3f})", f"{q['prediction_precision']:.3f}"
        else:
            rec, prec = f"{recall(q):.3f}", f"{q['prediction_precision']:.3f}"
        rows.append(f"| {label} | {rec} | {prec} | {100 * r[0.25]['hit_rate']:.1f} | {100 * r[0.5]['hit_rate']:.1f} |")
    b = res("none", "belady")
    rows.append(f"| Belady demand-only (future-aware, no prefetch) | | | {100 * b[0.25]['hit_rate']:.1f} | "
                f"{100 * b[0.5]['hit_rate']:.1f} |")
    o = res("oracle")
    rows.append(f"| oracle predictor (future-aware) | {recall(o[0.25]):.3f} | {o[0.25]['prediction_precision']:.3f} | "
                f"{100 * o[0.25]['hit_rate']:.1f} | {100 * o[0.5]['hit_rate']:.1f} |")
    rows += ["", f"(moeflow {d['moeflow_commit']}, {d['prompts']['eval']} evaluation prompts; "
                 f"`bench/sim/demo_predictors.json`, `python3 bench/sim_predictors.py`.)"]
    return "\n".join(rows)


def sim_train_recall() -> str:
    t = J("sim/demo_predictors.json")["train_predictor"]
    return f"**{t['1']['held_out_recall']:.3f}** at stride 1, **{t['2']['held_out_recall']:.3f}** at stride 2"


RENDER = {
    "engine": (engine_table, "bench/engine.json"),
    "engine-ab": (engine_ab, "bench/engine-ab.json"),
    "engine-tiles": (engine_tiles, "bench/engine-prefill-tiles.json"),
    "engine-newer": (engine_newer, "bench/engine-{deepseek2,gptoss,qwen35moe,qwen3next,gemma4,minimax-m2}.json"),
    "offload": (offload_table, "bench/offload-odirect.json, bench/offload-buffered.json"),
    "offload-buffered-note": (offload_buffered_note, "bench/offload-buffered.json"),
    "btr": (btr_table, "bench/bigger-than-ram.json"),
    "btr-note": (btr_note, "bench/bigger-than-ram.json"),
    "causal": (causal_note, "bench/causal-ceiling.json"),
    "causal-doc": (causal_doc_table, "bench/causal-ceiling.json"),
    "btr-qwen3": (qwen3_note, "bench/bigger-than-ram-qwen3.json"),
    "lossy": (lossy_table, "bench/lossy.json"),
    "lossy-note": (lossy_note, "bench/lossy.json"),
    "lossy.target": (lossy_target, "bench/lossy.json"),
    "lossy-doc": (lossy_doc_table, "bench/lossy.json"),
    "prefix-cache": (prefix_note, "bench/prefix-cache.json"),
    "soak": (soak_note, "bench/soak.json"),
    "health": (health_range, "bench/soak.json"),
    "prefix-cache-report": (prefix_report, "bench/prefix-cache.json"),
    "lossy-report": (lossy_report, "bench/lossy.json"),
    "sim": (sim_table, "bench/sim/grid_pcie4x16.csv"),
    "sim-gap": (sim_gap, "bench/sim/grid_pcie4x16.csv"),
    "gpu.cases": ((lambda: gpu_cases("n")), "tests/gpu/test_gpu_logits.cpp"),
    "gpu.grid": ((lambda: gpu_cases("grid")), "tests/gpu/test_gpu_logits.cpp"),
    "gpu.cuda_grid": ((lambda: gpu_cases("cuda_grid")), "tests/gpu/test_gpu_logits.cpp"),
    "sim-predictors": (sim_predictors_table, "bench/sim/demo_predictors.json"),
    "sim.train_recall": (sim_train_recall, "bench/sim/demo_predictors.json"),
    "sim.lru125": ((lambda: sim_hit("lru", "none", "0.1250")), "bench/sim/grid_pcie4x16.csv"),
    "sim.forced50": ((lambda: sim_hit("belady-forced", "none", "0.5000")), "bench/sim/grid_pcie4x16.csv"),
}
for _k in ("expert_mb", "expert_read_ms", "full_x", "ceiling_x", "always_x", "always_bytes", "hidden_buffered",
           "budget", "experts_x_budget", "reps"):
    RENDER[f"offload.{_k}"] = ((lambda k=_k: offload_v(k)), "bench/offload-odirect.json, bench/offload-buffered.json")


for _k in ("h50", "h25", "exact25", "hobbit25_tps", "f16_range", "f16_reps", "q4_hobbit", "q4_skip", "pc_demo",
           "pc_share", "pc_taken", "pc_f16"):
    RENDER[f"lossy.{_k}"] = ((lambda k=_k: lossy_v(k)), "bench/lossy.json")


RENDER["engine.deepseek_before"] = ((lambda: engine_v("deepseek_before")),
                                   "bench/history/engine-deepseek2@1031d12.json")
RENDER["engine.tiles_ab"] = ((lambda: engine_v("tiles_ab")),
                             "bench/history/engine-*@1031d12.json, bench/engine-ab.json, bench/engine-prefill-tiles.json, "
                             "bench/history/engine-*@2a2942f.json")


# Constrained decoding (bench_grammar.py): median of per-request constrained/plain ratios.
for _k, _f in (("bounded", "grammar.json"), ("unbounded", "grammar-unbounded.json"),
               ("mixtral", "grammar-mixtral.json")):
    RENDER[f"grammar.{_k}"] = ((lambda f=_f: f"{J(f)['median_ratio']:.2f}"), f"bench/{_f}")


def packed_vs_auto() -> str:
    lv = J("bigger-than-ram-qwen3.json")["models"]["qwen3"]["levels"]
    return " and ".join(f"{lv[k]['engines']['moeflow-packed']['decode_tps']:.1f} vs "
                        f"{lv[k]['engines']['moeflow-auto']['decode_tps']:.1f} tok/s at {n}"
                        for k, n in (("0.25", "1/4"), ("0.5", "1/2")))


RENDER["btr.packed_vs_auto"] = (packed_vs_auto, "bench/bigger-than-ram-qwen3.json")


def render(text: str, path: str, problems: list[str]) -> str:
    def value(name: str) -> str | None:
        if name not in RENDER and dynamic(name):
            RENDER[name] = dynamic(name)
        if name not in RENDER:
            problems.append(f"{path}: region {name!r} has no renderer in bench/render_tables.py")
            return None
        try:
            return RENDER[name][0]()
        except (OSError, KeyError, ValueError, StopIteration, TypeError) as e:
            problems.append(f"{path}: region {name}: cannot render from {RENDER[name][1]}: "
                            f"{type(e).__name__}: {e}")
            return None

    def block(m: re.Match) -> str:
        v = value(m.group(2))
        return m.group(0) if v is None else m.group(1) + v.rstrip("\n") + "\n" + m.group(4)

    def inline(m: re.Match) -> str:
        v = value(m.group(2))
        return m.group(0) if v is None else m.group(1) + v + m.group(4)

    return INLINE.sub(inline, BLOCK.sub(block, text))


def regions(text: str) -> dict[str, str]:
    out = {m.group(2): m.group(3) for m in BLOCK.finditer(text)}
    out.update({m.group(2): m.group(3) for m in INLINE.finditer(text)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a document differs")
    ap.add_argument("--list", action="store_true", help="print each document's regions and their sources")
    a = ap.parse_args()
    paths = sorted({p for pat in DOCS for p in glob.glob(os.path.join(ROOT, pat))})
    problems, stale = [], []
    for p in paths:
        rel = os.path.relpath(p, ROOT)
        with open(p) as f:
            old = f.read()
        if a.list:
            for name in regions(old):
                print(f"{rel}: {name} <- {RENDER.get(name, (None, '?'))[1]}")
            continue
        # A marker without its partner would silently leave a region unchecked.
        if old.count("<!-- table:") != len(BLOCK.findall(old)) or old.count("<!--v:") != len(INLINE.findall(old)):
            problems.append(f"{rel}: a <!-- table:NAME --> or <!--v:NAME--> marker has no closing marker")
        new = render(old, rel, problems)
        if new == old:
            continue
        if a.check:
            before, after = regions(old), regions(new)
            for name in after:
                if before.get(name) != after[name]:
                    stale.append(f"{rel}: region {name} differs from {RENDER[name][1]}")
        else:
            with open(p, "w") as f:
                f.write(new)
            print(f"rewrote {rel}", file=sys.stderr)
    for s in problems + stale:
        print(s, file=sys.stderr)
    if stale:
        print("run `python3 bench/render_tables.py` to rewrite the documents from the data", file=sys.stderr)
    return 1 if problems or stale else 0


if __name__ == "__main__":
    sys.exit(main())
