"""report layer, the terminal's tables: what a session found, one row per verdict (whole, or grouped
by area within 120 columns), one column per GPU, and each pair fact's GPU x GPU matrix; the summary line.

Fed only with :class:`~pytest_gpuprops.assertions.Verdict` objects and plain numbers, so every
table can be produced (and tested) without a GPU. The report files (JSON, Markdown) are
:mod:`~pytest_gpuprops.report_files`, the plots :mod:`~pytest_gpuprops.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from tabulate import tabulate

from .assertions import Verdict

HEADERS = ["fact", "arch", "expected", "measured", "verdict"]
#: the order statuses are counted in: what needs attention first
STATUS_ORDER = ["FAIL", "THROTTLED", "UNSTABLE", "NOISY", "ERROR", "SCHEDULE CHANGED", "OUTLIER", "MOVED", "PASS", "UNITS DIFFER", "RECORDED",
                "SKIPPED"]


def _measured_cell(v: Verdict) -> str:
    if v.measured is None:
        if v.kind != "test":
            return "-"
        text = v.measured_text.split("\n")[0]
        return text if len(text) <= 72 else text[:71] + "…"
    m = v.measurement
    if v.kind in ("fleet", "baseline"):
        return v.measured_text.split("\n")[0]
    if m:
        cell = f"{v.measured:.3f} (±{m['noise']:.2%}, n={m['n']})"
        if v.attempts:
            cell += " then " + ", ".join(f"{a['measured']:.3f}" for a in v.attempts[1:] if a["measured"] is not None)
        return cell
    return v.measured_text.split("\n")[0]


def summary_line(verdicts: Iterable[Verdict], run: dict | None = None) -> str:
    """"gpuprops: 2 FAIL, 1 UNSTABLE, 27 PASS, 4 SKIPPED" in the order that needs attention; a run
    cut short (``run``: results.run_status) says so first: "gpuprops: INCOMPLETE (interrupted ...): 20 PASS"."""
    from .assertions import BEYOND_UNITS
    from .confirmation import DISCARDED_FIRST
    from .results import incomplete_reason
    verdicts = list(verdicts)
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    order = STATUS_ORDER + sorted(set(counts) - set(STATUS_ORDER))
    head = "gpuprops: "
    if run is not None and incomplete_reason(run):
        head += f"INCOMPLETE ({incomplete_reason(run)}): "
    line = head + (", ".join(f"{counts[s]} {s}" for s in order if s in counts) or "no verdicts")
    from .accepted_units import accepted, findings_within_reach
    beyond = [v for v in verdicts if any(f.startswith(BEYOND_UNITS) for f in v.flags)]
    if beyond:  # a new extreme of a population fact: seen the first time, not when a later unit fails
        line += "; " + _counted(beyond, BEYOND_UNITS, "inside the band; tools/unit_values.py lists them", facts=True)
    findings = findings_within_reach(verdicts)
    if findings:  # outside the band, within the population's reach: counted and listed, not red
        line += "; " + _counted(findings, "PASS outside the SKU's population, within its reach",
                                "findings about their units, listed")
    discarded = [v for v in verdicts if any(f.startswith(DISCARDED_FIRST) for f in v.flags)]
    if discarded:  # judged on new measurements after a noisy or impossible one: counted, the reason in each
        line += "; " + _counted(discarded, "judged after a noisy or impossible first measurement was discarded",
                                "the verdicts say why")
    known = accepted(verdicts)
    if known:  # outside the SKU's population, accepted for their unit: counted, never absorbed
        line += "; " + _counted(known, "PASS outside the SKU's population, accepted for their unit",
                                "listed with their accepted runs")
    return line


def _counted(verdicts: list[Verdict], what: str, then: str, *, facts: bool = False) -> str:
    """"3 <what> (fact_a, fact_b, fact_c, ...: <then>)": the verdicts counted (or, ``facts``, their
    distinct facts), the first three facts named."""
    names = list(dict.fromkeys(v.fact for v in verdicts))
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"{len(names) if facts else len(verdicts)} {what} ({shown}: {then})"


def gpu_table(verdicts: Iterable[Verdict], fmt: str = "simple") -> str:
    """One row per fact and test, one column per GPU: measured value and verdict on each."""
    from .results import case_key, gpu_key, gpu_label
    vs = [v for v in verdicts if v.gpu]
    gpus: dict[str, str] = {}
    for v in vs:
        gpus.setdefault(gpu_key(v), gpu_label(v))
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for v in vs:
        cell = f"{v.measured:.3f} {v.verdict_text}" if v.measured is not None else v.verdict_text
        rows.setdefault(case_key(v), {})[gpu_key(v)] = cell
    body = [[fact, node.split("::")[-1], *(cells.get(g, "-") for g in gpus)] for (fact, node), cells in rows.items()]
    return tabulate(body, headers=["fact", "test", *gpus.values()], tablefmt=fmt, disable_numparse=True)


def _end_label(g: dict) -> str:
    where = f"{g['host']}:" if g.get("host") else ""
    return f"{where}gpu{g.get('index', '?')}" + (f" ({g['uuid'][:12]})" if g.get("uuid") else "")


def link_matrices(verdicts: Iterable[Verdict]) -> dict[str, dict]:
    """Per pair fact (a verdict with a ``peer``), the GPU x GPU matrix: ``gpus`` the labels of every
    GPU that issued or was a peer, ``cells[i][j]`` {"value", "status"} of the pair gpus[i] -> gpus[j]
    (None where that pair was not measured, and on the diagonal). The report's JSON ``links`` holds it;
    :func:`link_tables` prints it."""
    out: dict[str, dict] = {}
    for v in verdicts:
        if not (v.peer and v.gpu):
            continue
        m = out.setdefault(v.fact, {"unit": v.unit, "pairs": {}, "labels": {}})
        src, dst = _end_label(v.gpu), _end_label(v.peer)
        m["labels"].setdefault(src, v.gpu.get("index", 0))
        m["labels"].setdefault(dst, v.peer.get("index", 0))
        m["pairs"][(src, dst)] = {"value": v.measured, "status": v.status}
    for fact, m in out.items():
        gpus = sorted(m["labels"], key=lambda label: (label.rsplit("gpu", 1)[0], m["labels"][label] is None,
                                                       m["labels"][label] or 0, label))
        out[fact] = {"unit": m["unit"], "gpus": gpus,
                     "cells": [[m["pairs"].get((a, b)) for b in gpus] for a in gpus]}
    return dict(sorted(out.items()))


def link_tables(matrices: dict[str, dict], fmt: str = "simple") -> str:
    """Each pair fact's matrix: a row per GPU that issued the work, a column per peer; a cell is the
    value, with the verdict beside it where it is not PASS; "x" on the diagonal, "-" not measured."""
    parts = []
    for fact, m in matrices.items():
        body = []
        for i, (src, row) in enumerate(zip(m["gpus"], m["cells"])):
            cells = []
            for j, c in enumerate(row):
                if i == j:
                    cells.append("x")
                elif c is None:
                    cells.append("-")
                else:
                    text = "-" if c["value"] is None else f"{c['value']:.1f}"
                    cells.append(text if c["status"] == "PASS" else f"{text} {c['status']}")
            body.append([src, *cells])
        parts.append(f"{fact} ({m['unit']}; row: the GPU that issued, column: its peer)\n"
                     + tabulate(body, headers=["", *m["gpus"]], tablefmt=fmt, disable_numparse=True))
    return "\n\n".join(parts)


def rows(verdicts: Iterable[Verdict]) -> list[list[str]]:
    return [[v.fact, v.arch, v.expected, _measured_cell(v), v.verdict_text] for v in verdicts]


def table(verdicts: Iterable[Verdict], fmt: str = "simple") -> str:
    """Every verdict, one row each, every cell whole: the Markdown report's table and the terminal's
    with ``-v`` (:func:`compact_table` is the terminal's default)."""
    return tabulate(rows(verdicts), headers=HEADERS, tablefmt=fmt, disable_numparse=True)


def terminal_table(verdicts: Iterable[Verdict], verbose: int = 0) -> str:
    """The facts table the terminal prints at the end of a run: :func:`compact_table`, or with
    ``-v`` (``verbose`` >= 1) :func:`table`, every row and cell whole."""
    return table(verdicts) if verbose >= 1 else compact_table(verdicts)


# ----------------------------------------------------------------------------------------------
# the terminal's default table: grouped by area, what needs attention first, within 120 columns

#: the widest line :func:`compact_table` writes
TERMINAL_WIDTH = 120
#: the area of a verdict, by the name of its test file (without "test_") or, for a verdict with no
#: node id, by its fact's name: the first prefix that matches names the group
AREAS = (
    ("static", "static (SASS)"),
    ("async_units", "async units"),
    ("wgmma", "wgmma"),
    ("throughput_and_clocks", "clocks & throughput"),
    ("health", "health"),
    ("smem", "shared memory"),
    ("memory_hierarchy", "memory hierarchy"),
    ("regbank", "register banks"),
    ("alu", "ALU"),
    ("mma", "tensor cores (mma.sync)"),
    ("tensorcore", "tensor cores (mma.sync)"),
    ("hmma", "tensor cores (mma.sync)"),
    ("dpx_atomics_const", "DPX, atomics & constant cache"),
    ("node_links", "node links (NVLink, peer, host)"),
)
#: the narrowest a shortened column gets, beside the fact's name
_MIN_COLUMN = 16
#: the room the verdict keeps when cells must be shortened: its status and the start of its flags
_VERDICT_ROOM = 24
_INDENT = "  "


def area(v: Verdict) -> str:
    """The group a verdict is listed under: its test file's area (``hwtests/test_wgmma_dtypes.py``:
    "wgmma"), else the file's name; a verdict with no node id goes by its fact's name."""
    if v.nodeid:
        stem = Path(v.nodeid.split("::")[0]).stem.removeprefix("test_")
        for prefix, name in AREAS:
            if stem.startswith(prefix):
                return name
        return stem.replace("_", " ") or "other"
    for prefix, name in AREAS:
        if v.fact.startswith(prefix):
            return name
    return "other"


def _rank(status: str) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


def _counts(verdicts: Iterable[Verdict]) -> str:
    """"1 FAIL, 20 PASS": how many of each status, in the order that needs attention."""
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    return ", ".join(f"{counts[s]} {s}" for s in sorted(counts, key=lambda s: (_rank(s), s)))


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _compact_measured(v: Verdict) -> str:
    """The measured value without its details (spread, n, attempts, notes: -v and the reports have
    them): the number, a model's "31/32 cases", the head of a health reading ("x16 of x16")."""
    if v.measured is None and v.kind != "test":
        return "-"
    text = v.measured_text.split("\n")[0]
    if v.kind in ("test", "fleet", "baseline"):
        return text
    if v.measurement and v.measured is not None:
        return f"{v.measured:.3f}"
    if v.kind == "model":
        return text.split(" within ")[0]
    if v.kind == "static" and " with " in text:  # "24 cycles with nvrtc 13.5": as the expected reads
        return f"{text.split()[0]} ({text.split(' with ', 1)[1]})"
    return text.split("; ")[0].split(" (")[0]


def _typical(lengths: list[int]) -> int:
    """The width 49 cells in 50 fit in: a few long cells do not widen a column for all."""
    ls = sorted(lengths)
    return ls[max(math.ceil(0.98 * len(ls)) - 1, 0)] if ls else 0


def _widths(headers: list[str], body: list[list[str]], room: int) -> list[int]:
    """Widths of every column but the last (which takes the rest of its line), within ``room``.

    Where the whole cells do not fit, the verdict keeps _VERDICT_ROOM, the fact's name (first) stays
    whole, the middle columns get the width most of their cells need (:func:`_typical`, at least
    _MIN_COLUMN), shortened evenly, the widest first, if that is still too wide."""
    cols = [[r[i] for r in body] for i in range(len(headers))]
    natural = [max([len(h)] + [len(c) for c in col]) for h, col in zip(headers, cols)]
    if sum(natural[:-1]) <= room - natural[-1]:
        return natural[:-1]
    statuses = max([len(headers[-1])] + [len(c.split(" (")[0]) for c in cols[-1]])
    room -= max(statuses, min(natural[-1], _VERDICT_ROOM))  # the status whole, and a start of the flags
    mids = [min(n, max(len(h), _typical([len(c) for c in col]), _MIN_COLUMN))
            for n, h, col in zip(natural[1:-1], headers[1:-1], cols[1:-1])]
    first = min(natural[0], max(room - sum(min(m, _MIN_COLUMN) for m in mids), _MIN_COLUMN))
    left = room - first
    cap = max(mids, default=0)
    while cap > 1 and sum(min(m, cap) for m in mids) > left:
        cap -= 1
    return [first] + [min(m, cap) for m in mids]


def compact_table(verdicts: Iterable[Verdict], width: int = TERMINAL_WIDTH) -> str:
    """The terminal's table: fact, expected, measured, verdict, no line wider than ``width``.

    One group per area (:func:`area`) under a heading with its counts by status, the groups that
    need attention first and, within a group, the rows in STATUS_ORDER; a test that
    checked no fact and was skipped is counted in a line per reason ("3 skipped: <reason>"), not
    listed. The arch is said once above the table when every row has the same (its column is
    dropped). A measured value is shown without its spread, n and attempts; long cells end in "…".
    The whole texts are in the JSON and Markdown reports, and in :func:`table`, which the terminal
    prints with ``-v``.
    """
    vs = list(verdicts)
    archs = list(dict.fromkeys(v.arch for v in vs if v.kind != "test" and v.arch not in ("", "-")))
    one_arch = len(archs) <= 1
    headers = ["fact", "expected", "measured", "verdict"] if one_arch else HEADERS

    def cells(v: Verdict) -> list[str]:
        row = [v.fact, v.expected, _compact_measured(v), v.verdict_text]
        return row if one_arch else [row[0], v.arch, *row[1:]]

    indent, sep = _INDENT, "  "

    def counted(v: Verdict) -> bool:  # a skipped test that checked no fact: counted, not listed
        return v.kind == "test" and v.status == "SKIPPED"

    body = [cells(v) for v in vs if not counted(v)]
    ws = _widths(headers, body, width - len(indent) - len(sep) * (len(headers) - 1))

    def line(row: list[str]) -> str:
        head = indent + "".join(_clip(c, w).ljust(w) + sep for c, w in zip(row, ws))
        room, status = width - len(head), row[-1].split(" (")[0]  # the verdict: its status whole
        return (head + (_clip(row[-1], room) if room > len(status) else status)).rstrip()

    def rule() -> str:
        head = indent + "".join("-" * w + sep for w in ws)
        return head + "-" * min(max(len(r[-1]) for r in body + [headers]), width - len(head))

    out = []
    if one_arch and archs:
        out.append(_clip(f"all facts for {archs[0]}; -v shows noise, n, attempts, whole verdicts and each "
                         "skipped test", width))
    if body:
        out += [line(headers), rule()]
    groups: dict[str, list[Verdict]] = {}
    for v in vs:
        groups.setdefault(area(v), []).append(v)
    for name, members in sorted(groups.items(), key=lambda kv: min(_rank(v.status) for v in kv[1])):
        tail = f" — {len(members)}: {_counts(members)}"
        out.append(_clip(_clip(name, max(width - len(tail), 8)) + tail, width))
        out += [line(cells(v)) for v in sorted(members, key=lambda v: _rank(v.status)) if not counted(v)]
        skipped: dict[str, int] = {}
        for v in members:
            if counted(v):
                reason = v.measured_text.split("\n")[0]
                skipped[reason] = skipped.get(reason, 0) + 1
        out += [_clip(f"{indent}{n} skipped: {reason}", width) for reason, n in skipped.items()]
    return "\n".join(out)
