#!/usr/bin/env python3
"""Turn tools/device_profile.sh's folder into the profile docs/performance.md keeps: per phase, per
test, the GPU's kernel time against wall time, the compiles of a cold run, the imports of a one-fact
process. A script, not a test.

    python3 tools/profile_gpu_run.py --dir <the profile's $OUT>
"""

from __future__ import annotations

import argparse
import io
import json
import pstats
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate


def junit_cases(path: Path) -> list[dict]:
    """Every test case that ran: id, wall seconds (setup + call + teardown), kernel seconds, launches."""
    if not path.exists():
        return []
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        mod = case.get("classname", "").replace(".", "/") + ".py"
        cases.append({"id": f"{mod}::{case.get('name')}", "wall": float(case.get("time", 0.0)),
                      "busy": float(props.get("gpu_busy_s", 0.0)), "launches": int(props.get("gpu_launches", 0)),
                      "failed": case.find("failure") is not None or case.find("error") is not None})
    return cases


def per_test(cases: list[dict], top: int) -> str:
    total_wall = sum(c["wall"] for c in cases)
    total_busy = sum(c["busy"] for c in cases)
    rows = [(c["id"], f"{c['wall']:.3f}", f"{c['busy']:.4f}", c["launches"],
             f"{1e3 * (c['wall'] - c['busy']) / c['launches']:.2f}" if c["launches"] else "")
            for c in sorted(cases, key=lambda c: -c["wall"])[:top]]
    head = (f"{len(cases)} tests ran: {total_wall:.2f} s of wall time in their setup/call/teardown, "
            f"{total_busy:.3f} s of it kernels timed by the Runner ({sum(c['launches'] for c in cases)} launches)\n\n")
    return head + tabulate(rows, ["test", "wall s", "kernel s", "launches", "wall - kernel per launch, ms"],
                           tablefmt="github")


def per_file(cases: list[dict]) -> str:
    groups = defaultdict(lambda: [0, 0.0, 0.0, 0])
    for c in cases:
        g = groups[c["id"].split("::")[0]]
        g[0] += 1
        g[1] += c["wall"]
        g[2] += c["busy"]
        g[3] += c["launches"]
    rows = sorted(((f, n, f"{w:.2f}", f"{b:.3f}", k) for f, (n, w, b, k) in groups.items()), key=lambda r: -float(r[2]))
    return tabulate(rows, ["file", "tests", "wall s", "kernel s", "launches"], tablefmt="github")


OURS_AND_CALLS_OUT = r"pytest_gpuprops|hwtests|cupy|pynvml|filelock|subprocess|_pytest/(main|runner|python|fixtures)\.py"


def profile_top(path: Path, n: int, sort: str = "cumulative", pattern: str | None = OURS_AND_CALLS_OUT) -> str:
    """The top of a cProfile run by `sort`: our package's functions and the calls out of it, or every
    function where `pattern` is None."""
    if not path.exists():
        return "(no profile)"
    out = io.StringIO()
    st = pstats.Stats(str(path), stream=out)
    st.sort_stats(sort).print_stats(*([pattern] if pattern else []), n)
    text = out.getvalue()
    start = text.find("   ncalls")
    return text[start:] if start >= 0 else text


def compiles(path: Path, cores: int) -> str:
    if not path.exists():
        return "(no compile record)"
    rows = json.loads(path.read_text())
    total = sum(r["seconds"] for r in rows)
    by_source = defaultdict(lambda: [0, 0.0])
    for r in rows:
        by_source[(r["source"], r["arch"])][0] += 1
        by_source[(r["source"], r["arch"])][1] += r["seconds"]
    longest = rows[0]["seconds"] if rows else 0.0
    table = tabulate(sorted(((s, a, n, f"{t:.1f}") for (s, a), (n, t) in by_source.items()), key=lambda r: -float(r[3])),
                     ["source", "arch", "builds", "compile s"], tablefmt="github")
    slowest = tabulate([(r["source"], r["arch"], " ".join(o for o in r["options"] if o.startswith("-D")),
                         f"{r['seconds']:.2f}") for r in rows[:12]],
                       ["source", "arch", "defines", "s"], tablefmt="github")
    return (f"{len(rows)} compiles, {total:.1f} s of compiler time; the longest {longest:.1f} s; on {cores} threads "
            f"the floor is max(longest, total / threads) = {max(longest, total / max(cores, 1)):.1f} s\n\n"
            f"{table}\n\nslowest builds:\n\n{slowest}")


def imports(path: Path, n: int) -> str:
    """The top-level imports of an -X importtime log by cumulative microseconds."""
    if not path.exists():
        return "(no importtime log)"
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) <= 1:
            rows.append((m.group(4), int(m.group(2)) / 1e6))
    rows.sort(key=lambda r: -r[1])
    return (f"top-level imports: {sum(r[1] for r in rows):.2f} s in all\n\n"
            + tabulate([(name, f"{s:.3f}") for name, s in rows[:n]], ["module", "cumulative s"], tablefmt="github"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args(argv)
    d = a.dir
    cores = int((d / "nproc.txt").read_text().strip()) if (d / "nproc.txt").exists() else 1
    parts = ["# GPU run profile", ""]
    if (d / "gpu.csv").exists():
        parts += ["```", (d / "gpu.csv").read_text().strip(), "```", ""]
    if (d / "walls.txt").exists():
        parts += ["## Wall times", "", "```", (d / "walls.txt").read_text().strip(), "```", ""]
    for name, title in (("warm.xml", "GPU suite, warm: per file"), ("micro.xml", "micro-architecture facts, warm: per file")):
        cases = junit_cases(d / name)
        if cases:
            parts += [f"## {title}", "", per_file(cases), ""]
    for name, title in (("warm.xml", "GPU suite, warm: slowest tests"), ("cold.xml", "GPU suite, cold: slowest tests")):
        cases = junit_cases(d / name)
        if cases:
            parts += [f"## {title}", "", per_test(cases, a.top), ""]
    parts += ["## Cold run: compiles", "", compiles(d / "compile_seconds.json", cores), ""]
    parts += ["## micro-architecture facts, warm, cProfile (cumulative)", "", "```",
              profile_top(d / "micro.prof", a.top), "```", ""]
    parts += ["## One fact in its own process, cProfile (whole process, by own time)", "", "```",
              profile_top(d / "one.prof", a.top, "tottime", None), "```", ""]
    parts += ["## One fact in its own process, cProfile (cumulative)", "", "```",
              profile_top(d / "one.prof", a.top, "cumulative", None), "```", ""]
    if (d / "bytecode.txt").exists():
        parts += ["## Bytecode", "", "```", (d / "bytecode.txt").read_text().strip(), "```", ""]
    parts += ["## One fact in its own process: imports", "", imports(d / "one_importtime.log", 20), ""]
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
