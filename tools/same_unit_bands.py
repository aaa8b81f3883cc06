#!/usr/bin/env python3
"""Same-unit bands from same-unit repeatability: how far one unit's reading of each fact moves
from one process to the next, measured, and the band a unit's baseline compare uses.

Give it the reports of several processes (``--gpuprops-report``) on several units of each SKU::

    python3 tools/same_unit_bands.py out/run*.json                 # the table: per fact, the spread and band
    python3 tools/same_unit_bands.py out/run*.json --write \\
        --facts pytest_gpuprops/facts/sm_90.toml                   # and set same_unit_tolerance_rel per fact
    python3 tools/same_unit_bands.py out/run*.json --facts pytest_gpuprops/facts/sm_90.toml \\
        --current-method --one-state latency                       # readings of today's methods only, the
                                                                   # latencies pooled over clock states (reports
                                                                   # before the clock was read beside them)
    python3 tools/same_unit_bands.py out/run*.json --facts pytest_gpuprops/facts/sm_90.toml \
        --current-method                                           # a latency read beside its clock
                                                                   # (KernelSpec.clock_beside) split by that
                                                                   # clock's state, as the compare takes it

The rule (docs/method.md, "the unit's own baseline"): for each fact, each unit's readings over
the processes at one SM clock state (an H100 runs a process at 1980 or 1995 MHz; the compare takes
the baseline reading of the same state, unit_compare.SAME_CLOCK) give a range (highest - lowest) /
median; the band is MARGIN x the largest range any unit showed in one state, and never under the floor: FLOOR_REL, or 1.5 steps of a quantised fact (the smallest
difference between two distinct readings seen, for facts that read on a grid such as clocks in
15 MHz steps). An arch fact takes the widest band of every SKU; a fact of a GPU's section, its
SKU's. Only settled readings count (PASS or FAIL; not NOISY, THROTTLED or UNSTABLE). A fact with
fewer than two readings on any unit gets no band: the compare then falls back to its tolerance.
``--write`` only ever sets bands from data; it names the units and processes in the file's
``same_unit_source`` note. ``--widen`` only lets bands grow (reports that lack the units a band was
set from cannot narrow it), ``--only-missing`` only fills bands in, ``--exclude REGEX`` leaves facts
alone (their method changed since the reports, or it is to be fixed rather than its band widened).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_gpuprops import results, unit_compare  # noqa: E402
from pytest_gpuprops.assertions import FAIL, PASS  # noqa: E402

MARGIN = 2.5
FLOOR_REL = 0.01
QUANTUM_STEPS = 1.5


def readings(paths: list[str], *, methods: dict | None = None, one_state: str | None = None) -> tuple[dict, dict]:
    """{(section, fact, case): {unit or unit@state: [values, one per process]}} (:func:`by_state`) and
    {uuid: SKU name}. ``methods``, where given ({(section, fact): method text}, :func:`current_methods`): only
    readings taken by the method a facts file holds now (a band follows its fact's method). ``one_state``: facts
    (a regular expression on the name) whose readings are pooled per unit whatever the SM clock they were
    filed under: the session clock a latency is filed under is read once, when the process starts, and moved
    1921-2003 MHz on H100s at 1980 (docs/results.md), while the memory latencies in cycles do not follow it."""
    by_case: dict[tuple, dict[str, list[tuple[float, float | None]]]] = defaultdict(lambda: defaultdict(list))
    sku: dict[str, str] = {}
    pooled = re.compile(one_state) if one_state else None
    for p in paths:
        res, _ = results.load(p)
        for v in res.verdicts:
            if not results._comparable(v) or v.status not in (PASS, FAIL):
                continue
            uuid = results.gpu_key(v)
            sku[uuid] = (v.gpu or {}).get("name", "?")
            section = sku[uuid] if v.scope == "gpu" else None
            if methods is not None and methods.get((section, v.fact)) != v.method:
                continue
            clock = None if pooled and pooled.search(v.fact) else unit_compare.reading_clock(v)
            by_case[(section, *results.case_key(v))][uuid].append((float(v.measured), clock))
    return {case: by_state(per) for case, per in by_case.items()}, sku


def current_methods(facts_path) -> dict:
    """{(section, fact): the method text} of every fact in a facts file (section None: the arch's)."""
    from pytest_gpuprops.facts import load_file
    loaded = load_file(facts_path)
    return {(None if section == "arch" else section, name): f.method
            for section, table in loaded.sections() for name, f in table.items()}


def by_state(per_unit: dict[str, list[tuple[float, float | None]]]) -> dict[str, list[float]]:
    """A fact's readings per unit and SM clock state, where at least two states hold two readings or
    more (the evidence a state-by-state band needs); else per unit, whatever the clock (a DRAM stream's
    SM clock wanders with the power cap, and no reading shares its clock with another)."""
    states = {k: xs for uuid, rs in per_unit.items() for k, xs in clock_states(uuid, rs).items()}
    if sum(len(xs) >= 2 for xs in states.values()) >= 2:
        return states
    return {uuid: [x for x, _c in rs] for uuid, rs in per_unit.items()}


def clock_states(uuid: str, rs: list[tuple[float, float | None]]) -> dict[str, list[float]]:
    """One unit's readings split by the SM clock they ran at: readings within unit_compare.SAME_CLOCK of
    each other (in a chain) are one state; readings with no clock, one state of their own."""
    known = sorted((c, x) for x, c in rs if c is not None)
    states: list[list[tuple[float, float]]] = []
    for c, x in known:
        if states and unit_compare.same_clock(states[-1][-1][0], c):
            states[-1].append((c, x))
        else:
            states.append([(c, x)])
    out = {f"{uuid}@{round(st[0][0])}MHz": [x for _c, x in st] for st in states}
    unknown = [x for x, c in rs if c is None]
    if unknown:
        out[uuid] = unknown
    return out


#: a step between one unit's readings under this fraction of the value is noise, not a grid
GRID_MIN_REL = 0.001


def quantum(per_unit: dict[str, list[float]]) -> float | None:
    """The smallest step between two distinct readings of one unit, where a unit's readings sit on a
    grid (a clock in 15 MHz steps): steps under GRID_MIN_REL of the value are noise, not a grid."""
    steps = []
    for xs in per_unit.values():
        distinct = sorted(set(xs))
        steps += [b - a for a, b in zip(distinct, distinct[1:]) if b - a > GRID_MIN_REL * abs(b)]
    return min(steps) if steps else None


def band(per_unit: dict[str, list[float]]) -> dict | None:
    """The band of one fact from its readings per unit, with what it came from; None below two
    readings on every unit."""
    spreads = {u: (max(xs) - min(xs)) / abs(statistics.median(xs)) for u, xs in per_unit.items()
               if len(xs) >= 2 and statistics.median(xs)}
    if not spreads:
        return None
    worst_unit = max(spreads, key=spreads.get)
    every = [x for xs in per_unit.values() for x in xs]
    q = quantum(per_unit)
    floor = FLOOR_REL
    if q is not None:
        floor = max(floor, QUANTUM_STEPS * q / abs(statistics.median(every)))
    rel = max(floor, MARGIN * spreads[worst_unit])
    return {"rel": math.ceil(rel * 1000) / 1000, "spread": spreads[worst_unit], "unit": worst_unit,
            "units": len(spreads), "processes": max(len(xs) for xs in per_unit.values()), "quantum": q}


def bands(paths: list[str], **how) -> tuple[dict[tuple[str | None, str], dict], dict]:
    """{(section, fact): band} over every case of a fact (the widest), and the units' SKUs; ``how``: as
    :func:`readings` takes it."""
    by_case, sku = readings(paths, **how)
    out: dict[tuple[str | None, str], dict] = {}
    for (section, fact, _case), per_unit in by_case.items():
        b = band(per_unit)
        if b is not None and (b["rel"] > out.get((section, fact), {"rel": -1})["rel"]):
            out[(section, fact)] = b
    return out, sku


def table(found: dict, sku: dict) -> str:
    from tabulate import tabulate
    rows = [(sec or "arch", fact, f"{b['spread']:.2%}", f"{b['rel']:.1%}", b["unit"].split("@")[0][:12]
             + ("@" + b["unit"].split("@")[1] if "@" in b["unit"] else ""),
             sku.get(b["unit"].split("@")[0], "?"), b["units"], b["processes"], f"{b['quantum']:g}" if b["quantum"] else "")
            for (sec, fact), b in sorted(found.items(), key=lambda kv: -kv[1]["rel"])]
    n = len(found)
    over2 = sum(b["rel"] >= 0.02 for b in found.values())
    over5 = sum(b["rel"] >= 0.05 for b in found.values())
    head = (f"{n} facts; band >= 2 %: {over2} ({over2 / max(n, 1):.1%}), >= 5 %: {over5} (a 2 % change is caught on "
            f"{n - over2} of {n}, a 5 % change on {n - over5})")
    return head + "\n" + tabulate(rows, headers=["section", "fact", "largest same-unit range", "band", "on unit",
                                                "SKU", "unit states", "processes", "quantum"])


_HEADER = re.compile(r'^\[(?:gpus\."(?P<gpu>[^"]+)"\.)?(?P<fact>[a-z][a-z0-9_]*)\]\s*$')


def write(facts_path: Path, found: dict, source: str, *, only_missing: bool = False, widen: bool = False,
          exclude: str | None = None) -> int:
    """Set ``same_unit_tolerance_rel`` in each measured fact's table that has a band (an arch fact:
    the widest over the SKUs of its GPU sections too), and the file's ``same_unit_source``.
    ``only_missing``: only in tables that have none (bands set from more units stay), and ``source``
    is added to the file's note instead of replacing it. ``widen``: a table's band becomes this data's
    only where that is wider (or it had none): more units and processes under the same rule show a
    wider spread; a band never narrows from data that lack the units it was set from; ``source`` is
    added to the note. ``exclude``: facts (a regular expression on the name) left as they are, e.g.
    those whose method changed since these reports were taken."""
    if only_missing and widen:
        raise ValueError("only_missing and widen are two modes: give one")
    skip = re.compile(exclude) if exclude else None
    found = {k: v for k, v in found.items() if not (skip and skip.search(k[1]))}
    from pytest_gpuprops.facts import load_file
    lines = facts_path.read_text().splitlines()
    arch_wide: dict[str, float] = {}
    for (_sec, fact), b in found.items():
        arch_wide[fact] = max(arch_wide.get(fact, 0.0), b["rel"])
    out, table_of, changed, has_band, existing = [], None, 0, False, None
    for line in lines:
        m = _HEADER.match(line)
        if m:
            table_of, has_band, existing = (m.group("gpu"), m.group("fact")), False, None
        elif line.startswith("["):
            table_of = None
        if table_of and line.startswith("same_unit_tolerance_rel ="):
            if only_missing or (skip and skip.search(table_of[1])):
                has_band = True
                out.append(line)
                continue
            existing = float(line.split("=", 1)[1])
            continue  # else set again below, from this data (with ``widen``: the wider of the two)
        if only_missing and has_band:
            out.append(line)
            continue
        if table_of and line.startswith("unit = ") and not has_band:
            gpu, fact = table_of
            rel = found.get((gpu, fact), {}).get("rel") if gpu else arch_wide.get(fact)
            if widen and existing is not None and (not rel or rel <= existing):
                out.append(f"same_unit_tolerance_rel = {existing:g}")
            elif rel:
                out.append(f"same_unit_tolerance_rel = {rel:g}")
                changed += 1
        out.append(line)
    text = "\n".join(out) + "\n"
    old_note = next((x for x in lines if x.startswith("same_unit_source =")), None)
    if (only_missing or widen or skip) and old_note is not None:  # a partial write: the old note still holds
        import tomllib
        source = tomllib.loads(old_note)["same_unit_source"] + " " + source
    note = f"same_unit_source = {_toml_string(source)}"
    if old_note is not None:
        text = re.sub(r"^same_unit_source = .*$", lambda _m: note, text, count=1, flags=re.M)
    else:
        first_table = next(i for i, x in enumerate(out) if x.startswith("["))
        text = "\n".join(out[:first_table - 1] + [note] + out[first_table - 1:]) + "\n"
    facts_path.write_text(text)
    load_file(facts_path)  # read back: a file the loader refuses is not left half-written unnoticed
    return changed


def _toml_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", help="--gpuprops-report JSON files, one per process")
    ap.add_argument("--facts", type=Path, help="the facts file to set same_unit_tolerance_rel in (with --write)")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--only-missing", action="store_true",
                    help="with --write: set bands only where a fact has none, and add --source to the file's note")
    ap.add_argument("--widen", action="store_true",
                    help="with --write: a band becomes this data's only where that is wider (it never narrows), "
                         "and --source is added to the file's note")
    ap.add_argument("--exclude", help="with --write: facts (a regular expression on the name) left as they are")
    ap.add_argument("--source", default="", help="the sentence naming the units, processes, driver and date")
    ap.add_argument("--current-method", action="store_true",
                    help="with --facts: only readings taken by the method the file holds for their fact now")
    ap.add_argument("--one-state", help="facts (a regular expression on the name) pooled per unit whatever the SM "
                                        "clock their readings were filed under")
    args = ap.parse_args(argv)
    if args.current_method and not args.facts:
        print("same_unit_bands: --current-method needs --facts FILE (the methods to keep)", file=sys.stderr)
        return 2
    try:
        re.compile(args.one_state or "")
        found, sku = bands(args.reports, methods=current_methods(args.facts) if args.current_method else None,
                           one_state=args.one_state)
    except (results.ResultsError, re.error) as exc:
        print(f"same_unit_bands: {exc}", file=sys.stderr)
        return 2
    print(table(found, sku))
    if args.write:
        if not args.facts or not args.source:
            print("same_unit_bands: --write needs --facts FILE and --source 'the units, processes, driver, date'",
                  file=sys.stderr)
            return 2
        try:
            n = write(args.facts, found, args.source, only_missing=args.only_missing, widen=args.widen,
                      exclude=args.exclude)
        except (ValueError, re.error) as exc:
            print(f"same_unit_bands: {exc}", file=sys.stderr)
            return 2
        print(f"set same_unit_tolerance_rel in {n} fact tables of {args.facts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
