#!/usr/bin/env python3
"""Bigger-than-RAM benchmark: moeflow vs llama.cpp when the model does not fit the free memory.

Issue 17:
  "bench/bench_bigger_than_ram.py: a memory balloon leaves free RAM at 1/2 and 1/4 of the model;
  llama.cpp (default, and repacking off) vs moeflow default (auto) vs moeflow with the best
  explicit settings; Mixtral-shaped and Qwen3-30B-A3B-shaped (128 experts, top-8) models; decode
  and prefill tok/s, bytes read per token, achieved read bandwidth, RSS; a plot of decode tok/s
  against free RAM."
Targets reported: moeflow default decode >= 85% of the bound
max(compute time, Belady-missed bytes at the chosen budget / measured read bandwidth); moeflow
default >= 1.8x llama.cpp (repacking off) at 1/2 and >= 2.5x at 1/4; no OOM anywhere (an
OOM-killed run is recorded as such, the script goes on).

Models (`moeflow gen-model`, cached in /tmp like bench_engine.py): `mixtral` = Mixtral-8x7B layers
(n_embd 4096, 8 experts of 14336, top-2), `qwen3` = Qwen3-30B-A3B layers (n_embd 2048, 128
experts of 768, top-8, vocab 151936), --type Q4_K. Default layers: mixtral 4 (3.2 GiB), qwen3 8
(2.9 GiB): with 4 Qwen3 layers the non-expert weights (token_embd + output of a 151936 vocab,
350 MB) are 1/5 of the file, so at 1/4 nothing is left for experts and auto-fit refuses, which
says nothing about the real 48-layer model (non-expert ~5% of the file). `--layers 4` or
`--layers mixtral:4,qwen3:12` override.

The balloon: each measured process (`moeflow bench`, or the llama.cpp worker: this script with
--llama-worker, llama-cpp-python in a fresh process) runs alone in a fresh child memory cgroup
of this script's own cgroup (v1: memory.limit_in_bytes, and memory.memsw.limit_in_bytes where
swap accounting exists; v2: memory.max, memory.swap.max = 0) whose limit is the free-RAM level
(a fraction of the model file's size). That is an honest balloon: the cgroup charges every page
the process brings in, its anonymous memory and also the page cache it faults in (the mmap'd
GGUF of llama.cpp, the pages moeflow reads before dropping them), so the process can hold at
most that much of the file in RAM at any time, exactly as on a machine with that much free
memory; past the limit the kernel reclaims its page cache (re-read later from the disk) or, when
only anonymous memory is left, OOM-kills it inside the cgroup (recorded, the script goes on).
O_DIRECT reads bypass the page cache, so moeflow's expert reads are not cached behind its back.
moeflow's auto-fit reads the same limit (runtime/memory_facts.h), as it would in a container.
Before every run the model file's page cache is dropped (posix_fadvise DONTNEED; --drop-caches
also writes 1 to /proc/sys/vm/drop_caches) and the fraction still cached is recorded (mincore),
so every run starts cold alike: a page cached earlier would be charged to another cgroup and be
free memory for the run.

Per model:
  bandwidth : `moeflow pack --measure --sweep` (O_DIRECT, request size x queue depth x engine);
              the best point is the read bandwidth of the bound (the point at moeflow's chunk
              size and I/O depth is recorded too)
  resident  : `moeflow bench --no-offload`, page cache warm, no limit: the compute time per
              token with every expert in RAM at the same threads
  per level and rep, each engine in a fresh process, the order rotating between reps (the first
  rep starts with moeflow-auto, whose plan -- budget, margin, policy, I/O threads -- the explicit
  candidates are derived from):
  llama.cpp          : llama-cpp-python defaults (mmap, CPU weight repacking on)
  llama.cpp-norepack : the same with llama_model_params.use_extra_bufts = false (llama.cpp's
                       `--no-repack`; llama-cpp-python's Llama() has no argument for it, so the
                       worker patches llama_model_default_params)
  moeflow-auto       : `moeflow bench` with no offloading flag (--expert-cache auto), its
                       routing recorded with --trace-out
  moeflow-<cand>     : explicit settings derived from auto's plan (--best): `io` the same budget
                       with twice the I/O threads, `tight` the budget plus half of auto's margin,
                       `split` the same budget with the other partitioning (one global LFU budget
                       vs --cache-per-layer), `noprefetch` the same budget with --prefetch none
                       (demand reads only; under --routing-trace the same as auto, whose
                       default predictor is then none), `prefetch-NAME` the same budget with
                       --prefetch NAME, `policy-NAME` the same budget and partitioning with
                       --cache-policy NAME (static and daop calibrated by --policy-calib), with
                       the simulator's hits and reads for the same configuration on auto's
                       routing beside it; `packed` auto on the file's `moeflow pack` copy (expert
                       slices 4 KiB-aligned; made once beside the model); "moeflow best" is the
                       best median among them
  Belady   : `moeflow sim --policy belady --global-budget --with-prefill` on each auto run's
             trace, at the cache rate of the slots auto had (n_slots / (experts x MoE layers)):
             the fewest expert reads any policy could do with that budget on that routing
             (prefill replayed uncounted, as the live run resets its statistics before decode);
             the simulator's replay of auto's policy and partitioning too, for comparison
  bound    : time per token >= max(resident compute time, Belady missed bytes per token /
             read bandwidth), the bandwidth being the sweep's best point or, when more, the
             best a moeflow run sustained at that level (bytes read / decode time), so that a
             sweep reading low on a shared disk cannot loosen the bound;
             "% of bound" = auto decode tok/s / (1 / bound)

Every run records engine, level, rep, prefill and decode tok/s, bytes read per decode token
(moeflow: its O_DIRECT reads; llama.cpp: /proc/self/io read_bytes, i.e. page-cache misses),
achieved read GB/s (those bytes / decode time), peak RSS (wait4 ru_maxrss), the cgroup's peak
usage (page cache included), failcnt, OOM kills, exit status and the load average. Medians over
the reps are reported.

usage: bench/bench_bigger_than_ram.py [--models mixtral,qwen3] [--layers mixtral:4,qwen3:8]
         [--type Q4_K] [-p 128] [-n 16] [-t 2] [--reps 3] [--levels 0.5,0.25]
         [--best io,tight,split] [--quick] [--model-file NAME=PATH] [--no-llama]
         [--out F.json] [--report F.md] [--plot bench/bigger-than-ram.png]
One JSON object on stdout (and --out); a markdown report on stderr (and --report); the plot of
decode tok/s against free RAM (matplotlib; an ASCII chart in a .txt beside it without it).
--quick: 1 rep, -p 16 -n 4, a short bandwidth sweep, one best candidate: checks the script works,
its numbers mean little. Needs root (cgroups) and a writable memory cgroup hierarchy.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from moeflow_version import binary_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# llama-cpp-python built for this CPU by scripts/setup-deps.sh (site-packages may hold a foreign one)
sys.path.insert(0, os.path.join(ROOT, ".deps", "python"))

MODELS = {  # name: (gen-model arch, preset, default layers, description)
    "mixtral": ("mixtral", "8x7b", 4, "Mixtral-8x7B-shaped (8 experts, top-2)"),
    "qwen3": ("qwen3moe", "30b-a3b", 8, "Qwen3-30B-A3B-shaped (128 experts, top-8)"),
}
ENGINE_LABELS = {"llama.cpp": "llama.cpp default", "llama.cpp-norepack": "llama.cpp no-repack",
                 "moeflow-auto": "moeflow auto", "moeflow-best": "moeflow best"}
SPEEDUP_TARGETS = {0.5: 1.8, 0.25: 2.5}  # moeflow auto / llama.cpp no-repack, by level
BOUND_TARGET = 0.85
GIB = 1 << 30


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def bench_tokens(n: int, n_vocab: int) -> list[int]:
    """The ids `moeflow bench` feeds (src/cli/cmd_bench.cpp): a 64-bit LCG from 12345."""
    s, out = 12345, []
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        out.append((s >> 33) % n_vocab)
    return out


# ----------------------------------------------------------------------------------------------
# llama.cpp worker (its own process per run, inside the run's cgroup)

def proc_read_bytes() -> int:
    """Bytes this process made the kernel fetch from storage (page-cache misses of the mmap)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def llama_worker(model: str, n_prompt: int, n_gen: int, threads: int, repack: bool) -> None:
    import llama_cpp
    import llama_cpp.llama_cpp as C
    # llama-cpp-python's Llama() exposes no switch for llama.cpp's weight repacking (the CLI's
    # --no-repack sets llama_model_params.use_extra_bufts = false): Llama() takes its model
    # params from llama_model_default_params(), so that is where it is turned off.
    default_params = C.llama_model_default_params

    def params():
        p = default_params()
        p.use_extra_bufts = repack
        return p

    C.llama_model_default_params = params
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=model, n_ctx=max(n_prompt, n_gen) + 64, n_batch=512,
                          n_ubatch=512, n_threads=threads, n_threads_batch=threads,
                          logits_all=False, verbose=False)
    res = {"llama_cpp_version": getattr(llama_cpp, "__version__", "?"),
           "use_extra_bufts": bool(llm.model_params.use_extra_bufts),
           "load_s": time.perf_counter() - t0}
    toks = bench_tokens(max(n_prompt, n_gen), llm.n_vocab())
    if n_prompt > 0:
        llm.reset()
        r0, t0 = proc_read_bytes(), time.perf_counter()
        llm.eval(toks[:n_prompt])
        res["prefill_s"] = time.perf_counter() - t0
        res["prefill_tps"] = n_prompt / res["prefill_s"]
        res["prefill_read_bytes"] = proc_read_bytes() - r0
    if n_gen > 0:
        llm.reset()  # n_tokens = 0: the next eval drops the KV cache from position 0
        r0, t0 = proc_read_bytes(), time.perf_counter()
        for t in toks[:n_gen]:
            llm.eval([t])
        res["decode_s"] = time.perf_counter() - t0
        res["decode_tps"] = n_gen / res["decode_s"]
        res["decode_read_bytes"] = proc_read_bytes() - r0
    print(json.dumps(res), flush=True)


