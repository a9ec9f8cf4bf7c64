"""The version of the moeflow binary a benchmark measured, for its JSON.

`moeflow --version` prints "moeflow 0.1.0 (commit f8fa329)" ("-dirty" after the commit when the
tree it was built from had uncommitted changes; "unknown" when built without git). The scripts
record what the binary says rather than the checkout's HEAD: a benchmark often runs a binary
built earlier, or one from another tree (--moeflow, --baseline)."""
from __future__ import annotations

import re
import subprocess


def binary_version(moeflow: str) -> dict:
    """{"moeflow_commit": "f8fa329-dirty", "moeflow_version": "<the whole line>"}; the commit is
    "unknown" when the binary predates `--version` or cannot run."""
    try:
        out = subprocess.run([moeflow, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    line = out.splitlines()[0] if out else ""
    m = re.search(r"\(commit ([^)\s]+)\)", line)
    return {"moeflow_commit": m.group(1) if m else "unknown", "moeflow_version": line or "unknown"}
