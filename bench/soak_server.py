#!/usr/bin/env python3
"""Loopback soak of `moeflow serve`: many concurrent clients, random disconnects mid-stream,
malformed requests mixed in, hostile idle and slow connections; the server must not crash,
every malformed request must get a 4xx, its RSS must stay flat, /health must keep answering.

Phases (one fresh server on a tiny generated model, 1 compute thread):
  idle      200 connections that never send a byte, while /health is timed 20 times
  slowloris 12 sockets that send a request line only + 100 that trickle a header line every
            second, while /health is timed 20 times
  soak      --requests requests (default 10000) from --clients threads (default 16):
            ~55% well-formed (chat / completions, plain / streamed, small max_tokens),
            ~10% streams the client abandons after the first event (socket reset),
            ~30% malformed (bad JSON, bad fields, bad HTTP heads, oversized bodies),
            ~5% GET /health, /metrics, /v1/models, /v1/models/{unknown}
            RSS of the server sampled every second.
Then SIGTERM: the server must exit 0.

usage: python3 bench/soak_server.py [--requests 10000] [--clients 16] [--moeflow build/moeflow]
                                    [--out bench/soak.json] [--report bench/REPORT-soak.md]
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHAT = [{"role": "user", "content": "Say something short."}]

# Malformed requests: (name, kind, payload). kind "json": POST body to the path; "raw": bytes
# sent on a fresh socket. Every one must be answered with a 4xx.
MALFORMED = [
    ("not_json", "json", ("/v1/chat/completions", b"{not json")),
    ("array_body", "json", ("/v1/chat/completions", b"[1, 2, 3]")),
    ("empty_body", "json", ("/v1/completions", b"")),
    ("no_messages", "json", ("/v1/chat/completions", b'{"max_tokens": 4}')),
    ("empty_messages", "json", ("/v1/chat/completions", b'{"messages": []}')),
    ("bad_role", "json", ("/v1/chat/completions", b'{"messages": [{"role": 5, "content": "x"}]}')),
    ("repeat_penalty_0", "json", ("/v1/completions", b'{"prompt": "x", "repeat_penalty": 0}')),
    ("temperature_huge", "json", ("/v1/completions", b'{"prompt": "x", "temperature": 1e308}')),
    ("max_tokens_float", "json", ("/v1/completions", b'{"prompt": "x", "max_tokens": 1e12}')),
    ("n_too_big", "json", ("/v1/completions", b'{"prompt": "x", "n": 99}')),
    ("bad_stop", "json", ("/v1/completions", b'{"prompt": "x", "stop": [1, 2]}')),
    ("token_out_of_range", "json", ("/v1/completions", b'{"prompt": [1, 99999999]}')),
    ("unknown_model", "json", ("/v1/chat/completions", b'{"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}')),
    ("json_response_format", "json", ("/v1/chat/completions",
                                       b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}')),
    ("deep_nesting", "json", ("/v1/chat/completions", b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}")),
    ("many_messages", "json", ("/v1/chat/completions",
                               json.dumps({"messages": [{"role": "user", "content": "a"}] * 5000}).encode())),
    ("context_overflow", "json", ("/v1/completions", json.dumps({"prompt": "word " * 3000}).encode())),
    ("garbage_head", "raw", b"GARBAGE\r\n\r\n"),
    ("bad_content_length", "raw", b"POST /v1/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
    ("smuggling", "raw", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ("huge_head", "raw", b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"),
    ("oversized_body", "raw", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 9437184\r\n\r\n"),
    ("unknown_path", "raw", b"GET /v1/nothing HTTP/1.1\r\nConnection: close\r\n\r\n"),
]


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Server:
    def __init__(self, moeflow, model):
        self.log = tempfile.NamedTemporaryFile(prefix="soak_serve_", suffix=".log", delete=False).name
        self.p = subprocess.Popen([moeflow, "serve", "-m", model, "--port", "0", "-t", "1", "-c", "512",
                                   "--max-queue", "64", "--alias", "tiny"],
                                  stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 60
        self.port = None
        while self.port is None and time.time() < deadline and self.p.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(self.log).read())
            self.port = int(m.group(1)) if m else None
            time.sleep(0.05)
        if self.port is None:
            sys.exit("serve did not start:\n" + open(self.log).read())

    def rss_kib(self):
        try:
            s = open(f"/proc/{self.p.pid}/status").read()
        except OSError:
            return None
        return int(re.search(r"VmRSS:\s+(\d+)", s).group(1))

    def alive(self):
        return self.p.poll() is None


def health_seconds(port):
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/health")
        ok = c.getresponse().status == 200
        c.close()
    except OSError:
        ok = False
    return time.perf_counter() - t0 if ok else None


def time_health(port, n=20, gap=0.1):
    out = []
    for _ in range(n):
        out.append(health_seconds(port))
        time.sleep(gap)
    ok = [x for x in out if x is not None]
    return {"checks": n, "answered": len(ok), "p50_ms": percentile(ok, 50) * 1e3 if ok else None,
            "max_ms": max(ok) * 1e3 if ok else None}


def phase_idle(srv, n=200):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", srv.port))
        socks.append(s)
    r = time_health(srv.port)
    r["idle_connections"] = n
    for s in socks:
        s.close()
    return r


def phase_slowloris(srv, half=12, slow=100):
    socks = []
    for _ in range(half):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"GET /health HTTP/1.1\r\n")
        socks.append(s)
    trickle = []
    for _ in range(slow):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
        trickle.append(s)
    stop = threading.Event()

    def drip():
        while not stop.is_set():
            for s in trickle:
                try:
                    s.send(b"X-Trickle: 1\r\n")
                except OSError:
                    pass
            stop.wait(1.0)

    t = threading.Thread(target=drip)
    t.start()
    r = time_health(srv.port, n=20, gap=0.25)
    stop.set()
    t.join()
    for s in socks + trickle:
        s.close()
    r["half_open"] = half
    r["trickling"] = slow
    return r


class Soak:
    def __init__(self, srv, n, clients, seed):
        self.srv, self.n, self.clients = srv, n, clients
        self.rng_seed = seed
        self.next = 0
        self.lock = threading.Lock()
        self.records = []  # (kind, name, status, seconds)
        self.failures = []

    def take(self):
        with self.lock:
            if self.next >= self.n:
                return None
            self.next += 1
            return self.next

    def record(self, kind, name, status, seconds, ok, detail=""):
        with self.lock:
            self.records.append((kind, name, status, seconds))
            if not ok and len(self.failures) < 50:
                self.failures.append({"kind": kind, "name": name, "status": status, "detail": detail[:300]})

    def post(self, path, body, stream=False):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=120)
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def valid(self, rng):
        chat = rng.random() < 0.5
        stream = rng.random() < 0.3
        req = {"max_tokens": rng.randint(2, 8), "temperature": rng.choice([0, 0.7]), "seed": rng.randint(0, 1000),
               "stream": stream}
        if rng.random() < 0.2:
            req.update({"logprobs": True, "top_logprobs": 2} if chat else {"logprobs": 2})
        if rng.random() < 0.1:
            req["n"] = 2
        if chat:
            req["messages"] = CHAT + [{"role": "user", "content": f"request {rng.randint(0, 99)}"}]
        else:
            req["prompt"] = f"Once upon a time {rng.randint(0, 99)}"
        path = "/v1/chat/completions" if chat else "/v1/completions"
        t0 = time.perf_counter()
        status, data = self.post(path, json.dumps(req))
        dt = time.perf_counter() - t0
        ok = status == 200 and ((b"data: [DONE]" in data) if stream else b'"usage"' in data)
        self.record("valid", ("chat" if chat else "completion") + ("_stream" if stream else ""), status, dt, ok,
                    data.decode("utf-8", "replace"))

    def abandon(self, rng):
        """A stream the client leaves after its first event, resetting the connection."""
        body = json.dumps({"prompt": "Tell me a long story", "max_tokens": 200, "ignore_eos": True, "stream": True})
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        t0 = time.perf_counter()
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        got = b""
        try:
            while b"data: " not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        s.close()
        ok = got.startswith(b"HTTP/1.1 200") or got.startswith(b"HTTP/1.1 503")
        self.record("disconnect", "stream_abandoned", int(got[9:12] or 0) if got else 0, time.perf_counter() - t0, ok,
                    got[:200].decode("utf-8", "replace"))

    def malformed(self, rng):
        name, kind, payload = rng.choice(MALFORMED)
        t0 = time.perf_counter()
        if kind == "json":
            path, body = payload
            try:
                status, data = self.post(path, body)
            except (OSError, http.client.HTTPException) as e:
                status, data = 0, str(e).encode()
        else:
            s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
            data = b""
            try:
                s.sendall(payload)
                while b"\r\n\r\n" not in data:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError as e:
                data += str(e).encode()
            s.close()
            m = re.match(rb"HTTP/1\.1 (\d{3})", data)
            status = int(m.group(1)) if m else 0
        self.record("malformed", name, status, time.perf_counter() - t0, 400 <= status < 500,
                    data[:300].decode("utf-8", "replace"))

    def get(self, rng):
        path = rng.choice(["/health", "/metrics", "/v1/models", "/v1/models/nothing"])
        t0 = time.perf_counter()
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=30)
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        c.close()
        want = 404 if path.endswith("nothing") else 200
        self.record("get", path, r.status, time.perf_counter() - t0, r.status == want)

    def worker(self, i):
        rng = random.Random(self.rng_seed * 1000 + i)
        while self.take() is not None:
            x = rng.random()
            try:
                if x < 0.55:
                    self.valid(rng)
                elif x < 0.65:
                    self.abandon(rng)
                elif x < 0.95:
                    self.malformed(rng)
                else:
                    self.get(rng)
            except (OSError, http.client.HTTPException) as e:
                self.record("error", type(e).__name__, 0, 0.0, False, str(e))

    def run(self):
        rss = []
        t0 = time.time()
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                with self.lock:
                    done = len(self.records)
                rss.append({"t_s": round(time.time() - t0, 1), "requests": done, "rss_kib": self.srv.rss_kib()})
                stop.wait(1.0)

        sampler = threading.Thread(target=sample)
        sampler.start()
        ts = [threading.Thread(target=self.worker, args=(i,)) for i in range(self.clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        stop.set()
        sampler.join()
        rss.append({"t_s": round(time.time() - t0, 1), "requests": len(self.records), "rss_kib": self.srv.rss_kib()})
        return time.time() - t0, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--moeflow", default=os.path.join(ROOT, "build", "moeflow"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "soak.json"))
    ap.add_argument("--report", default=os.path.join(ROOT, "bench", "REPORT-soak.md"))
    a = ap.parse_args()
    model = os.path.join(tempfile.gettempdir(), f"moeflow_soak_tiny_{os.getpid()}.gguf")
    subprocess.run([a.moeflow, "gen-model", "--arch", "mixtral", "--preset", "tiny", "--type", "Q4_K", "-q", "-o",
                    model], check=True, stdout=subprocess.DEVNULL)
    srv = Server(a.moeflow, model)
    try:
        for _ in range(20):  # warm-up: threads, arenas, caches
            Soak(srv, 0, 0, 0).post("/v1/completions", json.dumps({"prompt": "warm", "max_tokens": 4}))
        rss_start = srv.rss_kib()
        print("phase idle ...", file=sys.stderr)
        idle = phase_idle(srv)
        print(f"  {idle}", file=sys.stderr)
        print("phase slowloris ...", file=sys.stderr)
        slow = phase_slowloris(srv)
        print(f"  {slow}", file=sys.stderr)
        print(f"phase soak: {a.requests} requests, {a.clients} clients ...", file=sys.stderr)
        soak = Soak(srv, a.requests, a.clients, a.seed)
        seconds, rss = soak.run()
        alive_after_soak = srv.alive()
        health_after = health_seconds(srv.port)
        metrics = {}
        try:
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            c.request("GET", "/metrics")
            page = c.getresponse().read().decode()
            for l in page.splitlines():
                if l.startswith(("moeflow_completions_total", "moeflow_http_connections_dropped_total",
                                 "moeflow_requests_rejected_total")):
                    metrics[l.rsplit(" ", 1)[0]] = float(l.rsplit(" ", 1)[1])
        except OSError:
            pass
    finally:
        srv.p.send_signal(signal.SIGTERM)
        try:
            exit_code = srv.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.p.kill()
            exit_code = "hung (killed)"
        os.unlink(model)
    recs = soak.records
    by_kind = {}
    for kind, name, status, sec in recs:
        by_kind.setdefault(kind, []).append((name, status, sec))
    mal = by_kind.get("malformed", [])
    mal_4xx = sum(1 for _, s, _ in mal if 400 <= s < 500)
    lat = {}
    for kind in ("valid", "disconnect", "malformed", "get"):
        xs = [sec for _, _, sec in by_kind.get(kind, [])]
        if xs:
            lat[kind] = {"n": len(xs), "p50_ms": percentile(xs, 50) * 1e3, "p99_ms": percentile(xs, 99) * 1e3,
                         "max_ms": max(xs) * 1e3}
    valid = by_kind.get("valid", [])
    statuses = {}
    for kind, name, status, _ in recs:
        key = f"{kind}:{status}"
        statuses[key] = statuses.get(key, 0) + 1
    rss_vals = [r["rss_kib"] for r in rss if r["rss_kib"]]
    result = {
        "requests": len(recs), "clients": a.clients, "seconds": seconds, "requests_per_s": len(recs) / seconds,
        "crashed": not alive_after_soak, "health_after_soak_ms": health_after * 1e3 if health_after else None,
        "exit_code_on_sigterm": exit_code,
        "valid": {"n": len(valid), "ok": sum(1 for _, s, _ in valid if s == 200)},
        "disconnects": len(by_kind.get("disconnect", [])),
        "malformed": {"n": len(mal), "4xx": mal_4xx,
                      "by_name": {n: sorted({s for nn, s, _ in mal if nn == n}) for n, _, _ in MALFORMED}},
        "errors": len(by_kind.get("error", [])), "statuses": statuses, "latency": lat,
        "rss_kib": {"before_phases": rss_start, "soak_start": rss_vals[0] if rss_vals else None,
                    "soak_end": rss_vals[-1] if rss_vals else None, "max": max(rss_vals) if rss_vals else None},
        "rss_over_time": rss, "phase_idle": idle, "phase_slowloris": slow, "server_metrics": metrics,
        "failures": soak.failures,
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    summary = {k: result[k] for k in ("requests", "crashed", "exit_code_on_sigterm", "errors")}
    summary["malformed_4xx"] = f"{mal_4xx}/{len(mal)}"
    summary["valid_ok"] = f"{result['valid']['ok']}/{result['valid']['n']}"
    print(json.dumps(summary))
    if a.report:
        write_report(a, result)
    bad = result["crashed"] or exit_code != 0 or mal_4xx != len(mal) or result["errors"] or \
        result["valid"]["ok"] != result["valid"]["n"]
    sys.exit(1 if bad else 0)


def write_report(a, r):
    lat = r["latency"]
    lat_rows = "\n".join(f"| {k} | {v['n']} | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} | {v['max_ms']:.1f} |"
                         for k, v in lat.items())
    over = r["rss_over_time"]
    step = max(1, len(over) // 12)
    rss_rows = "\n".join(f"| {x['t_s']:.0f} | {x['requests']} | {x['rss_kib'] / 1024:.1f} |" for x in over[::step] + [over[-1]])
    rk = r["rss_kib"]
    mal = r["malformed"]
    idle, slow = r["phase_idle"], r["phase_slowloris"]
    text = f"""# Server soak (loopback)