# ----------------------------------------------------------------------------------------------
# The balloon: memory cgroups

def _mountinfo_cgroup(version: int):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            w = line.split()
            if "-" not in w:
                continue
            d = w.index("-")
            fstype, opts = w[d + 1], w[d + 3] if len(w) > d + 3 else ""
            if version == 2 and fstype == "cgroup2":
                return w[3], w[4]
            if version == 1 and fstype == "cgroup" and "memory" in opts.split(","):
                return w[3], w[4]
    return None


def _own_cgroup_path(version: int):
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            if version == 1 and "memory" in ctrls.split(","):
                return path
            if version == 2 and hid == "0" and ctrls == "":
                return path
    return None


def _read(path: str, default: str = "") -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _kv(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        w = line.split()
        if len(w) >= 2 and w[1].lstrip("-").isdigit():
            out[w[0]] = int(w[1])
    return out


class Balloon:
    """Fresh child memory cgroups (one per run) under this process's own memory cgroup (or
    --cgroup-parent), each limited to the run's free-RAM level; removed again in cleanup()."""

    PREFIX = "moeflow-btr-"

    def __init__(self, parent: str | None = None):
        self.version = 0
        for v in (1, 2):
            m = _mountinfo_cgroup(v)
            own = _own_cgroup_path(v)
            if not m or own is None:
                continue
            root, mount = m
            if v == 2 and "memory" not in _read(os.path.join(mount, "cgroup.controllers")).split():
                continue
            rel = own[len(root):] if root != "/" and own.startswith(root) else own
            self.version, self.mount = v, mount
            self.parent = parent or os.path.normpath(mount + "/" + rel.lstrip("/"))
            break
        if not self.version:
            raise RuntimeError("no memory cgroup controller is mounted (v1 'memory' or v2 with the "
                               "memory controller): the balloon needs one")
        if self.version == 2:
            ctl = os.path.join(self.parent, "cgroup.subtree_control")
            if "memory" not in _read(ctl).split():
                try:
                    _write(ctl, "+memory")
                except OSError as e:
                    raise RuntimeError(f"cgroup v2: cannot enable the memory controller for the "
                                       f"children of {self.parent} ({e}); pass --cgroup-parent "
                                       f"with a cgroup that has it in cgroup.subtree_control")
        self.created: list[str] = []
        self.n = 0
        self._remove_stale()

    def _remove_stale(self) -> None:
        """Children a killed earlier run of this script left behind (its pid is gone)."""
        try:
            names = os.listdir(self.parent)
        except OSError:
            return
        for name in names:
            if not name.startswith(self.PREFIX):
                continue
            pid = name[len(self.PREFIX):].split("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                d = os.path.join(self.parent, name)
                if not _read(os.path.join(d, "cgroup.procs")).split():
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass

    def describe(self) -> dict:
        return {"version": self.version, "parent": self.parent}

    def create(self, limit: int) -> str:
        self.n += 1
        d = os.path.join(self.parent, f"{self.PREFIX}{os.getpid()}-{self.n}")
        os.mkdir(d)
        self.created.append(d)
        if self.version == 1:
            _write(os.path.join(d, "memory.limit_in_bytes"), str(limit))
            sw = os.path.join(d, "memory.memsw.limit_in_bytes")
            if os.path.exists(sw):  # no swap either: memory + swap <= the same limit
                try:
                    _write(sw, str(limit))
                except OSError:
                    pass
        else:
            _write(os.path.join(d, "memory.max"), str(limit))
            if os.path.exists(os.path.join(d, "memory.swap.max")):
                _write(os.path.join(d, "memory.swap.max"), "0")
        return d

    @staticmethod
    def enter(d: str):
        procs = os.path.join(d, "cgroup.procs")

        def fn():  # in the child, before exec
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        return fn

    def stats(self, d: str) -> dict:
        if self.version == 1:
            oom = _kv(_read(os.path.join(d, "memory.oom_control")))
            return {"limit_bytes": int(_read(os.path.join(d, "memory.limit_in_bytes"), "0") or 0),
                    "peak_bytes": int(_read(os.path.join(d, "memory.max_usage_in_bytes"), "0") or 0),
                    "failcnt": int(_read(os.path.join(d, "memory.failcnt"), "0") or 0),
                    "oom_kill": oom.get("oom_kill", 0)}
        ev = _kv(_read(os.path.join(d, "memory.events")))
        peak = _read(os.path.join(d, "memory.peak"), "0").strip() or "0"
        return {"limit_bytes": int(_read(os.path.join(d, "memory.max"), "0").strip() or 0),
                "peak_bytes": int(peak) if peak.isdigit() else 0,
                "failcnt": ev.get("max", 0), "oom_kill": ev.get("oom_kill", 0)}

    def remove(self, d: str) -> None:
        for pid in _read(os.path.join(d, "cgroup.procs")).split():  # only our run's processes
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        for _ in range(50):
            if not _read(os.path.join(d, "cgroup.procs")).split():
                break
            time.sleep(0.1)
        if self.version == 1 and os.path.exists(os.path.join(d, "memory.force_empty")):
            try:
                _write(os.path.join(d, "memory.force_empty"), "0")  # uncharge its page cache
            except OSError:
                pass
        try:
            os.rmdir(d)
            self.created.remove(d)
        except (OSError, ValueError):
            pass

    def cleanup(self) -> list[str]:
        for d in list(self.created):
            self.remove(d)
        return list(self.created)  # any left behind


# ----------------------------------------------------------------------------------------------
# Page cache

def drop_file_cache(path: str, global_drop: bool) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if global_drop:
        try:
            os.sync()
            _write("/proc/sys/vm/drop_caches", "1")
        except OSError:
            pass


def cached_fraction(path: str):
    """Share of the file's pages in the page cache (mincore over a mapping that faults nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        size = os.path.getsize(path)
        pg = os.sysconf("SC_PAGE_SIZE")
        n = (size + pg - 1) // pg
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        finally:
            os.close(fd)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        vec = (ctypes.c_ubyte * n)()
        rc = libc.mincore(ctypes.c_void_p(addr), size, vec)
        libc.munmap(ctypes.c_void_p(addr), size)
        if rc != 0:
            return None
        return round(1.0 - bytes(vec).count(0) / n, 4)
    except Exception:  # noqa: BLE001 - a diagnostic only
        return None


def warm_page_cache(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


# ----------------------------------------------------------------------------------------------
# Running things

class Runner:
    def __init__(self, balloon: Balloon | None):
        self.balloon = balloon
        self.current = None  # the Popen being waited for (killed on interrupt)

    def run(self, cmd: list[str], timeout: float, limit: int | None = None) -> dict:
        """cmd in a fresh cgroup limited to `limit` bytes (None: no cgroup): exit status, output,
        wall time, peak RSS (wait4), the cgroup's statistics; never raises for the command."""
        cg = self.balloon.create(limit) if limit is not None else None
        out = tempfile.TemporaryFile(mode="w+")
        err = tempfile.TemporaryFile(mode="w+")
        res = {"cmd": cmd, "rc": None, "timed_out": False}
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True,
                                 preexec_fn=Balloon.enter(cg) if cg else None)
            self.current = p
            status = ru = None
            while True:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - t0 > timeout:
                    res["timed_out"] = True
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    _, status, ru = os.wait4(p.pid, 0)
                    break
                time.sleep(0.05)
            p.returncode = os.waitstatus_to_exitcode(status)
            self.current = None
            res["rc"] = p.returncode
            res["maxrss_bytes"] = ru.ru_maxrss * 1024
        except OSError as e:  # could not start (or enter the cgroup)
            res["rc"] = -1
            res["start_error"] = str(e)
        res["wall_s"] = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        res["stdout"], res["stderr"] = out.read(), err.read()
        out.close()
        err.close()
        if cg:
            res["cgroup"] = self.balloon.stats(cg)
            self.balloon.remove(cg)
        res["oom"] = bool(res.get("cgroup", {}).get("oom_kill", 0)) or (
            res["rc"] == -signal.SIGKILL and not res["timed_out"] and limit is not None)
        res["loadavg"] = loadavg()
        return res

    def kill_current(self) -> None:
        if self.current is not None:
            try:
                os.killpg(self.current.pid, signal.SIGKILL)
            except OSError:
                pass


def last_json(text: str):
    """The JSON object a command printed: its whole output (moeflow sim --json is indented), or
    its last line that parses (moeflow bench, the llama.cpp worker)."""
    try:
        j = json.loads(text)
        if isinstance(j, dict):
            return j
    except json.JSONDecodeError:
        pass
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def check(res: dict, what: str) -> dict:
    """Output JSON of a run that must succeed (pack, sim, the resident run)."""
    j = last_json(res["stdout"]) if res["rc"] == 0 else None
    if j is None:
        raise RuntimeError(f"{what} failed (rc {res['rc']}): {' '.join(res['cmd'])}\n"
                           f"{res['stderr'][-3000:]}")
    return j


# ----------------------------------------------------------------------------------------------
# Models

def parse_layers(spec: str | None, names: list[str]) -> dict:
    layers = {n: MODELS[n][2] for n in names}
    if not spec:
        return layers
    for item in spec.split(","):
        if ":" in item:
            k, v = item.split(":", 1)
            if k not in MODELS:
                sys.exit(f"--layers: unknown model '{k}' (choose from {', '.join(MODELS)})")
            layers[k] = int(v)
        else:
            layers = {n: int(item) for n in names}
    return layers


def ensure_model(a, name: str, layers: int) -> str:
    if name in a.model_file:
        return a.model_file[name]
    arch, preset, _, _ = MODELS[name]
    types = a.type.lower().replace("_", "")
    stem = "mixtral" if arch == "mixtral" else arch.replace("-", "") + preset
    path = f"/tmp/moeflow_bench_{stem}_{layers}l_{types}.gguf"
    if not os.path.exists(path):
        tmp = f"{path}.part{os.getpid()}"
        log(f"generating {path} (once; cached) ...")
        subprocess.run([a.moeflow, "gen-model", "--arch", arch, "--preset", preset, "--layers",
                        str(layers), "--type", a.type, "-q", "-t", str(a.threads), "-o", tmp],
                       check=True, stdout=subprocess.DEVNULL)
        os.replace(tmp, path)
    return path


def model_info(path: str) -> dict:
    """Shape and byte counts from the GGUF tensor table (bench_engine's reader)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_engine import model_bytes
    return model_bytes(path)


# ----------------------------------------------------------------------------------------------
# One measured run

def replay_args(a) -> list[str]:
    """--routing-trace / --routing-request for every moeflow run (the routing replayed from a
    recorded trace, docs/simulator.md); [] without a trace."""
    if not a.routing_trace:
        return []
    return ["--routing-trace", a.routing_trace, "--routing-request", str(a.routing_request)]


def moeflow_cmd(a, model: str, extra: list[str], n_prompt: int, n_gen: int, reps: int = 1,
                replay: bool = True) -> list[str]:
    return [a.moeflow, "bench", "-m", model, "-p", str(n_prompt), "-n", str(n_gen), "--reps",
            str(reps), "--json", "-t", str(a.threads), *(replay_args(a) if replay else []), *extra]


def summarize(engine: str, res: dict, n_gen: int) -> dict:
    """The record of one measured run."""
    j = last_json(res["stdout"]) if res["rc"] == 0 else None
    r = {"engine": engine, "rc": res["rc"], "ok": j is not None, "oom": res["oom"],
         "timed_out": res["timed_out"], "wall_s": round(res["wall_s"], 2),
         "peak_rss_bytes": res.get("maxrss_bytes"), "loadavg": res["loadavg"]}
    if "cgroup" in res:
        c = res["cgroup"]
        r.update({"cgroup_limit_bytes": c["limit_bytes"], "cgroup_peak_bytes": c["peak_bytes"],
                  "cgroup_failcnt": c["failcnt"], "cgroup_oom_kill": c["oom_kill"]})
    if j is None:
        err = (res.get("start_error") or res["stderr"]).strip()
        r["error"] = err[-1500:]
        r["status"] = ("oom-killed" if res["oom"] else "timeout" if res["timed_out"] else
                       "refused" if "does not fit in memory" in err else "failed")
        return r
    r["status"] = "ok"
    r["prefill_tps"] = j.get("prefill_tps", 0.0)
    r["decode_tps"] = j.get("decode_tps", 0.0)
    dec_s = n_gen / r["decode_tps"] if r["decode_tps"] else 0.0
    if engine.startswith("moeflow"):
        off = j.get("offload") or {}
        tot = off.get("total", {})
        mem = j.get("memory", {})
        rb = tot.get("bytes_read", 0)
        r.update({"offload": bool(off.get("enabled")), "budget_bytes": off.get("budget_bytes", 0),
                  "n_slots": off.get("n_slots"), "slot_bytes": off.get("slot_bytes"),
                  "n_transient_slots": off.get("n_transient_slots"),
                  "policy": off.get("policy"), "per_layer_budget": off.get("per_layer_budget"),
                  "io_threads": off.get("io_threads"), "hit_rate": tot.get("hit_rate"),
                  "misses": tot.get("misses"), "stall_s": tot.get("stall_s"),
                  "plan": mem.get("plan"), "plan_reason": mem.get("reason"),
                  "margin_bytes": mem.get("margin_bytes"), "available_bytes": mem.get("available_bytes"),
                  "vm_hwm_bytes": mem.get("vm_hwm_bytes"),
                  "bytes_read_per_token": rb / n_gen if n_gen else 0.0,
                  "expert_bytes": j.get("expert_bytes")})
    else:
        rb = j.get("decode_read_bytes", 0)
        r.update({"use_extra_bufts": j.get("use_extra_bufts"), "load_s": j.get("load_s"),
                  "llama_cpp_version": j.get("llama_cpp_version"),
                  "bytes_read_per_token": rb / n_gen if n_gen else 0.0,
                  "prefill_read_bytes": j.get("prefill_read_bytes")})
    r["achieved_read_GBps"] = rb / dec_s / 1e9 if dec_s else 0.0
    return r


# Eviction policies that place experts by a calibration trace's counts (--policy-calib).
CALIBRATED_POLICIES = ("static", "daop")
# The live hobbit policy's score weights (lru, lfu, lhu, fld), given to the simulator so that it
# replays the same policy instead of fitting its own.
HOBBIT_WEIGHTS = "0.4,0.3,0.1,0.2"


def best_candidates(plan: dict, which: list[str], packed: str | None = None,
                    calib: str | None = None) -> dict:
    """Explicit moeflow settings derived from auto's plan at a level. An argument list that
    starts with "@PATH" runs on that file instead of the model (the packed copy)."""
    b, m = plan.get("budget_bytes") or 0, plan.get("margin_bytes") or 0
    io = plan.get("io_threads") or 2
    c = {}
    if not b:
        return c
    if "io" in which:
        c["io"] = ["--expert-cache", str(b), "--io-threads", str(min(16, 2 * io))]
    if "tight" in which:
        c["tight"] = ["--expert-cache", str(b + m // 2)]
    if "noprefetch" in which:  # demand reads only: no speculative bytes on a read-bound disk
        c["noprefetch"] = ["--expert-cache", str(b), "--prefetch", "none"]
    for w in which:  # prefetch-NAME: the same budget with predictor NAME (e.g. a history
        if w.startswith("prefetch-"):  # predictor, the ones that run under a routing replay)
            c[w] = ["--expert-cache", str(b), "--prefetch", w[len("prefetch-"):]]
    for w in which:  # policy-NAME: the same budget and partitioning with eviction policy NAME
        if w.startswith("policy-"):
            name = w[len("policy-"):]
            if name in CALIBRATED_POLICIES and not calib:
                raise SystemExit(f"--best {w}: the {name} policy needs --policy-calib")
            c[w] = (["--expert-cache", str(b), "--cache-policy", name]
                    + (["--cache-per-layer"] if plan.get("per_layer_budget") else [])
                    + (["--policy-calib", calib] if name in CALIBRATED_POLICIES else []))
    if "packed" in which and packed:  # auto again, on the `moeflow pack` copy
        c["packed"] = ["@" + packed]
    if "split" in which:
        c["split"] = (["--expert-cache", str(b), "--cache-policy", "lfu"] if plan.get("per_layer_budget")
                      else ["--expert-cache", str(b), "--cache-policy", "lfu", "--cache-per-layer"])
    return c


def cache_rate(info: dict, places: int) -> float:
    """`places` expert slots as the simulator's --cache-rate: a share of every MoE layer's experts."""
    total = info["n_expert"] * max(1, info["n_moe_layers"])
    return min(1.0, places / total) if total else 1.0


def sim_row(a, runner: Runner, trace: str, policy: str, rate: float, per_layer: bool,
            extra: tuple = ()) -> dict:
    """`moeflow sim`'s result row for `policy` replaying `trace` (its prompt steps too, which the
    live runs also route) at `rate`, per layer or over one budget; `extra`: more sim flags."""
    res = runner.run([a.moeflow, "sim", "-t", trace, "--policy", policy, "--with-prefill",
                      *([] if per_layer else ["--global-budget"]), "--cache-rate", repr(rate),
                      "--json", *extra], timeout=600)
    return next(r for r in check(res, "moeflow sim")["results"] if r["policy"] == policy)


def belady(a, runner: Runner, trace: str, info: dict, n_slots: int, slot_bytes: int, n_gen: int,
           per_layer: bool, policy: str):
    """Belady's missed bytes per decode token on a recorded routing with n_slots expert slots
    (one global budget: the fewest reads of any partitioning), and for comparison the simulator's
    replay of the live run's policy with its partitioning (what it would read, no timing)."""
    rate = cache_rate(info, n_slots)
    if rate <= 0:
        return None

    def sim(policy: str, glob: bool) -> dict:
        row = sim_row(a, runner, trace, policy, rate, not glob)
        steps = row.get("decode_tokens") or n_gen
        misses = row["uses"] - row["hits"]
        return {"capacity": row["capacity"], "uses": row["uses"], "misses": misses,
                "decode_tokens": steps, "bytes_per_token": misses * slot_bytes / steps}

    out = dict(sim("belady", True), cache_rate=rate)
    out["sim_lfu"] = dict(sim(policy, not per_layer), per_layer=per_layer, policy=policy)
    return out


