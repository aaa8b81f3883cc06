"""results layer: what a session found, in a form that travels.

One :class:`SessionResults` holds the verdicts, the facts recorded in record mode and the plot
points. Its JSON form is the same everywhere: pytest-xdist workers send each test's part to the
controller with the test's report, ``--gpuprops-report`` writes it, ``--gpuprops-compare`` reads an
old one as a baseline and ``gpuprops merge`` reads one per node. The fleet rules work on it too:
units differ (floorsweeping, L2 slices, memory stacks), so a GPU off the median of its peers by
more than the fact's tolerance is an OUTLIER (red) only when it is also more than
:data:`FLEET_SHIFT` off them; a smaller difference between units that each hold the SKU's band is
the population's own spread, reported as UNITS DIFFER. The tight check of a unit is its own
baseline (:mod:`pytest_gpuprops.unit_compare`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path

from . import assertions
from .assertions import Verdict
from .facts import Fact

OUTLIER, MOVED = "OUTLIER", "MOVED"
FLEET_STATUSES = (OUTLIER, MOVED)
#: a difference between units that the SKU's band holds: reported, not red
UNITS_DIFFER = "UNITS DIFFER"
#: a GPU this far off its peers' median is an OUTLIER whatever the bands say
FLEET_SHIFT = 0.05
SCHEMA = "gpuprops-results/1"


class ResultsError(Exception):
    """A results file that cannot be read: says which file and what is wrong."""


@dataclasses.dataclass
class SessionResults:
    verdicts: list[Verdict] = dataclasses.field(default_factory=list)
    recorded: dict[str, Fact] = dataclasses.field(default_factory=dict)
    plot_points: dict[str, list[dict]] = dataclasses.field(default_factory=dict)

    # -- one test's part, as it travels with the test's report ---------------------------------
    def add(self, part: dict) -> None:
        """Merge one test's part (fixture layer: its verdicts, recorded facts and plot points as
        dicts, carried on its report from a worker or this process). A compile-time
        verdict seen twice (xdist's 'each' runs the static facts on every worker) is kept once."""
        seen = {(v.nodeid, v.fact) for v in self.verdicts if v.gpu is None}
        mine: set[tuple] = set()
        for d in part.get("verdicts", []):
            v = Verdict.from_dict(d)
            again = (v.fact, v.status, v.measured_text, str(v.gpu))
            if (v.gpu is None and (v.nodeid, v.fact) in seen) or again in mine:
                continue  # a static verdict from another worker, or hypothesis replaying a failing example
            mine.add(again)
            self.verdicts.append(v)
        for f in part.get("recorded", []):
            self.recorded[f["name"]] = Fact(**f)
        for plot, pts in part.get("plot_points", {}).items():
            self.plot_points.setdefault(plot, []).extend(pts)

    # -- whole sessions ------------------------------------------------------------------------
    def summary(self) -> dict[str, int]:
        return {s: sum(1 for v in self.verdicts if v.status == s) for s in sorted({v.status for v in self.verdicts})}

    def to_json(self, meta: dict) -> dict:
        return {"schema": SCHEMA, "meta": meta, "summary": self.summary(),
                "facts": [v.as_dict() for v in self.verdicts],
                "recorded": [dataclasses.asdict(f) for f in self.recorded.values()],
                "plot_points": self.plot_points}

    @classmethod
    def from_json(cls, data: dict, where: str = "<json>") -> tuple[SessionResults, dict]:
        """A report read back, checked first against the report schema (report_schema.check_report):
        a part of the wrong type, a verdict without its keys or with an unknown status, or a report of
        another schema version is a ResultsError naming ``where``, the entry and what was expected."""
        from .report_schema import SchemaError, check_report
        if not isinstance(data, dict) or "facts" not in data:
            raise ResultsError(f"{where} is not a gpuprops report: expected a JSON object with a 'facts' list "
                               "(written by pytest --gpuprops-report)")
        try:
            check_report(data, where)
        except SchemaError as exc:
            raise ResultsError(str(exc)) from None
        known = {f.name for f in dataclasses.fields(Fact)}
        res = cls([Verdict.from_dict(v) for v in data["facts"]],
                  {f["name"]: Fact(**{k: x for k, x in f.items() if k in known}) for f in data.get("recorded") or []},
                  dict(data.get("plot_points") or {}))
        return res, dict(data.get("meta") or {})


# ----------------------------------------------------------------------------------------------
# how a run ended: a report of a run that was cut short must never read as a green run

#: pytest's exit codes, by number (pytest.ExitCode), for the report
EXIT_NAMES = {0: "OK", 1: "TESTS_FAILED", 2: "INTERRUPTED", 3: "INTERNAL_ERROR", 4: "USAGE_ERROR",
              5: "NO_TESTS_COLLECTED"}
RUNNING = {"status": "running", "complete": False}


def run_status(exit_status: int, selected: int, finished: int) -> dict:
    """What the report says of the run itself: its exit status, whether it was interrupted (Ctrl-C,
    SIGTERM: exit status 2), and how many selected tests did not run. ``complete`` is False for a
    run cut short."""
    interrupted = int(exit_status) == 2
    not_run = max(selected - finished, 0)
    return {"status": "finished", "exit_status": int(exit_status), "exit": EXIT_NAMES.get(int(exit_status), "?"),
            "interrupted": interrupted, "selected": selected, "finished": finished, "not_run": not_run,
            "complete": not interrupted and not_run == 0 and int(exit_status) in (0, 1, 5)}


def incomplete_reason(run: dict | None) -> str | None:
    """None for a run that ended on its own with every selected test run; otherwise a sentence."""
    if not run:
        return ("the report does not say how its run ended (no 'run' entry: written by an older gpuprops); "
                "treat it as incomplete and run again")
    if run.get("status") == "running":
        return ("the run had not finished when this report was written: it was killed (SIGKILL, out of memory, "
                "a timeout) or is still running")
    if run.get("complete"):
        return None
    done = f"{run.get('finished', '?')} of {run.get('selected', '?')} selected tests finished"
    if run.get("interrupted"):
        return f"interrupted (exit status {run.get('exit_status')}): {done}, {run.get('not_run', '?')} did not run"
    if run.get("not_run"):
        return f"{done}, {run.get('not_run')} did not run (exit status {run.get('exit_status')} {run.get('exit')})"
    return f"ended with exit status {run.get('exit_status')} ({run.get('exit')}): {done}"


def load(path: str | Path) -> tuple[SessionResults, dict]:
    p = Path(path)
    return SessionResults.from_json(read_json(p), str(p))


def read_json(p: Path):
    """A report file's JSON, or a ResultsError saying in one line why it cannot be read: missing, a
    folder, unreadable, not UTF-8 text (a binary file), not JSON."""
    if p.is_dir():
        raise ResultsError(f"report {p} is a folder; pass the JSON file written by --gpuprops-report")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ResultsError(f"cannot read report {p}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{p} is not a gpuprops report: it is not text (byte 0x{raw[exc.start]:02x} at offset "
                           f"{exc.start} is not UTF-8); pass a report written by --gpuprops-report") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{p} is not JSON ({exc}); pass a report written by --gpuprops-report") from exc


# ----------------------------------------------------------------------------------------------
# fleet rules


def gpu_key(v: Verdict) -> str:
    """The GPU a verdict was measured on: its UUID where known, else host/index."""
    g = v.gpu or {}
    return g.get("uuid") or f"{g.get('host', '?')}/gpu{g.get('index', '?')}"


def gpu_label(v: Verdict) -> str:
    g = v.gpu or {}
    where = f"{g['host']}:" if g.get("host") else ""
    label = f"{where}gpu{g.get('index', '?')} {g.get('name', '?')}" + (f" ({g['uuid'][:12]})" if g.get("uuid") else "")
    if v.peer:  # a pair fact: the link from this GPU to its peer
        label += f" -> gpu{v.peer.get('index', '?')}" + (f" ({v.peer['uuid'][:12]})" if v.peer.get("uuid") else "")
    return label


def case_key(v: Verdict) -> tuple[str, str]:
    """A fact measured by one test, whatever GPU ran it: the node id without its ``gpuN`` parameter."""
    # the path (which may hold a "[") ends at the first "::"; the parameters open at the first "[" after it
    # (a parameter may hold "::" or "[" of its own)
    path, sep, name = v.nodeid.partition("::")
    if name.endswith("]") and "[" in name:
        base, params = name[:-1].split("[", 1)
        kept = [p for p in params.split("-") if not re.fullmatch(r"gpu\d+", p)]
        name = base + (f"[{'-'.join(kept)}]" if kept else "")
    return v.fact, path + sep + name


def run_key(v: Verdict) -> tuple[str, str]:
    """A fact measured by one test as two runs of one unit name it, wherever pytest was started: the
    test file's name without its folders (``cd hwtests && pytest`` names it ``test_smem.py::...``),
    no ``gpuN`` parameter, and a pair fact's peer by its UUID."""
    fact, case = case_key(v)
    path, sep, name = case.partition("::")
    key = path.rsplit("/", 1)[-1] + sep + name
    if v.peer:  # a pair fact: the link to this peer, whichever index CUDA gives it in this run
        key += f" -> {v.peer.get('uuid') or v.peer.get('pci_bus_id') or v.peer.get('index')}"
    return fact, key


def _comparable(v: Verdict) -> bool:
    return v.kind == "measured" and v.measured is not None and v.tolerance is not None and v.gpu is not None


def peer_group(v: Verdict) -> str:
    """Which GPUs a fact is compared among: an arch fact (the SM's) among GPUs of its arch, a GPU-scoped
    fact (the memory system's: DRAM and L2 latency differ between H100 HBM3 and H200 HBM3e) among
    GPUs of the same model."""
    if v.scope == "gpu":
        return f"{(v.gpu or {}).get('name', '?')} ({v.arch}, GPU facts)"
    return f"{v.arch} (arch facts)"


def outliers(verdicts: Iterable[Verdict]) -> tuple[list[Verdict], str]:
    """OUTLIER verdicts for GPUs whose measurement is off the median of their peers (with two, off the
    other GPU's) for the same test by more than the fact's tolerance, and a sentence saying what was
    compared (with one GPU there is nothing to compare, and it says so). Peers are the GPUs of the
    same :func:`peer_group`: a mixed fleet never compares an H100's DRAM latency with an H200's, nor
    one arch's LDS latency with another's; where there are several groups the sentence names them."""
    by_case: dict[tuple[str, str, str], dict[str, Verdict]] = {}
    for v in verdicts:
        v = fleet_reading(v)  # a NOISY or THROTTLED reading is red on its own and says nothing of the unit
        if v is not None:
            by_case.setdefault((peer_group(v), *case_key(v)), {})[gpu_key(v)] = v
    gpus = {g for per in by_case.values() for g in per}
    if len(gpus) < 2:
        return [], f"outlier check: not run ({len(gpus)} GPU measured; it needs two or more)"
    groups: dict[str, set[str]] = {}
    for (group, *_), per in by_case.items():
        groups.setdefault(group, set()).update(per)
    out = []
    for _key, per in sorted(by_case.items()):
        if len(per) < 2:
            continue
        everyone = statistics.median(p.measured for p in per.values())
        for key, v in per.items():
            peers = [p.measured for k, p in per.items() if k != key]
            median = everyone if len(per) >= 3 else peers[0]  # two GPUs: each against the other
            if abs(v.measured - median) <= v.tolerance:
                continue
            # relative to the smaller of the two, so two GPUs are judged alike whichever is the peer
            small = min(abs(v.measured), abs(median))
            off = abs(v.measured - median) / small if small else float("inf")
            # a difference the recorded units already show between them (a population fact's units_range)
            # is the population's, whatever its size: tma_1d_1k on two healthy H100s, 323.25 vs 339.75
            spread = (v.units_range[1] - v.units_range[0]) if v.units_range else 0.0
            contained = abs(v.measured - median) <= spread
            red_one = v.status != assertions.PASS or (off > FLEET_SHIFT and not contained)
            o = dataclasses.replace(v, status=OUTLIER if red_one else UNITS_DIFFER, kind="fleet", attempts=[],
                                    expected=f"peer median {median:.3f} ± {v.tolerance:.3g} {v.unit}",
                                    measured_text=f"{v.measured:.3f} {v.unit} on {gpu_label(v)} ({off:.1%} off); "
                                    "peers: " + ", ".join(f"{x:.3f}" for x in peers))
            o.flags = [f"{len(per)} GPUs compared"]
            if red_one:
                o.flags += ([f"more than {FLEET_SHIFT:.0%} off its peers"] if off > FLEET_SHIFT else []) + (
                    ["with two GPUs, both are flagged: a third tells which one is off"] if len(per) == 2 else [])
            elif off > FLEET_SHIFT:
                o.flags.append(f"inside the SKU's band, and no further apart than the units recorded "
                               f"({v.units_range[0]:g} .. {v.units_range[1]:g}): the units' own spread")
            else:
                o.flags.append(f"inside the SKU's band, under {FLEET_SHIFT:.0%} apart: the units' own spread")
            out.append(o)
    reds = sum(o.status == OUTLIER for o in out)
    note = f"outlier check: {len(gpus)} GPUs, {len(by_case)} facts compared, {reds} outlier(s)"
    if len(out) > reds:
        note += f", {len(out) - reds} fact(s) where units differ inside the SKU's band (not red)"
    if len(groups) > 1:
        note += "; compared within " + ", ".join(f"{g}: {len(m)} GPU(s)" + ("" if len(m) > 1 else ", nothing to compare")
                                                 for g, m in sorted(groups.items()))
    return out, note


def fleet_reading(v: Verdict) -> Verdict | None:
    """The verdict a GPU brings to the fleet compare: a settled reading (:func:`_baseline_reading`) as it
    is; an UNSTABLE one as the median of the attempts that held, judged as they were (they are settled
    readings of the unit: H100 GPU-e63c01fa's L2 read was NOISY once, then read 8625.8 and 8619.6, and
    left its peer's planted 5.5 % shift uncompared); None for the rest."""
    if _baseline_reading(v):
        return v
    if v.status != assertions.UNSTABLE or not _comparable(v):
        return None
    held = [a["measured"] for a in v.attempts if a.get("status") == assertions.PASS and a.get("measured") is not None]
    return dataclasses.replace(v, measured=statistics.median(held), status=assertions.PASS) if held else None


def _baseline_reading(v: Verdict) -> bool:
    """A verdict whose reading can serve as a unit's baseline, or be compared with one (a baseline's, a
    peer's): a settled measurement that held or failed its band (not NOISY, THROTTLED or UNSTABLE, and not a
    link rate judged though its copies never settled, assertions.JUDGED_UNSETTLED: it shows the link at least
    that fast, not how fast, so a baseline or peer above it says nothing)."""
    return (_comparable(v) and v.status in (assertions.PASS, assertions.FAIL)
            and not any(f.startswith(assertions.JUDGED_UNSETTLED) for f in v.flags))


def red(verdicts: Iterable[Verdict]) -> list[Verdict]:
    """The verdicts that make a run fail."""
    return [v for v in verdicts if v.status in (*assertions.NOT_OK, *FLEET_STATUSES)]
