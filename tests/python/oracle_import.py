"""The one way the oracle tests give up: an oracle (a Python module) or an input (the moeflow
binary, the demo model, ../shared/data) that is not there.

Outside CI that skips the module with the reason; under CI (CI=true, set by .ci/run) it fails,
because CI installs every oracle (scripts/setup-deps.sh) and has the shared data, so a missing
one there is a broken setup, never a reason to pass. Use these instead of
pytest.importorskip / pytest.skip:

    llama_cpp = require_module("llama_cpp", "llama.cpp reference logits")
    require(BIN is not None, "moeflow binary not built")

scripts/test.sh fails on any skip it is not told to expect, so a skip outside CI is visible
too.
"""
from __future__ import annotations

import importlib
import os
import sys

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str):
    """Skips the calling module (outside CI) or fails it (under CI) with `reason`."""
    if in_ci():
        pytest.fail(f"required under CI (CI=true): {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(condition: bool, reason: str) -> None:
    if not condition:
        unavailable(reason)


def require_module(name: str, what: str):
    """Imports `name` (an oracle: `what` says what it is for) or gives up as `unavailable`.

    The ImportError's own message is kept: "No module named 'diskcache'" says which of the
    oracle's dependencies is missing, which `llama_cpp` alone would hide.
    """
    try:
        return importlib.import_module(name)
    except ImportError as e:
        error = f"{type(e).__name__}: {e}"
    path = os.environ.get("PYTHONPATH", "")
    unavailable(f"cannot import {name} ({what}): {error} "
                f"[python {sys.executable}, PYTHONPATH={path!r}; run scripts/setup-deps.sh]")
