#!/usr/bin/env python3
"""Checks the link table of the test binaries (tests/CMakeLists.txt) against what they include.

Each folder tests/NAME/ with *.cpp files is one binary test_NAME, linked against the libraries
named on its line `moeflow_test_links(NAME libs...)`, and no others. This script fails when
  - a test folder has no line, or a line names no folder;
  - a folder's sources include a header of module M (directly, or through the folder's own
    headers and tests/support/ headers, transitively) but none of its listed libraries is M or
    depends on M: the binary would link only by luck of what another library pulls in;
  - a listed library is included by none of the folder's files (linked but not tested);
  - the folder runs the moeflow binary (MOEFLOW_BINARY) without listing `moeflow`, or lists it
    without running it (`moeflow` on a line is the build-order dependency, not a library).
`backend/cuda/...` headers count as the module `cuda` (moeflow_cuda, CUDA builds only).
Exit 0 and a one-line summary when all holds.
"""
import os
import re
import sys

from check_module_deps import INCLUDE, ROOT, closure, declared_graph

TESTS = os.path.join(ROOT, "tests")
SRC = os.path.join(ROOT, "src")
NOT_TEST_FOLDERS = {"fuzz", "support"}  # libFuzzer targets (own CMakeLists); shared fixtures


def link_graph():
    """The declared module graph plus the PUBLIC links added outside moeflow_module()
    (moeflow_cuda -> moeflow_backend, moeflow_runtime -> moeflow_cuda in CUDA builds)."""
    graph = declared_graph()
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    for m in re.finditer(r"target_link_libraries\(moeflow_(\w+)\s+PUBLIC\s+([^)]*)\)", text):
        deps = re.findall(r"\bmoeflow_(\w+)", m.group(2))
        graph.setdefault(m.group(1), set()).update(deps)
    return graph


def table():
    text = open(os.path.join(TESTS, "CMakeLists.txt")).read()
    rows = {}
    for m in re.finditer(r"^moeflow_test_links\(([^)]*)\)", text, re.M):
        parts = m.group(1).split()
        rows[parts[0]] = parts[1:]
    return rows


def module_of(inc):
    """The src module a quoted include names, or None when it is not a src header."""
    if not os.path.exists(os.path.join(SRC, inc)):
        return None
    if inc.startswith("backend/cuda/"):
        return "cuda"
    return inc.split("/")[0]


def test_header(inc, including_dir):
    """The tests/ file a quoted include names (same folder first, then tests/), or None."""
    for base in (including_dir, TESTS):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(p) and p.startswith(TESTS + os.sep):
            return p
    return None


def scan(folder):
    """Modules included by the folder's files (through test headers too), and whether any of
    them names MOEFLOW_BINARY."""
    todo = [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith((".cpp", ".h"))]
    seen, modules, runs_binary = set(), {}, False
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        text = open(path, encoding="utf-8", errors="replace").read()
        runs_binary |= "MOEFLOW_BINARY" in text
        for inc in INCLUDE.findall(text):
            mod = module_of(inc)
            if mod:
                modules.setdefault(mod, os.path.relpath(path, ROOT))
                continue
            h = test_header(inc, os.path.dirname(path))
            if h:
                todo.append(h)
    return modules, runs_binary


def main():
    graph = link_graph()
    reach = closure(graph)
    rows = table()
    errors = []
    folders = sorted(
        d for d in os.listdir(TESTS)
        if d not in NOT_TEST_FOLDERS and os.path.isdir(os.path.join(TESTS, d))
        and any(f.endswith(".cpp") for f in os.listdir(os.path.join(TESTS, d))))
    for name in sorted(set(rows) - set(folders)):
        errors.append(f"tests/CMakeLists.txt: moeflow_test_links({name} ...) names no test folder")
    for name in folders:
        if name not in rows:
            errors.append(f"tests/{name}: no moeflow_test_links({name} ...) line in tests/CMakeLists.txt")
            continue
        listed = [x for x in rows[name] if x != "moeflow"]
        for x in listed:
            if x not in graph:
                errors.append(f"tests/{name}: links '{x}', which is not a module")
        linked = set(listed).union(*(reach.get(x, set()) for x in listed))
        modules, runs_binary = scan(os.path.join(TESTS, name))
        for mod, where in sorted(modules.items()):
            if mod not in linked:
                errors.append(f"tests/{name}: {where} includes module '{mod}', which test_{name} does not link")
        for x in listed:
            if x not in modules:
                errors.append(f"tests/{name}: links '{x}', but no file of the folder includes it")
        if runs_binary != ("moeflow" in rows[name]):
            errors.append(f"tests/{name}: " + ("runs MOEFLOW_BINARY but does not list 'moeflow'" if runs_binary
                                               else "lists 'moeflow' but never runs MOEFLOW_BINARY"))
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"test link table matches the includes of {len(folders)} test folders")


if __name__ == "__main__":
    main()
