#!/usr/bin/env python3
"""Check the layering of the source tree (docs/design.md, "Layers").

  scripts/check-layers.py BUILD_DIR

Reads the object files CMake built under BUILD_DIR/src and the sources under src/,
include/ and launcher/, and fails (exit 1, one line per finding) when:
  - two source files call each other, directly or around a longer loop (a cycle in
    the graph "A uses a function or variable defined in B", read from `nm`);
  - headers include each other in a loop;
  - a folder uses another folder that its library does not link (the allowed arrows
    are ALLOWED below, the same as the CMake link graph);
  - a source file includes another folder's private header (src/<folder>/*.h);
  - a public header (include/dslaunch/<folder>/) is used by its own folder only (not
    by another folder, nor by a public header that another folder uses).
Tests count as users of the folder they test (tests/<folder>/).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# folder -> folders it may use (its library links theirs); launcher/ may use all.
ALLOWED = {
    "common": set(),
    "plan": {"common"},
    "proto": {"common"},
    "remote": {"common", "plan", "proto"},
    "agent": {"common", "plan", "proto", "remote"},
    "job": {"common", "plan", "proto", "remote"},
    "tools": {"common", "plan", "proto", "remote", "job"},
    "comm": {"common"},
    "device": {"common"},
    "model": {"common", "device"},
    "train": {"common", "comm", "model", "device"},
}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    """'src/job/job.c' -> 'job'; 'include/dslaunch/plan/x.h' -> 'plan'; else None."""
    p = os.path.relpath(path, ROOT).split(os.sep)
    if p[0] == "src" and len(p) > 2:
        return p[1]
    if p[0] == "include" and len(p) > 3:
        return p[2]
    if p[0] == "tests" and len(p) > 2 and p[1] in ALLOWED:
        return p[1]
    if p[0] == "launcher":
        return "launcher"
    return None


def sources():
    for top in ("src", "include", "launcher", "tests"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h", ".cu")):
                    yield os.path.join(d, f)


def resolve(inc, src):
    for base in (os.path.dirname(src), os.path.join(ROOT, "include"), os.path.join(ROOT, "src")):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(p):
            return p
    return None


def sccs(graph):
    """Tarjan's strongly connected components of {node: set(successors)}."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1 or c[0] in graph.get(c[0], ())]


def rel(p):
    return os.path.relpath(p, ROOT)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    bad = []

    # includes: folder arrows, private headers, public headers used by one folder
    inc_graph = {}
    users = {}
    for src in sources():
        text = open(src, encoding="utf-8", errors="replace").read()
        mine = folder_of(src)
        for inc in INC.findall(text):
            target = resolve(inc, src)
            if not target or not target.startswith(ROOT + os.sep):
                continue
            if src.endswith(".h") and target.endswith(".h"):
                inc_graph.setdefault(src, set()).add(target)
            theirs = folder_of(target)
            if theirs is None or mine is None or theirs == mine:
                continue
            users.setdefault(target, set()).add(mine)
            if rel(target).startswith("src" + os.sep) and not rel(src).startswith("tests"):
                bad.append(f"{rel(src)}: includes the private header {rel(target)}")
            if mine in ALLOWED and theirs not in ALLOWED[mine] and theirs != mine:
                bad.append(f"{rel(src)}: {mine} must not use {theirs} ({inc})")
    # a public header is exported when another folder includes it, or when an exported
    # public header includes it (job.h carries proto.h to its users)
    exported = {h for h in users if rel(h).startswith("include" + os.sep)}
    todo = list(exported)
    while todo:
        for t in inc_graph.get(todo.pop(), ()):
            if rel(t).startswith("include" + os.sep) and t not in exported:
                exported.add(t)
                todo.append(t)
    for d, _, files in os.walk(os.path.join(ROOT, "include", "dslaunch")):
        for f in files:
            h = os.path.join(d, f)
            if h not in exported:
                bad.append(f"{rel(h)}: public header used by its own folder only")
    for comp in sccs(inc_graph):
        bad.append("include cycle: " + " <-> ".join(sorted(rel(c) for c in comp)))

    # calls: which object defines and which uses each symbol
    objs = []
    for d, _, files in os.walk(os.path.join(build, "src")):
        objs += [os.path.join(d, f) for f in files if f.endswith(".o")]
    if not objs:
        sys.exit(f"check-layers: no object files under {build}/src (build first)")
    defs, uses = {}, {}
    for o in objs:
        name = re.sub(r".*/CMakeFiles/[^/]+\.dir/", "", o)[:-2]  # e.g. job.c
        folder = os.path.basename(o.split("/CMakeFiles/")[0])
        key = f"src/{folder}/{name}"
        out = subprocess.run(["nm", "-P", o], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == "U":
                uses.setdefault(key, set()).add(sym)
            elif kind in "TDBRVW":
                defs.setdefault(sym, key)
    call_graph = {}
    for f, syms in uses.items():
        for s in syms:
            if s in defs and defs[s] != f:
                call_graph.setdefault(f, set()).add(defs[s])
                a, b = f.split("/")[1], defs[s].split("/")[1]
                if a != b and b not in ALLOWED.get(a, {b}):
                    bad.append(f"{f}: {a} must not call {b} ({s} in {defs[s]})")
    for comp in sccs(call_graph):
        bad.append("call cycle: " + " <-> ".join(sorted(comp)))

    for b in sorted(set(bad)):
        print(b)
    nfiles = len(objs)
    print(f"# check-layers: {nfiles} objects, {len(set(bad))} findings", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
