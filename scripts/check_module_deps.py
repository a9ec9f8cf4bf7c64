#!/usr/bin/env python3
"""Checks that moeflow's modules depend on each other one way only.

The declared graph is the one CMakeLists.txt builds (`moeflow_module(NAME DEPS...)`): this
script fails when
  - the declared graph has a cycle,
  - a file of module A includes a header of module B that A does not depend on, directly or
    through its dependencies (an undeclared or backwards dependency),
  - a header includes itself through a chain of headers (an include cycle).
The CLI (src/cli) may include any module. Exit 0 and a one-line summary when all holds.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")


def declared_graph():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    graph = {}
    for m in re.finditer(r"^moeflow_module\(([^)]*)\)", text, re.M):
        parts = m.group(1).split()
        graph[parts[0]] = set(parts[1:])
    return graph


def find_cycle(graph):
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if state.get(d) is None:
                c = visit(d)
                if c:
                    return c
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if state.get(n) is None:
            c = visit(n)
            if c:
                return c
    return None


def closure(graph):
    out = {}
    for n in graph:
        seen, todo = set(), list(graph[n])
        while todo:
            d = todo.pop()
            if d not in seen:
                seen.add(d)
                todo.extend(graph.get(d, ()))
        out[n] = seen
    return out


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    graph = declared_graph()
    errors = []
    cycle = find_cycle(graph)
    if cycle:
        errors.append("declared module graph has a cycle: " + " -> ".join(cycle))
    reach = closure(graph)
    headers = {}
    n_files = 0
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith((".h", ".cpp", ".cu", ".cuh", ".inc")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, SRC)
            module = rel.split(os.sep)[0]
            text = open(path, encoding="utf-8", errors="replace").read()
            incs = [i for i in INCLUDE.findall(text) if "/" in i]
            n_files += 1
            if rel.endswith((".h", ".cuh")):
                headers[rel] = [i for i in incs if os.path.exists(os.path.join(SRC, i))]
            if module == "cli":
                continue
            if module not in graph:
                errors.append(f"src/{rel}: module '{module}' is not declared in CMakeLists.txt")
                continue
            for inc in incs:
                target = inc.split("/")[0]
                if not os.path.exists(os.path.join(SRC, inc)) or target == module:
                    continue
                if target not in reach[module]:
                    errors.append(f"src/{rel}: includes {inc}, but module '{module}' does not depend on '{target}'")
    # Header include cycles.
    state = {}

    def visit(h, chain):
        state[h] = 1
        for i in headers.get(h, ()):
            if state.get(i) == 1:
                errors.append("include cycle: " + " -> ".join(chain[chain.index(i):] + [i]))
            elif state.get(i) is None:
                visit(i, chain + [i])
        state[h] = 2

    for h in sorted(headers):
        if state.get(h) is None:
            visit(h, [h])
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    order = []
    done = set()
    while len(order) < len(graph):
        ready = [n for n in sorted(graph) if n not in done and graph[n] <= done]
        if not ready:  # a dependency no module declares, or a cycle: say so instead of looping
            stuck = {n: sorted(graph[n] - done) for n in sorted(graph) if n not in done}
            sys.exit(f"module graph: no order for {stuck} (undeclared module or cycle)")
        for n in ready:
            order.append(n)
            done.add(n)
    print(f"module graph acyclic, {n_files} files include only declared dependencies; order: "
          + " -> ".join(order) + " -> cli")


if __name__ == "__main__":
    main()