def candidate_sim(a, runner: Runner, trace: str, info: dict, plan: dict, cand: str,
                  args: list[str], places: int | None) -> dict | None:
    """What the simulator reads for a candidate's policy, predictor and partitioning with its
    `places` (the live run's slots less the transient ones of a policy that declines misses;
    auto's slots when unknown) on the routing of auto's run (`trace`): every prefetch in time
    (--hw instant, no cap),
    so for `--prefetch none` the live run's exact counts (bench/REPORT-replay.md), for a
    predictor the reads it would issue if none came late. None for candidates that change
    something else (I/O threads, budget, file)."""
    if not (cand.startswith(("policy-", "prefetch-")) or cand == "noprefetch"):
        return None
    opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    policy = opt.get("--cache-policy") or plan.get("policy") or "lfu"
    predictor = opt.get("--prefetch", "none")
    per_layer = bool(plan.get("per_layer_budget"))
    places = places or plan.get("n_slots")
    if not places or not info["n_expert"]:
        return None
    extra = ["--predictor", predictor, "--hw", "instant", "--max-prefetch", "0"]
    if policy in CALIBRATED_POLICIES:
        extra += ["--calib", opt["--policy-calib"]]
    if policy == "hobbit":
        extra += ["--hobbit-weights", HOBBIT_WEIGHTS]
    row = sim_row(a, runner, trace, policy, cache_rate(info, places), per_layer, tuple(extra))
    steps = row.get("decode_tokens") or a.n
    reads = row["demand_loads"] + row["prefetches"] + row.get("placement_loads", 0)
    return {"policy": policy, "predictor": predictor, "per_layer": per_layer, "places": places,
            "hit_rate": row["hit_rate"], "experts_read": reads, "decode_tokens": steps,
            "bytes_per_token": reads * plan["slot_bytes"] / steps}


