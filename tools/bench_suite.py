#!/usr/bin/env python3
"""Suite benchmark -- a script, not a test: how long the suites take, cold and warm, and how a fact
compares with building and running a standalone microbenchmark for it.

    python tools/bench_suite.py --out docs/bench-cpu.md            # any machine
    python tools/bench_suite.py --out docs/bench-device.md         # on the GPU machine: all parts

Times, each cold (a fresh, empty $GPUPROPS_CACHE_DIR) then warm (the same command again):

* the CPU suite: ``python -m pytest`` from the repository root (GPU tests skip without a GPU);
* the static suite: ``pytest hwtests -m static``;
* with a GPU: the GPU suite ``pytest hwtests -m "not static"`` (per-fact times from its JUnit XML)
  and the full ``pytest hwtests``;
* with a GPU and nvcc: the reference microbenchmarks tools/ref_lds_latency.cu and
  tools/ref_smem_bandwidth.cu, each built with ``nvcc -O3 -arch=<GPU arch>`` and run, against our
  time for the same fact (the comparison, not part of the suite);
* with ``--accelsim DIR`` (accel-sim's gpu-app-collection, ``src/cuda/GPU_Microbenchmark``; not part
  of this project): its programs for LDS latency, shared-memory bandwidth and L1, L2 and DRAM
  latency, each built as its Makefile's release recipe says (its ``-Xptxas`` cache options, this
  GPU's arch for its sm_30-sm_70 gencodes) and run, against ours for the same five facts: each in
  the warm suite, and all five as one pytest process, warm and cold (an empty kernel cache).

Every time is wall-clock seconds, with the CPU seconds the command's processes used beside it (on a
shared machine the wall time depends on what else runs; the load average is printed). Prints a
Markdown report and writes it to --out. Without a GPU the GPU parts are skipped, saying so.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # --root points it at another checkout (before/after)
TOOLS = Path(__file__).resolve().parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]

# Our facts that the reference programs also produce: (label, reference .cu, test id pattern, unit)
SIDE_BY_SIDE = [
    ("LDS latency (pointer chase)", "ref_lds_latency.cu", r"test_smem\.py::test_lds_latency\[500\]", "cycles"),
    ("smem bandwidth (LDS float4, one block)", "ref_smem_bandwidth.cu",
     r"test_smem\.py::test_fact\[smem_lds_float4_bytes_per_cycle\]",
     "B/clk"),
]


#: -k expression selecting every test of the SIDE_BY_SIDE facts
SIDE_BY_SIDE_K = "lds_latency or smem_lds_ or smem_sts_"

#: accel-sim's GPU_Microbenchmark programs for the same facts: (label, program folder, our test, unit)
ACCELSIM = [
    ("LDS latency (pointer chase)", "shared_lat", "hwtests/test_smem.py::test_lds_latency[500]", "cycles"),
    ("smem bandwidth, 32-bit LDS, one block", "shared_bw", "hwtests/test_smem.py::test_fact[smem_lds_float_bytes_per_cycle]",
     "B/clk"),
    ("L1 hit latency (chase)", "l1_lat", "hwtests/test_memory_hierarchy.py::test_chase_latency[l1]", "cycles"),
    ("L2 hit latency (chase)", "l2_lat", "hwtests/test_memory_hierarchy.py::test_chase_per_hop_distribution[l2-10]",
     "cycles"),
    ("DRAM latency (chase)", "mem_lat", "hwtests/test_memory_hierarchy.py::test_chase_latency[dram]", "cycles"),
]


def accelsim_build(folder: Path, arch: str, nvcc: str, exe: Path) -> list[str]:
    """The nvcc command of an accel-sim program's Makefile release recipe, for ``arch``: its SRC and
    NVCC_FLGAS (the -Xptxas load and store cache options; l1_lat has none), -arch=<arch> instead of its
    sm_30-sm_70 gencodes."""
    makefile = folder / "Makefile"
    try:
        make = makefile.read_text()
    except OSError as exc:
        raise ValueError(f"{makefile}: {exc.strerror or exc}; --accelsim takes accel-sim's "
                         "gpu-app-collection/src/cuda/GPU_Microbenchmark folder") from None
    src = re.search(r"^SRC\s*=\s*(\S+)", make, re.M)
    if not src:
        raise ValueError(f"{makefile}: no 'SRC = <file>.cu' line; expected accel-sim's GPU_Microbenchmark Makefiles")
    flags = re.search(r"^NVCC_FLGAS\s*=(.*)$", make, re.M)
    return [nvcc, *(shlex.split(flags.group(1)) if flags else []), f"-arch={arch}", str(folder / src.group(1)),
            "-o", str(exe)]


def printed_value(stdout: str) -> str:
    """The number an accel-sim program prints first after '=' ("Shared Memory Latency  = 23.0 cycles")."""
    m = re.search(r"=\s*([-+]?\d[\d.]*(?:[eE][-+]?\d+)?)", stdout)
    return m.group(1) if m else (stdout.strip().splitlines() or ["(nothing printed)"])[0][:60]


def run(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> dict:
    """Run ``cmd`` in the repository root; wall and CPU seconds (its processes), exit code, summary."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    summary = next((ln.strip("= ") for ln in reversed(lines)
                    if re.search(r"\b(passed|failed|skipped|error|no tests ran)\b", ln)), lines[-1] if lines else "")
    return {"wall": wall, "cpu": cpu, "rc": proc.returncode, "summary": summary, "stdout": proc.stdout,
            "stderr": proc.stderr}