`python3 bench/soak_server.py --requests {a.requests} --clients {a.clients}`: one `moeflow serve` (tiny
generated Mixtral, Q4_K, `-t 1 -c 512 --max-queue 64`) on this {os.cpu_count()}-CPU machine. Requests:
~55% well-formed (chat / completions, plain / streamed, 2-8 tokens, some with logprobs or n = 2),
~10% streams abandoned after their first event (connection reset), ~30% malformed (bad JSON, bad
fields, bad HTTP heads, oversized bodies: {len(MALFORMED)} kinds), ~5% GETs.

| | |
|---|---|
| requests | {r['requests']} from {r['clients']} concurrent clients in {r['seconds']:.0f} s ({r['requests_per_s']:.0f}/s) |
| crashes | {'**1 (the server died)**' if r['crashed'] else '0'}; exit status on SIGTERM afterwards: {r['exit_code_on_sigterm']} |
| well-formed answered 200 | {r['valid']['ok']} / {r['valid']['n']} |
| malformed answered 4xx | {mal['4xx']} / {mal['n']} |
| abandoned streams | {r['disconnects']} (`moeflow_completions_total{{finish_reason="cancelled"}}` {r['server_metrics'].get('moeflow_completions_total{finish_reason="cancelled"}', 0):.0f}) |
| client errors (no answer) | {r['errors']} |
| RSS | {rk['before_phases'] / 1024:.1f} MiB before the phases; soak start {rk['soak_start'] / 1024:.1f} MiB, end {rk['soak_end'] / 1024:.1f} MiB, max {rk['max'] / 1024:.1f} MiB |

Latency (client-side, whole request: to the last byte of the answer or of the stream):

| kind | n | p50 (ms) | p99 (ms) | max (ms) |
|---|---:|---:|---:|---:|
{lat_rows}

RSS over the soak:

| t (s) | requests done | RSS (MiB) |
|---:|---:|---:|
{rss_rows}

Hostile connections before the soak (each /health on a fresh connection):

| phase | /health answered | p50 | max |
|---|---:|---:|---:|
| {idle['idle_connections']} idle connections (connected, nothing sent) | {idle['answered']} / {idle['checks']} | {idle['p50_ms']:.1f} ms | {idle['max_ms']:.1f} ms |
| {slow['half_open']} request-line-only + {slow['trickling']} trickling a header line per second | {slow['answered']} / {slow['checks']} | {slow['p50_ms']:.1f} ms | {slow['max_ms']:.1f} ms |

Before the connection guard, the 12 request-line-only sockets alone kept /health from answering
(httplib gave each connection a pool thread for as long as it stayed open).

Raw numbers (every status by kind, RSS every second, malformed kinds and their statuses):
bench/soak.json.
"""
    with open(a.report, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