# ----------------------------------------------------------------------------------------------

def med(vals):
    v = [x for x in vals if x is not None]
    return statistics.median(v) if v else None


def measure(a, runner: Runner, name: str, model: str, info: dict, eng: str, cands: dict,
            level: float, limit: int, rep: int, tracedir: str) -> dict:
    """One run of `eng` in a fresh cgroup of `limit` bytes, the model file's page cache dropped."""
    trace = None
    if eng.startswith("llama.cpp"):
        cmd = [sys.executable, os.path.abspath(__file__), "--llama-worker", model,
               str(a.p), str(a.n), str(a.threads), "0" if eng.endswith("norepack") else "1"]
    elif eng == "moeflow-auto":
        trace = os.path.join(tracedir, f"{name}_{level:g}_{rep}.mft")
        cmd = moeflow_cmd(a, model, ["--trace-out", trace], a.p, a.n)
    else:
        args = cands[eng[len("moeflow-"):]]
        if args and args[0].startswith("@"):
            model, args = args[0][1:], args[1:]
        cmd = moeflow_cmd(a, model, args, a.p, a.n)
    drop_file_cache(model, a.drop_caches)
    cold = cached_fraction(model)
    r = summarize(eng, runner.run(cmd, a.timeout, limit), a.n)
    r.update({"model": name, "level": level, "rep": rep, "cached_before": cold})
    if eng.startswith("moeflow-") and eng != "moeflow-auto":
        r["args"] = cands[eng[len("moeflow-"):]]
    if trace and r["ok"] and r.get("n_slots") and os.path.exists(trace):
        try:
            r["belady"] = belady(a, runner, trace, info, r["n_slots"], r["slot_bytes"], a.n,
                                 bool(r.get("per_layer_budget")), r.get("policy") or "lfu")
        except (RuntimeError, StopIteration) as e:
            r["belady_error"] = str(e)[-400:]
    if r["ok"]:
        log(f"rep {rep} {eng:20s}: prefill {r['prefill_tps']:7.2f} tok/s  decode "
            f"{r['decode_tps']:7.3f} tok/s  read {r['bytes_read_per_token'] / 1e6:7.1f} "
            f"MB/token {r['achieved_read_GBps']:5.2f} GB/s  RSS "
            f"{(r['peak_rss_bytes'] or 0) / GIB:.2f} GiB  cgroup peak "
            f"{r.get('cgroup_peak_bytes', 0) / GIB:.2f} GiB  (load {r['loadavg'][0]})")
    else:
        log(f"rep {rep} {eng:20s}: {r['status'].upper()} (rc {r['rc']}, cgroup peak "
            f"{r.get('cgroup_peak_bytes', 0) / GIB:.2f} GiB, oom_kill "
            f"{r.get('cgroup_oom_kill', 0)}): {r.get('error', '')[-200:]!r}")
    return r