#: --pycache: where the timed processes may write bytecode (None: the environment decides)
PYCACHE: Path | None = None
#: --keep: where each timed run's output (and the GPU runs' reports) are kept (None: nowhere)
KEEP: Path | None = None


def env_with_cache(cache: Path) -> dict:
    env = dict(os.environ)
    env["GPUPROPS_CACHE_DIR"] = str(cache)
    if PYCACHE is not None:  # as Python does by default: compile each source once, not every process
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def cold_and_warm(name: str, args: list[str], cache_root: Path, junit: bool = False) -> dict:
    cache = cache_root / re.sub(r"\W+", "-", name)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    out = {"name": name, "cmd": shlex.join(["pytest", *args])}
    for phase in ("cold", "warm"):
        extra = [f"--junitxml={cache_root / (cache.name + '-' + phase + '.xml')}"] if junit else []
        if KEEP and args[:1] == ["hwtests"] and "static" != args[-1]:
            extra.append(f"--gpuprops-report={KEEP / (cache.name + '-' + phase + '.json')}")
        print(f"  {name}: {phase} ...", file=sys.stderr, flush=True)
        r = run([*PYTEST, *args, *extra], env_with_cache(cache))
        if KEEP:
            (KEEP / f"{cache.name}-{phase}.log").write_text(r["stdout"] + r["stderr"])
        r["junit"] = extra[0].split("=", 1)[1] if junit else None
        out[phase] = r
        print(f"  {name}: {phase} {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU: {r['summary']}", file=sys.stderr)
    return out


def junit_times(path: str | None) -> dict[str, float]:
    """nodeid-like name -> seconds (setup + call + teardown, as JUnit's testcase time)."""
    if not path or not Path(path).exists():
        return {}
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        if case.find("skipped") is not None:
            continue
        mod = cls.replace(".", "/") + ".py" if cls else ""
        out[f"{mod}::{name}"] = float(case.get("time", 0.0))
    return out


def gpu_status() -> tuple[str | None, str | None]:
    """(reason there is no usable GPU or None, the GPU's arch or None), asked in a subprocess."""
    code = ("from pytest_gpuprops import devices\n"
            "r = devices.gpu_unavailable_reason()\n"
            "print('NOGPU ' + r if r else 'ARCH ' + devices.gpu_info().arch + ' ' + devices.gpu_info().name)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    line = (proc.stdout.strip().splitlines() or [""])[-1]
    if line.startswith("ARCH "):
        parts = line.split(" ", 2)
        return None, parts[1] + (f" ({parts[2]})" if len(parts) > 2 else "")
    if line.startswith("NOGPU "):
        return line[6:], None
    return f"could not ask: {(proc.stderr.strip().splitlines() or ['?'])[-1]}", None


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or next(iter(sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True)), None)


def reference(cu: str, arch: str, work: Path) -> dict:
    """Build tools/<cu> with nvcc -O3 -arch=<arch>, run it; seconds for each and the printed value."""
    exe = work / Path(cu).stem
    return build_and_run([str(find_nvcc()), "-O3", f"-arch={arch}", str(TOOLS / cu), "-o", str(exe)], exe)


