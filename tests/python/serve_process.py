"""`moeflow serve` as a test fixture: started on a free loopback port, stopped with SIGTERM, and
required to exit 0 (a crash at shutdown fails the test that used it)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def serve(binary, model, alias: str, extra_args=()):
    """Generator for a pytest fixture: yields the server's base URL (http://127.0.0.1:PORT)."""
    log = tempfile.NamedTemporaryFile(prefix="moeflow_serve_", suffix=".log", delete=False)
    proc = subprocess.Popen([str(binary), "serve", "-m", str(model), "--host", "127.0.0.1", "--port", "0",
                             "-t", "1", "--alias", alias, *extra_args],
                            stdout=subprocess.DEVNULL, stderr=log)
    port = None
    deadline = time.time() + 60
    while port is None and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", Path(log.name).read_text())
        if m:
            port = int(m.group(1))
    if port is None:
        proc.kill()
        pytest.fail("serve did not start:\n" + Path(log.name).read_text())
    yield f"http://127.0.0.1:{port}"
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        text = Path(log.name).read_text()
        os.unlink(log.name)
    assert rc == 0, f"serve exited with {rc}:\n{text}"