def bench_model(a, runner: Runner, name: str, layers: int, tracedir: str) -> dict:
    desc = MODELS[name][3]
    model = ensure_model(a, name, layers)
    info = model_info(model)
    log(f"== {name}: {desc}, {info['n_layer']} layers, `{model}` "
        f"({info['file_bytes'] / GIB:.2f} GiB, experts {info['expert_bytes'] / GIB:.2f} GiB)")

    # O_DIRECT read bandwidth
    sweep_cmd = [a.moeflow, "pack", "--measure", "--sweep", "-m", model, "--seconds", str(a.sweep_seconds)]
    if a.quick:
        sweep_cmd += ["--sizes", "1MiB,4MiB", "--depths", "1,4", "--engines", "pread"]
    sweep = check(runner.run(sweep_cmd, timeout=a.timeout), "moeflow pack --measure --sweep")
    bw = sweep["best"]["GBps"]
    log(f"O_DIRECT read bandwidth: best {bw:.2f} GB/s ({sweep['best']['engine']}, "
        f"{sweep['best']['request_bytes'] >> 10} KiB x depth {sweep['best']['depth']})")

    packed = None
    if "packed" in a.best:  # the same model, expert slices 4 KiB-aligned by `moeflow pack`
        packed = os.path.splitext(model)[0] + "_packed.gguf"
        if not os.path.exists(packed):
            packing = runner.run([a.moeflow, "pack", "-m", model, "-o", packed + ".part"], timeout=a.timeout)
            if packing["rc"] != 0:
                raise RuntimeError(f"moeflow pack failed: {packing['stderr'][-2000:]}")
            os.replace(packed + ".part", packed)

    # Compute time with every expert resident (page cache warm, no limit). A model larger than
    # this machine's RAM cannot be resident: --resident-model names a smaller file of the same
    # shape (fewer layers), measured without the replay (its layer count differs from the
    # trace's; which experts run does not change the time), and its time per token is scaled
    # by the ratio of the bytes each token reads (resident decode streams its weights).
    res_model = a.resident_model.get(name, model)
    scale = 1.0
    if res_model != model:
        scale = info["active_bytes_per_token"] / model_info(res_model)["active_bytes_per_token"]
    warm_page_cache(res_model)
    res = runner.run(moeflow_cmd(a, res_model, ["--no-offload"], a.p, a.n, reps=a.reps,
                                 replay=res_model == model), timeout=a.timeout)
    resident = check(res, "moeflow bench --no-offload")
    resident = {**resident, "decode_tps": resident["decode_tps"] / scale,
                "prefill_tps": resident["prefill_tps"] / scale}
    compute_s = 1.0 / resident["decode_tps"]
    log(f"resident (all experts in RAM, no limit{f', {res_model} x {scale:.2f}' if scale != 1 else ''}): "
        f"prefill {resident['prefill_tps']:.2f} tok/s, "
        f"decode {resident['decode_tps']:.3f} tok/s = {1000 * compute_s:.0f} ms/token")

    out = {"model": model, "packed_copy": packed, "shape": desc, "layers": layers, "info": info,
           "odirect_sweep": sweep, "odirect_best_GBps": bw,
           "resident": {"prefill_tps": resident["prefill_tps"], "decode_tps": resident["decode_tps"],
                        "compute_s_per_token": compute_s, "peak_rss_bytes": res.get("maxrss_bytes"),
                        "measured_on": res_model, "scaled_by_active_bytes": scale},
           "levels": {}}

    for level in a.levels:
        limit = int(level * info["file_bytes"])
        log(f"-- {name} at free RAM {level:g} x model = {limit / GIB:.2f} GiB")
        # The rotation starts with moeflow-auto: its first run gives auto-fit's plan at this
        # level (budget, margin, policy, I/O threads), from which the explicit candidates follow.
        base = ["moeflow-auto"] + ([] if a.no_llama else ["llama.cpp", "llama.cpp-norepack"])
        lv = {"level": level, "limit_bytes": limit, "threads": a.threads, "plan": {}, "candidates": {},
              "runs": []}
        cands: dict = {}
        engines = list(base)
        for rep in range(a.reps):
            order = engines[rep % len(engines):] + engines[:rep % len(engines)]
            i = 0
            while i < len(order):
                eng = order[i]
                i += 1
                r = measure(a, runner, name, model, info, eng, cands, level, limit, rep, tracedir)
                lv["runs"].append(r)
                if rep == 0 and eng == "moeflow-auto":
                    lv["plan"] = {k: r.get(k) for k in (
                        "status", "budget_bytes", "margin_bytes", "n_slots", "slot_bytes", "policy",
                        "per_layer_budget", "io_threads", "available_bytes", "plan_reason", "error")}
                    log(f"auto-fit: {r.get('plan_reason') or (r.get('error') or '-').splitlines()[-1]}")
                    cands = (best_candidates(lv["plan"], a.best, packed, a.policy_calib)
                             if r["ok"] and r.get("offload") else {})
                    lv["candidates"] = cands
                    engines = base + [f"moeflow-{c}" for c in cands]
                    order = engines
        # The simulator's reads for each candidate that changes the policy or predictor, on
        # the routing of auto's first run (replay routes every run the same way).
        trace0 = os.path.join(tracedir, f"{name}_{level:g}_0.mft")
        if cands and os.path.exists(trace0):
            for c, args in cands.items():
                run = next((r for r in lv["runs"] if r["engine"] == f"moeflow-{c}" and r["ok"]
                            and r.get("n_slots")), None)
                places = run["n_slots"] - (run.get("n_transient_slots") or 0) if run else None
                try:
                    sim = candidate_sim(a, runner, trace0, info, lv["plan"], c, args, places)
                except (RuntimeError, StopIteration, KeyError) as e:
                    sim = {"error": str(e)[-400:]}
                if sim:
                    lv.setdefault("candidate_sim", {})[c] = sim
        aggregate_level(lv, engines, compute_s, bw, sweep)
        out["levels"][f"{level:g}"] = lv
    return out


