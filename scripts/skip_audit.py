#!/usr/bin/env python3
"""Lists the tests a ctest run skipped (from its --output-junit file) and fails on any skip
that no allow-list pattern matches.

Usage: skip_audit.py JUNIT.xml LABEL [ALLOWED_REGEX ...]

An ALLOWED_REGEX matches test names; written NAME_REGEX::REASON_REGEX it also requires the
skip's reason to match (e.g. CUDA cases that may skip only for want of a device).

A skip is a testcase with a <skipped> element: a GoogleTest GTEST_SKIP() (gtest_discover_tests
maps "[  SKIPPED ]" to a ctest skip), or a Python oracle file that exited with pytest's code 5
(SKIP_RETURN_CODE 5 in tests/CMakeLists.txt: the module skipped itself, nothing was collected,
or tests/python/conftest.py turned a partly skipped run into 5). The reason printed is the
test's own: the message after GoogleTest's "Skipped" line, or pytest's "SKIPPED [n] ..." lines
(-rs). Disabled tests (ctest "Not Run (Disabled)") count as skips too. Exit status: 0 when every
skip is allowed (or none happened), 1 otherwise, 2 when the file cannot be read.
"""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET


def reason_of(case: ET.Element) -> str:
    out = case.findtext("system-out") or ""
    lines = out.splitlines()
    reasons = []
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("SKIPPED ["):  # pytest -rs summary
            reasons.append(s)
        elif s.endswith(": Skipped") and i + 1 < len(lines):  # GoogleTest: file:line: Skipped
            reasons.append(lines[i + 1].strip() or "(GTEST_SKIP() without a reason)")
    if not reasons:
        sk = case.find("skipped")
        msg = sk.get("message", "") if sk is not None else ""
        reasons.append(f"(no reason printed; ctest: {msg or case.get('status', '?')})")
    return " | ".join(dict.fromkeys(reasons))


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, label, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"skip audit: cannot read the ctest JUnit report {path}: {e}", file=sys.stderr)
        return 2
    allowed = []
    for p in patterns:
        name_re, _, reason_re = p.partition("::")
        allowed.append((re.compile(name_re), re.compile(reason_re) if reason_re else None))
    skipped = [c for c in root.iter("testcase")
               if c.find("skipped") is not None or c.get("status") == "disabled"]
    bad = 0
    if not skipped:
        print(f"== skipped tests ({label}): none")
        return 0
    print(f"== skipped tests ({label}): {len(skipped)}")
    for c in skipped:
        name = c.get("name", "?")
        reason = reason_of(c)
        ok = any(n.search(name) and (r is None or r.search(reason)) for n, r in allowed)
        bad += not ok
        print(f"   {'allowed' if ok else 'NOT ALLOWED'}  {name}: {reason}")
    if bad:
        print(f"== {bad} skip(s) not in scripts/test.sh's allow-list: a test that cannot run here "
              "is a failure (install what it names, or allow-list it with the reason)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