def build_and_run(build_cmd: list[str], exe: Path, value: Callable[[str], str] = str.strip) -> dict:
    """Run ``build_cmd``, then ``exe``: seconds for each, and ``value`` of what it printed."""
    build = run(build_cmd)
    if build["rc"] != 0:
        return {"error": f"nvcc failed: {(build['stderr'].strip().splitlines() or ['?'])[-1]}"}
    ran = run([str(exe)])
    if ran["rc"] != 0:
        return {"error": f"run failed: {(ran['stderr'].strip().splitlines() or ['?'])[-1]}"}
    return {"build": build["wall"], "run": ran["wall"], "total": build["wall"] + ran["wall"],
            "value": value(ran["stdout"])}


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown report here too")
    ap.add_argument("--skip", action="append", default=[], choices=["cpu", "static", "gpu", "full", "ref"],
                    help="leave a part out (repeatable)")
    ap.add_argument("--cache-root", help="where the fresh caches go (default: a temporary folder, removed)")
    ap.add_argument("--arch", help="arch for the reference nvcc builds (default: the GPU's)")
    ap.add_argument("--pycache", action="store_true",
                    help="let the timed pytest processes write bytecode (into a folder of their own, kept "
                         "between the cold and the warm run) where PYTHONDONTWRITEBYTECODE is set here")
    ap.add_argument("--accelsim", metavar="DIR",
                    help="accel-sim's GPU_Microbenchmark folder (gpu-app-collection/src/cuda/GPU_Microbenchmark): "
                         "its programs for the same five facts, built and run beside ours (needs a GPU and nvcc)")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep every timed pytest run's output here (<suite>-<phase>.log), and give each GPU run "
                         "a report (--gpuprops-report): a fact that fails in a timed run can be read afterwards")
    ap.add_argument("--root", help="time the suites of this checkout instead (e.g. an exported older commit); "
                                   "the reference .cu files still come from this script's folder")
    a = ap.parse_args(argv)
    global ROOT, PYCACHE, KEEP
    here = ROOT
    KEEP = Path(a.keep).resolve() if a.keep else None
    if KEEP:
        KEEP.mkdir(parents=True, exist_ok=True)
    if a.root:
        ROOT = Path(a.root).resolve()

    tmp = Path(a.cache_root) if a.cache_root else Path(tempfile.mkdtemp(prefix="gpuprops-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    if a.pycache:
        PYCACHE = tmp / "pycache"
        # warm the bytecode first: cold means an empty gpuprops cache, not Python compiling itself
        run([*PYTEST, "--co", "-q"], env_with_cache(tmp / "pycache-warmup"))
    no_gpu, gpu = gpu_status()
    start_load = load()
    print(f"bench: {ROOT}; {platform.node()}, {os.cpu_count()} CPUs, load {start_load}; "
          f"GPU: {gpu or 'none (' + str(no_gpu) + ')'}", file=sys.stderr)
    suites = []
    try:
        if "cpu" not in a.skip:
            suites.append(cold_and_warm("CPU suite", [], tmp))
        if "static" not in a.skip:
            suites.append(cold_and_warm("static suite", ["hwtests", "-m", "static"], tmp))
        gpu_suite = None
        if gpu and "gpu" not in a.skip:
            gpu_suite = cold_and_warm("GPU suite", ["hwtests", "-m", "not static"], tmp, junit=True)
            suites.append(gpu_suite)
        if gpu and "full" not in a.skip:
            suites.append(cold_and_warm("full hwtests", ["hwtests"], tmp))
        warm_runs = []
        if gpu_suite:  # warm runs of parts of the GPU suite, in its (warm) cache
            for label, args in WARM_PARTS:
                print(f"  {label}: warm ...", file=sys.stderr, flush=True)
                warm_runs.append((label, shlex.join(["pytest", *args]), run([*PYTEST, *args], env_with_cache(tmp / "GPU-suite"))))

        refs: list = []
        together = None
        nvcc = find_nvcc()
        ref_arch = a.arch or (gpu.split()[0] if gpu else "sm_90")
        # what a build-and-run beside ours lacks here (ours and accel-sim's alike); None: nothing
        cannot_run = (f"skipped: no GPU ({no_gpu})" if not gpu
                      else None if nvcc else "skipped: nvcc not found (PATH, /usr/local/cuda*/bin)")
        ref_note = "left out (--skip ref)" if "ref" in a.skip else cannot_run
        if not ref_note:
            warm_times = junit_times(gpu_suite["warm"]["junit"]) if gpu_suite else {}
            for label, cu, pattern, unit in SIDE_BY_SIDE:
                print(f"  reference {cu} ...", file=sys.stderr, flush=True)
                ref = reference(cu, ref_arch, tmp)
                ours = {k: v for k, v in warm_times.items() if re.search(pattern, k)}
                node = next(iter(ours), None)
                alone = None
                if node:  # the same fact as one warm pytest process of its own (start-up included)
                    cache = tmp / "GPU-suite"
                    r = run([*PYTEST, node], env_with_cache(cache))
                    alone = r["wall"] if r["rc"] == 0 else None
                refs.append((label, cu, unit, ref, node, ours.get(node) if node else None, alone))
            # the comparison: every test of these facts as one warm pytest process
            both = run([*PYTEST, "hwtests", "-k", SIDE_BY_SIDE_K], env_with_cache(tmp / "GPU-suite"))
            refs_total = sum(r[3].get("total", 0.0) for r in refs)
            together = (both["wall"], both["summary"], refs_total)
        accel = None
        if a.accelsim:  # independent of our references: --skip ref leaves it in
            if cannot_run:
                accel = {"note": cannot_run}
            else:
                accel = accelsim_side_by_side(Path(a.accelsim), ref_arch, str(nvcc), tmp,
                                              junit_times(gpu_suite["warm"]["junit"]) if gpu_suite else {})
        text = report(suites, refs, ref_note, ref_arch, gpu, no_gpu, start_load, ROOT if ROOT != here else None,
                      together, accel, warm_runs)
    finally:
        if not a.cache_root:
            shutil.rmtree(tmp, ignore_errors=True)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0 if all(s[p]["rc"] in (0, 5) for s in suites for p in ("cold", "warm")) else 1


def accelsim_side_by_side(folder: Path, arch: str, nvcc: str, work: Path, warm_times: dict[str, float]) -> dict:
    """Each accel-sim program built and run, our test for the same fact in the warm suite, and our five
    tests as one pytest process, warm (the suite's kernel cache) and cold (an empty one)."""
    rows = []
    for label, program, node, unit in ACCELSIM:
        print(f"  accel-sim {program} ...", file=sys.stderr, flush=True)
        try:
            exe = work / f"accelsim-{program}"
            theirs = build_and_run(accelsim_build(folder / program, arch, nvcc, exe), exe, printed_value)
        except ValueError as exc:
            theirs = {"error": str(exc)}
        rows.append({"label": label, "program": program, "unit": unit, "theirs": theirs, "node": node,
                     "ours": warm_times.get(node)})
    nodes = [node for _, _, node, _ in ACCELSIM]
    warm = run([*PYTEST, *nodes], env_with_cache(work / "GPU-suite"))
    cold_cache = work / "accelsim-cold"
    shutil.rmtree(cold_cache, ignore_errors=True)
    cold = run([*PYTEST, *nodes], env_with_cache(cold_cache))
    theirs = sum(r["theirs"].get("total", 0.0) for r in rows)
    return {"rows": rows, "warm": (warm["wall"], warm["summary"]), "cold": (cold["wall"], cold["summary"]),
            "theirs": theirs, "ratio_warm": theirs / warm["wall"] if warm["wall"] else None,
            "ratio_cold": theirs / cold["wall"] if cold["wall"] else None}


def accelsim_report(accel: dict | None) -> list[str]:
    """The Markdown section for accelsim_side_by_side's result (or why it did not run)."""
    if accel is None:
        return []
    md = ["", "#### Side by side with accel-sim's microbenchmarks (the same five facts)", ""]
    if "note" in accel:
        return md + [f"accel-sim programs {accel['note']}."]
    md += ["Theirs: each program of accel-sim's `GPU_Microbenchmark` built as its Makefile's release recipe says "
           "(its `-Xptxas` cache options; this GPU's arch) and run. Ours: the test in the warm GPU suite.", "",
           "| fact | accel-sim program | nvcc build s | run s | build + run s | value printed | our test | ours in suite s |",
           "|---|---|---:|---:|---:|---|---|---:|"]
    for r in accel["rows"]:
        th = r["theirs"]
        if "error" in th:
            md.append(f"| {r['label']} | `{r['program']}` | {th['error']} | | | | `{r['node']}` | {fmt(r['ours'], 2)} |")
        else:
            md.append(f"| {r['label']} | `{r['program']}` | {fmt(th['build'], 2)} | {fmt(th['run'], 2)} | "
                      f"{fmt(th['total'], 2)} | {th['value']} {r['unit']} | `{r['node']}` | {fmt(r['ours'], 2)} |")
    theirs = accel["theirs"]
    (warm, warm_summary), (cold, cold_summary) = accel["warm"], accel["cold"]

    def ratio(ours: float) -> str:
        return f"{theirs / ours:.1f}x" if ours and theirs else "-"
    md += ["", f"The five facts: accel-sim's five programs, built and run, {theirs:.2f} s; ours as one pytest process "
           f"{warm:.2f} s warm ({warm_summary}), {cold:.2f} s cold with an empty kernel cache ({cold_summary}): "
           f"{ratio(warm)} warm, {ratio(cold)} cold (issue 21's targets: 5x warm, 2x cold)."]
    return md


#: warm runs of parts of the GPU suite: (label, pytest arguments)
WARM_PARTS = [("micro-architecture facts (no stresses)", ["hwtests", "-m", "not static and not validation"]),
              ("validation facts (health, stresses)", ["hwtests", "-m", "validation"]),
              ("one fact in its own process", ["hwtests", "-k", "ffma_latency"])]

#: issue 21's targets: (row, where its number comes from, limit in seconds or ratio, "<" or ">=")
TARGETS = [("GPU micro-architecture facts, warm", ("part", "micro-architecture facts (no stresses)"), 8.0, "<"),
           ("GPU suite with the stresses, warm", ("suite", "GPU suite", "warm"), 8.0, "<"),
           ("full `pytest hwtests`, warm", ("suite", "full hwtests", "warm"), 12.0, "<"),
           ("full `pytest hwtests`, first run", ("suite", "full hwtests", "cold"), 45.0, "<"),
           ("GPU suite, first run", ("suite", "GPU suite", "cold"), 30.0, "<"),
           ("one fact in its own process", ("part", "one fact in its own process"), 2.0, "<")]


def targets_table(suites, warm_runs, accel) -> list[str]:
    """The issue's targets against this run's numbers (wall seconds; accel-sim as ratios)."""
    parts = {label: r for label, _, r in warm_runs}
    named = {s["name"]: s for s in suites}
    rows = []
    for row, src, limit, op in TARGETS:
        if src[0] == "part":
            value = parts.get(src[1], {}).get("wall")
        else:
            value = named.get(src[1], {}).get(src[2], {}).get("wall")
        if value is None:
            continue
        rows.append(f"| {row} | {value:.1f} s | {op} {limit:g} s | {'yes' if value < limit else 'no'} |")
    if accel and accel.get("rows") is not None:
        for label, key, limit in (("accel-sim's five facts: ours warm vs theirs", "ratio_warm", 5.0),
                                  ("accel-sim's five facts: ours cold vs theirs", "ratio_cold", 2.0)):
            value = accel.get(key)
            if value is not None:
                rows.append(f"| {label} | {value:.1f}x | >= {limit:g}x | {'yes' if value >= limit else 'no'} |")
    if not rows:
        return []
    return ["", "Against issue 21's targets:", "", "| target | this run | limit | met |", "|---|---:|---:|---|", *rows]


def report(suites, refs, ref_note, ref_arch, gpu, no_gpu, start_load, other_root=None, together=None,
           accel=None, warm_runs=()) -> str:
    what = f" of `{other_root}`" if other_root else ""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    md = [f"### Suite timings{what} ({dt.date.today().isoformat()}{', commit ' + commit if commit else ''})", "",
          f"Machine: `{platform.node()}`, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average (1/5/15 min) {start_load} at the start, {load()} at the end. "
          f"GPU: {gpu or 'none -- ' + str(no_gpu)}."
          + (" Bytecode: written and reused (--pycache)." if PYCACHE is not None else
             " PYTHONDONTWRITEBYTECODE is set: every run compiles Python sources (and pytest rewrites "
             "assertions) from scratch." if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""), "",
          "| suite | command | cold wall s | cold CPU s | warm wall s | warm CPU s | result (warm) |",
          "|---|---|---:|---:|---:|---:|---|"]
    for s in suites:
        md.append(f"| {s['name']} | `{s['cmd'] or 'pytest'}` | {fmt(s['cold']['wall'])} | {fmt(s['cold']['cpu'])} | "
                  f"{fmt(s['warm']['wall'])} | {fmt(s['warm']['cpu'])} | {s['warm']['summary']} |")
    for s in suites:
        for phase in ("cold", "warm"):
            failed = failures(s[phase]["stdout"])
            if failed:
                md += ["", f"Did not pass in the {phase} {s['name']} run:", ""] + [f"- `{f}`" for f in failed]
    if warm_runs:
        md += ["", "Parts of the GPU suite, warm (its kernel cache), each a pytest process of its own:", "",
               "| run | command | wall s | CPU s | result |", "|---|---|---:|---:|---|"]
        md += [f"| {label} | `{cmd}` | {fmt(r['wall'], 2)} | {fmt(r['cpu'])} | {r['summary']} |"
                for label, cmd, r in warm_runs]
    md += targets_table(suites, warm_runs, accel)
    if not gpu:
        md += ["", f"GPU suite, full `pytest hwtests` and per-fact times: skipped, no GPU ({no_gpu})."]
    gpu_suite = next((s for s in suites if s["name"] == "GPU suite"), None)
    if gpu_suite:
        times = junit_times(gpu_suite["warm"]["junit"])
        cold_times = junit_times(gpu_suite["cold"]["junit"])
        md += ["", "#### Per fact, GPU suite (JUnit testcase time: setup + call + teardown)", "",
               "| test | cold s | warm s |", "|---|---:|---:|"]
        for k, v in sorted(times.items(), key=lambda kv: -kv[1]):
            md.append(f"| `{k}` | {fmt(cold_times.get(k), 2)} | {fmt(v, 2)} |")
    md += ["", "#### Side by side: our fact against nvcc build + run of a standalone .cu", ""]
    if ref_note:
        md.append(f"Reference builds {ref_note}.")
    else:
        md += [f"Reference: `nvcc -O3 -arch={ref_arch} tools/<file>.cu` then run it (tools/ref_*.cu are the "
               "comparison, not part of the suite). Ours: the fact's test in the warm GPU suite (JUnit time), "
               "and the same test as a warm `pytest <test>` process of its own.", "",
               "| fact | reference | nvcc build s | run s | build + run s | value printed | our test | ours in suite s "
               "| ours alone s | build + run / ours in suite |",
               "|---|---|---:|---:|---:|---|---|---:|---:|---:|"]
        for label, cu, unit, ref, node, ours, alone in refs:
            if "error" in ref:
                md.append(f"| {label} | `{cu}` | {ref['error']} | | | | `{node}` | {fmt(ours, 2)} | {fmt(alone, 2)} | |")
                continue
            ratio = f"{ref['total'] / ours:.0f}x" if ours else "-"
            md.append(f"| {label} | `{cu}` | {fmt(ref['build'], 2)} | {fmt(ref['run'], 2)} | {fmt(ref['total'], 2)} | "
                      f"{ref['value']} {unit} | `{node}` | {fmt(ours, 2)} | {fmt(alone, 2)} | {ratio} |")
        if together:
            wall, summary, refs_total = together
            md += ["", f"All tests of these facts as one warm process, `pytest hwtests -k \"{SIDE_BY_SIDE_K}\"`: "
                   f"{wall:.2f} s wall ({summary}); both references, nvcc build + run: {refs_total:.2f} s."]
    md += accelsim_report(accel)
    return "\n".join(md) + "\n"


def failures(stdout: str) -> list[str]:
    """The FAILED / ERROR lines of pytest's short summary (-ra), verdict text cut to 160 characters."""
    return [ln[:160] for ln in stdout.splitlines() if ln.startswith(("FAILED ", "ERROR "))]


if __name__ == "__main__":
    sys.exit(main())