def sweep_point(sweep: dict, request_bytes: int, depth: int):
    """The pread point of the sweep nearest to moeflow's request size and I/O depth."""
    pts = [p for p in sweep.get("points", []) if p["engine"] == "pread"] or sweep.get("points", [])
    if not pts or request_bytes <= 0:
        return None
    return min(pts, key=lambda p: (abs(math.log2(p["request_bytes"] / request_bytes)),
                                   abs(math.log2(p["depth"] / max(1, depth)))))


def aggregate_level(lv: dict, engines: list[str], compute_s: float, bw: float, sweep: dict) -> None:
    """Medians per engine, moeflow best, the bound and the targets of one level."""
    p = lv.get("plan") or {}
    if p.get("slot_bytes"):  # a slot holds an expert's 3 projections, read as 3 chunks
        lv["odirect_at_moeflow"] = sweep_point(sweep, p["slot_bytes"] // 3, p.get("io_threads") or 1)
    eng = {}
    for e in engines:
        rs = [r for r in lv["runs"] if r["engine"] == e]
        ok = [r for r in rs if r["ok"]]
        eng[e] = {"n_ok": len(ok), "n_runs": len(rs), "n_oom": sum(r["oom"] for r in rs),
                  "status": "ok" if ok else (rs[0]["status"] if rs else "not run"),
                  "decode_tps": med(r["decode_tps"] for r in ok),
                  "prefill_tps": med(r["prefill_tps"] for r in ok),
                  "bytes_read_per_token": med(r["bytes_read_per_token"] for r in ok),
                  "hit_rate": med(r.get("hit_rate") for r in ok),
                  "achieved_read_GBps": med(r["achieved_read_GBps"] for r in ok),
                  "peak_rss_bytes": med(r.get("peak_rss_bytes") for r in rs),
                  "cgroup_peak_bytes": med(r.get("cgroup_peak_bytes") for r in rs),
                  # compute threads (-t, the same for every engine) and, for moeflow, the I/O
                  # threads beside them (llama.cpp has none: its reads are page faults taken by
                  # its compute threads)
                  "compute_threads": lv.get("threads"),
                  "io_threads": (next((r.get("io_threads") for r in ok if r.get("io_threads")), None)
                                 if e.startswith("moeflow") else 0)}
    cands = [e for e in engines if e.startswith("moeflow-") and e != "moeflow-auto"
             and eng[e]["decode_tps"] is not None]
    if cands:
        b = max(cands, key=lambda e: eng[e]["decode_tps"])
        eng["moeflow-best"] = dict(eng[b], candidate=b)
    lv["engines"] = eng
    auto = eng.get("moeflow-auto", {})
    replayed = [r["belady"] for r in lv["runs"] if r["engine"] == "moeflow-auto" and r.get("belady")]
    bel = [b["bytes_per_token"] for b in replayed]
    bound = None
    # The read bandwidth of the bound: the sweep's best point, or what a moeflow run itself
    # sustained if that was more (a short sweep on a shared disk can read low), so the bound is
    # never too loose.
    inrun = [r["achieved_read_GBps"] for r in lv["runs"] if r["engine"].startswith("moeflow") and r["ok"]]
    bw = max([bw] + inrun)
    lv["bound_read_GBps"] = bw
    if bel:
        bb = med(bel)
        read_s = bb / (bw * 1e9)
        tpot = max(compute_s, read_s)
        lfu = med(b["sim_lfu"]["bytes_per_token"] for b in replayed)
        bound = {"belady_bytes_per_token": bb, "sim_lfu_bytes_per_token": lfu,
                 "sim_policy": replayed[0]["sim_lfu"].get("policy"),
                 "read_s_per_token": read_s,
                 "compute_s_per_token": compute_s, "bound_s_per_token": tpot,
                 "bound_tps": 1.0 / tpot, "bound_by": "compute" if compute_s >= read_s else "read"}
        if auto.get("decode_tps"):
            bound["auto_fraction"] = auto["decode_tps"] * tpot
    lv["bound"] = bound
    t = {}
    if bound and "auto_fraction" in bound:
        t[f"auto_ge_{BOUND_TARGET:.2f}_of_bound"] = {"value": bound["auto_fraction"],
                                                      "met": bound["auto_fraction"] >= BOUND_TARGET}
    nr = eng.get("llama.cpp-norepack")
    want = SPEEDUP_TARGETS.get(round(lv["level"], 4))
    if nr is not None and auto.get("decode_tps"):
        if nr["decode_tps"]:
            ratio = auto["decode_tps"] / nr["decode_tps"]
            lv["auto_vs_norepack"] = ratio
            if want:
                t[f"auto_ge_{want}x_llama_norepack"] = {"value": ratio, "met": ratio >= want}
        elif want:  # the baseline did not finish (OOM, timeout): moeflow's side of it is met
            t[f"auto_ge_{want}x_llama_norepack"] = {"value": None, "met": True,
                                                   "note": f"llama.cpp no-repack {nr['status']}"}
    mf_oom = sum(v["n_oom"] for k, v in eng.items() if k.startswith("moeflow-") and k != "moeflow-best")
    t["no_oom_moeflow"] = {"value": mf_oom, "met": mf_oom == 0}
    lv["targets"] = t


# ----------------------------------------------------------------------------------------------
# Report and plot

def fmt_cell(e: dict | None, key: str = "decode_tps", digits: int = 3) -> str:
    if not e:
        return "-"
    v = e.get(key)
    if v is None:
        return {"oom-killed": "OOM", "refused": "refused", "timeout": "timeout"}.get(e["status"], e["status"])
    s = f"{v:.{digits}f}"
    if e.get("n_oom"):
        s += f" ({e['n_oom']} OOM)"
    return s


def io_threads_of(lv: dict):
    """moeflow auto's I/O threads at a level: what its runs reported, else its plan's ("-" when
    it did not offload)."""
    e = (lv.get("engines") or {}).get("moeflow-auto") or {}
    return e.get("io_threads") or (lv.get("plan") or {}).get("io_threads") or "-"


def report(res: dict, a) -> str:
    lines = ["# Bigger than RAM (issue 17)", "",
             f"moeflow {res['moeflow_commit']}, {res['nproc']} cores, {a.threads} compute threads for "
             f"every engine (llama.cpp n_threads = n_threads_batch = {a.threads}, no I/O threads: its "
             f"reads are page faults in those threads; moeflow's I/O threads, which wait on reads, "
             f"are named per level below and in the `threads` column), "
             f"-p {a.p} -n {a.n}, median of {a.reps} reps; balloon: cgroup v{res['cgroup']['version']} "
             f"memory limit = free-RAM level x model file; page cache of the model dropped before "
             f"every run; load average {res['loadavg_start']} -> {res['loadavg_end']}"
             + (" (--quick: the numbers mean little)" if a.quick else ""), ""]
    if a.routing_trace:
        lines += [f"**Routing replayed** from `{a.routing_trace}` (request {a.routing_request}): "
                  "every moeflow run takes its routers' choices from the trace (`--routing-trace`); "
                  "llama.cpp cannot replay a routing, so it is not run.", ""]
    for name, m in res["models"].items():
        if "error" in m:
            lines += [f"## {name}: FAILED: {m['error']}", ""]
            continue
        info = m["info"]
        lines += [f"## {m['shape']}, {m['layers']} layers ({info['file_bytes'] / GIB:.2f} GiB; "
                  f"experts {info['expert_bytes'] / GIB:.2f} GiB)", "",
                  f"all resident (no limit): decode {m['resident']['decode_tps']:.3f} tok/s, "
                  f"prefill {m['resident']['prefill_tps']:.2f} tok/s; O_DIRECT read "
                  f"{m['odirect_best_GBps']:.2f} GB/s (best of pack --measure --sweep)", "",
                  "decode tok/s:", "",
                  "| free RAM | llama.cpp default | llama.cpp no-repack | moeflow auto | moeflow best "
                  "| auto / no-repack | % of bound | threads: llama.cpp / moeflow auto (compute + I/O) |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for key, lv in m["levels"].items():
            e = lv["engines"]
            ratio = lv.get("auto_vs_norepack")
            b = lv.get("bound") or {}
            pct = f"{100 * b['auto_fraction']:.0f}%" if "auto_fraction" in b else "-"
            best = e.get("moeflow-best")
            lines.append(
                f"| {key} ({lv['limit_bytes'] / GIB:.2f} GiB) | {fmt_cell(e.get('llama.cpp'))} | "
                f"{fmt_cell(e.get('llama.cpp-norepack'))} | {fmt_cell(e.get('moeflow-auto'))} | "
                f"{fmt_cell(best)}{' (' + best['candidate'][8:] + ')' if best else ''} | "
                f"{f'{ratio:.2f}x' if ratio else '-'} | "
                f"{pct} | {a.threads} + 0 / {a.threads} + {io_threads_of(lv)} |")
        lines += ["", "| free RAM | engine | prefill tok/s | decode tok/s | read MB/token | read GB/s "
                  "| peak RSS GiB | cgroup peak GiB | runs ok / OOM |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for key, lv in m["levels"].items():
            for en, e in lv["engines"].items():
                if en == "moeflow-best":
                    continue
                rb = e.get("bytes_read_per_token")
                lines.append(
                    f"| {key} | {en} | {fmt_cell(e, 'prefill_tps', 2)} | {fmt_cell(e)} | "
                    f"{f'{rb / 1e6:.1f}' if rb is not None else '-'} | "
                    f"{fmt_cell(e, 'achieved_read_GBps', 2)} | "
                    f"{(e['peak_rss_bytes'] or 0) / GIB:.2f} | {(e['cgroup_peak_bytes'] or 0) / GIB:.2f} | "
                    f"{e['n_ok']}/{e['n_runs']} ok, {e['n_oom']} OOM |")
        sims = [(key, lv) for key, lv in m["levels"].items() if lv.get("candidate_sim")]
        if sims:
            lines += ["", "live vs simulator (the same policy, predictor, partitioning and slots on "
                      "auto's routing; the simulator with every prefetch in time):", "",
                      "| free RAM | candidate | policy | predictor | decode tok/s | hit % live / sim "
                      "| read MB/token live / sim |", "|---|---|---|---|---:|---:|---:|"]
            for key, lv in sims:
                for c, sm in lv["candidate_sim"].items():
                    e = lv["engines"].get(f"moeflow-{c}") or {}
                    if "error" in sm:
                        lines.append(f"| {key} | {c} | sim failed: {sm['error'][-80:]!r} | | | | |")
                        continue
                    hr, rb = e.get("hit_rate"), e.get("bytes_read_per_token")
                    lines.append(
                        f"| {key} | {c} | {sm['policy']} | {sm['predictor']} | {fmt_cell(e)} | "
                        f"{f'{100 * hr:.1f}' if hr is not None else '-'} / {100 * sm['hit_rate']:.1f} | "
                        f"{f'{rb / 1e6:.1f}' if rb is not None else '-'} / "
                        f"{sm['bytes_per_token'] / 1e6:.1f} |")
        lines.append("")
        for key, lv in m["levels"].items():
            p = lv["plan"]
            if p.get("status") == "ok":
                lines.append(f"- {key}: auto-fit budget {(p['budget_bytes'] or 0) / GIB:.2f} GiB "
                             f"({p['n_slots']} slots, {p['policy']}"
                             f"{', per layer' if p['per_layer_budget'] else ', global'}, "
                             f"{p['io_threads']} I/O threads), margin {(p['margin_bytes'] or 0) / 2**20:.0f} MiB")
            else:
                lines.append(f"- {key}: auto-fit {p.get('status')}: {(p.get('error') or '-').splitlines()[-1]}")
            sp = lv.get("odirect_at_moeflow")
            if sp:
                lines.append(f"  O_DIRECT at moeflow's chunk size and I/O depth ({sp['request_bytes'] >> 10} KiB x "
                             f"{sp['depth']}, nearest sweep point): {sp['GBps']:.2f} GB/s")
            b = lv.get("bound")
            if b:
                lines.append(f"  bound: Belady {b['belady_bytes_per_token'] / 1e6:.1f} MB/token / "
                             f"{lv['bound_read_GBps']:.2f} GB/s = {1000 * b['read_s_per_token']:.0f} ms, "
                             f"compute {1000 * b['compute_s_per_token']:.0f} ms -> "
                             f"{b['bound_tps']:.3f} tok/s ({b['bound_by']}-bound); the simulator's "
                             f"{b.get('sim_policy') or 'lfu'} with auto's partitioning reads {b['sim_lfu_bytes_per_token'] / 1e6:.1f} MB/token "
                             f"on the same routing, moeflow auto read "
                             f"{(lv['engines']['moeflow-auto']['bytes_read_per_token'] or 0) / 1e6:.1f}")
            for k, v in lv["targets"].items():
                val = v["value"]
                vs = v.get("note") or (f"{val:.3f}" if isinstance(val, float) else str(val))
                lines.append(f"  {k}: {vs} -> {'met' if v['met'] else 'NOT met'}")
        lines.append("")
    if res.get("plot"):
        lines.append(f"plot: `{os.path.relpath(res['plot'], ROOT) if res['plot'].startswith(ROOT) else res['plot']}`")
    if res.get("ascii_plot"):
        lines += ["", "```", res["ascii_plot"], "```"]
    return "\n".join(lines) + "\n"


def series(m: dict):
    """(engine label, [(free GiB, decode tok/s or None)]) per engine of a model."""
    out = []
    for en in ("llama.cpp", "llama.cpp-norepack", "moeflow-auto", "moeflow-best"):
        pts = []
        for lv in m["levels"].values():
            e = lv["engines"].get(en)
            if e is not None:
                pts.append((lv["limit_bytes"] / GIB, e.get("decode_tps")))
        if pts:
            out.append((ENGINE_LABELS[en], sorted(pts)))
    bound = sorted((lv["limit_bytes"] / GIB, lv["bound"]["bound_tps"])
                   for lv in m["levels"].values() if lv.get("bound"))
    return out, bound


def ascii_plot(res: dict) -> str:
    lines = ["decode tok/s against free RAM (x: the level's memory limit; OOM/failed runs: 'x')"]
    for name, m in res["models"].items():
        if "levels" not in m:
            continue
        ser, bound = series(m)
        top = max([v for _, pts in ser for _, v in pts if v] + [v for _, v in bound] +
                  [m["resident"]["decode_tps"]] + [1e-9])
        lines += ["", f"{m['shape']} ({m['layers']} layers); all resident: "
                  f"{m['resident']['decode_tps']:.3f} tok/s"]
        for lv_key, lv in m["levels"].items():
            lines.append(f"  free RAM {lv['limit_bytes'] / GIB:.2f} GiB ({lv_key} x model)")
            rows = [(lab, dict(pts).get(lv["limit_bytes"] / GIB)) for lab, pts in ser]
            if lv.get("bound"):
                rows.append(("bound", lv["bound"]["bound_tps"]))
            rows.append(("all in RAM (no limit)", m["resident"]["decode_tps"]))
            for lab, v in rows:
                bar = "#" * max(1, round(50 * v / top)) if v else "x"
                lines.append(f"    {lab:21s} |{bar} {v:.3f}" if v else f"    {lab:21s} |x")
    return "\n".join(lines)


def make_plot(res: dict, path: str):
    """decode tok/s vs free RAM per model (PNG with matplotlib, else an ASCII chart in .txt)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        txt = os.path.splitext(path)[0] + ".txt"
        art = ascii_plot(res)
        with open(txt, "w") as f:
            f.write(art + "\n")
        return txt, art
    models = [(n, m) for n, m in res["models"].items() if "levels" in m]
    if not models:
        return None, None
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, (name, m) in zip(axes[0], models):
        ser, bound = series(m)
        for k, (lab, pts) in enumerate(ser):
            color = f"C{k}"
            ok = [(x, y) for x, y in pts if y]
            if ok:
                ax.plot([x for x, _ in ok], [y for _, y in ok], marker="o", color=color, label=lab)
            bad = [x for x, y in pts if not y]
            if bad:
                ax.plot(bad, [0] * len(bad), marker="x", markersize=9, linestyle="none", color=color,
                        label=f"{lab}: OOM / failed" if not ok else None)
        if bound:
            ax.plot([x for x, _ in bound], [y for _, y in bound], linestyle="--", marker="^",
                    color="gray", label="bound (compute, Belady/bw)")
        ax.axhline(m["resident"]["decode_tps"], color="gray", linestyle=":", label="all in RAM")
        ax.set_xlabel("free RAM (GiB, memory cgroup limit)")
        ax.set_ylabel("decode tok/s")
        ax.set_title(f"{m['shape']}, {m['layers']} layers ({m['info']['file_bytes'] / GIB:.1f} GiB)",
                     fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("decode tok/s against free RAM (x at 0: OOM / failed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path, None


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--models", default="mixtral,qwen3", help="comma list of: " + ", ".join(MODELS))
    ap.add_argument("--layers", help="N for every model, or per model: mixtral:4,qwen3:8 (the default)")
    ap.add_argument("--type", default="Q4_K")
    ap.add_argument("--model-file", action="append", default=[], metavar="NAME=PATH",
                    help="use this GGUF for a model instead of generating one")
    ap.add_argument("-p", type=int, default=128, help="prompt tokens")
    ap.add_argument("-n", type=int, default=16, help="decode tokens")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--levels", default="0.5,0.25", help="free RAM as fractions of the model file")
    ap.add_argument("--best", default="io,tight,split",
                    help="moeflow explicit candidates: io, tight, split, noprefetch, prefetch-NAME, policy-NAME, packed (comma list; '' for none)")
    ap.add_argument("--sweep-seconds", type=float, default=0.5, help="per point of pack --sweep")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="1 rep, -p 16 -n 4: checks the script only")
    ap.add_argument("--no-llama", action="store_true", help="moeflow only")
    ap.add_argument("--routing-trace",
                    help="replay this recorded routing in every moeflow run (a trace of the model's "
                         "shape; implies --no-llama: llama.cpp cannot replay a routing)")
    ap.add_argument("--routing-request", type=int, default=0, help="request of --routing-trace")
    ap.add_argument("--policy-calib", help="routing trace calibrating the policy-static and "
                    "policy-daop candidates (moeflow's --policy-calib; the simulator's --calib)")
    ap.add_argument("--resident-model", action="append", default=[], metavar="NAME=PATH",
                    help="measure the all-resident compute time on this smaller file of the "
                         "model's shape, scaled by active bytes per token (for a model larger "
                         "than RAM)")
    ap.add_argument("--drop-caches", action="store_true",
                    help="also write 1 to /proc/sys/vm/drop_caches before every run (the whole "
                         "machine's clean page cache)")
    ap.add_argument("--cgroup-parent", help="memory cgroup directory to create the runs' cgroups in "
                                            "(default: this process's own)")
    ap.add_argument("--out")
    ap.add_argument("--report")
    ap.add_argument("--plot", default=os.path.join(ROOT, "bench", "bigger-than-ram.png"))
    ap.add_argument("--llama-worker", nargs=5, metavar=("MODEL", "P", "N", "T", "REPACK"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.llama_worker:
        m, p, n, t, rp = a.llama_worker
        llama_worker(m, int(p), int(n), int(t), rp == "1")
        return
    if a.quick:
        a.reps, a.p, a.n = 1, min(a.p, 16), min(a.n, 4)
        a.sweep_seconds = min(a.sweep_seconds, 0.2)
        a.best = a.best.split(",")[0] if a.best else ""
        a.timeout = min(a.timeout, 600)
    a.best = [c for c in a.best.split(",") if c] if isinstance(a.best, str) else a.best
    a.levels = [float(x) for x in a.levels.split(",") if x]
    names = [x for x in a.models.split(",") if x]
    for nm in names:
        if nm not in MODELS:
            sys.exit(f"--models: unknown '{nm}' (choose from {', '.join(MODELS)})")
    a.model_file = dict(x.split("=", 1) for x in a.model_file)
    a.resident_model = dict(x.split("=", 1) for x in a.resident_model)
    if a.routing_trace:
        a.no_llama = True
    layers = parse_layers(a.layers, names)
    if not a.no_llama:
        try:
            import llama_cpp  # noqa: F401
        except ImportError as e:
            sys.exit(f"llama-cpp-python cannot be imported from {os.path.join(ROOT, '.deps', 'python')} "
                     f"({type(e).__name__}: {e}); run scripts/setup-deps.sh, or pass --no-llama")
    try:
        balloon = Balloon(a.cgroup_parent)
    except (RuntimeError, OSError) as e:
        sys.exit(f"bench_bigger_than_ram: {e}")
    runner = Runner(balloon)

    def on_signal(signum, _frame):
        raise SystemExit(f"interrupted by signal {signum}")

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    tracedir = tempfile.mkdtemp(prefix="moeflow_btr_traces_")
    # The measured binary's own version (commit + dirty flag), not the checkout's HEAD.
    res = {"issue": 17, **binary_version(a.moeflow), "moeflow": a.moeflow, "cpu": platform.processor() or platform.machine(),
           "nproc": os.cpu_count(), "mem_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
           "cgroup": balloon.describe(), "threads": a.threads, "n_prompt": a.p, "n_gen": a.n,
           "reps": a.reps, "levels": a.levels, "best_candidates": a.best, "quick": a.quick,
           "routing_trace": a.routing_trace, "routing_request": a.routing_request if a.routing_trace else None,
           "drop_caches": "posix_fadvise DONTNEED" + (" + /proc/sys/vm/drop_caches" if a.drop_caches else ""),
           "loadavg_start": loadavg(), "models": {}}
    try:
        for nm in names:
            try:
                res["models"][nm] = bench_model(a, runner, nm, layers[nm], tracedir)
            except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
                log(f"{nm}: FAILED: {e}")
                res["models"][nm] = {"error": str(e)[-2000:]}
    finally:
        runner.kill_current()
        left = balloon.cleanup()
        shutil.rmtree(tracedir, ignore_errors=True)
        if left:
            log(f"warning: could not remove cgroups {left}")
    res["loadavg_end"] = loadavg()
    targets = {}
    for nm, m in res["models"].items():
        for key, lv in m.get("levels", {}).items():
            for k, v in lv["targets"].items():
                targets[f"{nm}@{key}:{k}"] = v
    res["targets"] = targets
    res["all_targets_met"] = bool(targets) and all(v["met"] for v in targets.values())
    if a.plot:
        path, art = make_plot(res, a.plot)
        res["plot"] = path
        if art:
            res["ascii_plot"] = art
    s = json.dumps(res, indent=1)
    print(s)
    if a.out:
        with open(a.out, "w") as f:
            f.write(s + "\n")
    md = report(res, a)
    print(md, file=sys.stderr)
    if a.report:
        with open(a.report, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
