"""baselines layer: every GPU unit's own earlier runs, kept by UUID, so a run compares each unit
with itself by default.

A SKU's band must hold every healthy unit (units differ by floorsweeping, L2 slices, memory
stacks), so it cannot be tight. A unit repeats itself much more closely (docs/method.md, "the
unit's own baseline"), and that is where a driver, firmware or hardware change shows. So, in
pytest-benchmark's manner (``--benchmark-autosave`` and ``--benchmark-compare`` to the last run),
every run keeps what it measured on each GPU in a store of plain JSON files, one folder per unit::

    <store>/GPU-c5d47081-161b-c161-0c26-c68d1b7f8938/20261126T093012.123456-node7-4711.json

and the next run on that unit compares each fact with the unit's last *accepted* reading of it. A
run is accepted for a unit when it finished and nothing it said of that unit was red;
``--gpuprops-baseline-accept`` accepts a run that was (after a planned change, once the change is
understood). A finished run with something red still lends its passing readings of the other
facts: one NOISY fact does not leave a unit without a baseline, and a fact that was red (MOVED,
FAIL, NOISY, ...) keeps its earlier baseline. The store is a folder of files: list it with ``gpuprops baselines``, copy
it, or point a fleet at one shared folder (``--gpuprops-baselines DIR`` or
``GPUPROPS_BASELINE_DIR``); each unit writes only its own folder.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from . import results, unit_compare
from .assertions import Verdict

SCHEMA = "gpuprops-unit-run/1"
STORE_ENV = "GPUPROPS_BASELINE_DIR"
#: --gpuprops-baseline's choices besides a file: the unit's last accepted run, or no baseline at all
LAST, NONE = "last", "none"
#: what may differ between a unit's runs, in the words of the summary line
WATCHED = (("driver_version", "driver"), ("cuda_driver_version", "CUDA driver"),
           ("cuda_runtime_version", "CUDA runtime"), ("vbios_version", "VBIOS"),
           ("max_sm_clock_mhz", "max SM clock (MHz)"), ("compiler", "compiler"), ("host", "host"))
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,}$")
#: a fact's baseline holds at most this many readings, each of another state (unit_compare.same_state; the newest first)
MAX_STATES = 3


class BaselineError(Exception):
    """A store or baseline file that cannot be used: says which, what is wrong and what to do."""


def default_dir() -> Path:
    """``GPUPROPS_BASELINE_DIR``, else ``$XDG_DATA_HOME/gpuprops/baselines``, else
    ``~/.local/share/gpuprops/baselines``: data about the machine's GPUs, kept across checkouts."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "gpuprops" / "baselines"


@dataclasses.dataclass
class UnitRun:
    """One run's readings of one unit, as stored."""

    path: Path | None
    meta: dict
    accepted: bool
    why: str
    verdicts: list[Verdict]
    #: the facts (results.run_key) that were red on this unit in this run: never a baseline unless accepted
    red: set = dataclasses.field(default_factory=set)
    #: accepted with --gpuprops-baseline-accept: the unit's baseline starts again here (nothing older is used)
    forced: bool = False

    @property
    def finished(self) -> bool:
        return results.incomplete_reason(self.meta.get("run")) is None

    def lends(self, v: Verdict) -> bool:
        """Whether this run's reading ``v`` can be a baseline: the whole run was accepted, or it
        finished and this fact passed and was not red on this unit (not MOVED, not an OUTLIER)."""
        from .assertions import PASS
        return self.accepted or (self.finished and v.status == PASS and results.run_key(v) not in self.red)

    @property
    def date(self) -> str:
        return str(self.meta.get("date", "?"))

    def describe(self) -> str:
        where = f" ({self.path})" if self.path else ""
        return f"run of {self.date} on {self.meta.get('host', '?')}{where}"


def _stored_verdict(v: Verdict) -> dict:
    """A verdict as the store keeps it: everything but the per-launch and per-warp values."""
    d = v.as_dict()
    if d.get("measurement"):
        d["measurement"] = {k: x for k, x in d["measurement"].items() if k not in ("values", "per_warp")}
    return d


def unit_meta(meta: dict, gpu: dict) -> dict:
    """What a stored run says of its unit and run: the GPU's identity (driver, VBIOS, clocks) and
    the run's date, host, compiler and how it ended."""
    out = {k: meta.get(k) for k in ("date", "compiler", "nvdisasm", "run") if k in meta}
    out.update({k: x for k, x in gpu.items() if k != "index"})
    return out


def red_for_unit(verdicts: Iterable[Verdict], uuid: str) -> list[Verdict]:
    return [v for v in results.red(verdicts) if results.gpu_key(v) == uuid]


def acceptance(run: dict | None, red: list[Verdict], forced: bool) -> tuple[bool, str]:
    """Whether a run becomes its unit's baseline, and why (said in the summary and kept in the file)."""
    if forced:
        return True, "accepted with --gpuprops-baseline-accept" + (f" ({len(red)} red verdict(s))" if red else "")
    why_not = results.incomplete_reason(run)
    if why_not:
        return False, f"not accepted: the run is incomplete ({why_not})"
    if red:
        names = ", ".join(dict.fromkeys(f"{v.fact} {v.status}" for v in red[:3]))
        return False, (f"not accepted: {len(red)} red verdict(s) on this unit ({names}{', ...' if len(red) > 3 else ''}), "
                       "which keep their earlier baselines (its passing readings serve for the other facts); once "
                       "understood, rerun with --gpuprops-baseline-accept to make the whole run the baseline")
    return True, "accepted: finished with nothing red on this unit"


class Store:
    """A folder of unit runs: ``<root>/<uuid>/<stamp>.json``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def units(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir() if d.is_dir() and _UUID.match(d.name))

    def runs(self, uuid: str) -> list[UnitRun]:
        """The unit's stored runs, newest first. A file that cannot be read is skipped, never taken
        for a baseline (:meth:`read` names it)."""
        return self.read(uuid)[0]

    def read(self, uuid: str) -> tuple[list[UnitRun], list[Path]]:
        """The unit's stored runs, newest first, and the files in its folder that are not unit runs."""
        folder = self.root / uuid
        if not folder.is_dir():
            return [], []
        runs, bad = [], []
        for p in sorted(folder.glob("*.json"), reverse=True):
            try:
                runs.append(read_run(p))
            except BaselineError:
                bad.append(p)
        return runs, bad

    def save(self, verdicts: list[Verdict], meta: dict, *, accept: bool = False) -> list[tuple[str, Path, bool, str]]:
        """Keep this run's readings of every unit it measured, one file per unit; returns (uuid,
        path, accepted, why) per unit. Files are written whole (a temporary file renamed), so a
        reader never sees half a run."""
        saved = []
        for uuid, mine in sorted(by_unit(verdicts).items()):
            measured = [v for v in mine if results._comparable(v)]
            if not measured:
                continue
            red = red_for_unit(verdicts, uuid)
            ok, why = acceptance(meta.get("run"), red, accept)
            stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S.%f")  # sorts by time; two runs a second apart differ
            folder = self.root / uuid
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{stamp}-{meta.get('host', 'host')}-{os.getpid()}.json"
            n = 1
            while path.exists():  # the same microsecond in the same process: never overwrite a run
                path = folder / f"{stamp}-{meta.get('host', 'host')}-{os.getpid()}-{n}.json"
                n += 1
            doc = {"schema": SCHEMA, "meta": unit_meta(meta, mine[0].gpu or {}), "accepted": ok, "why": why,
                   "forced": bool(accept),
                   "red": sorted({"::".join(results.run_key(v)) for v in red}),
                   "facts": [_stored_verdict(v) for v in measured]}
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            tmp.replace(path)
            saved.append((uuid, path, ok, why))
        return saved

    def baseline(self, uuid: str, runs: list[UnitRun] | None = None) -> Baseline:
        """The unit's baseline: for each fact (by test), the newest reading a run lends
        (:meth:`UnitRun.lends`), so a ``-k`` run does not hide the facts it did not select and a
        red fact keeps its earlier baseline; and the newest at each other state the unit has run in
        (unit_compare.same_state: the SM clock's, a power's start temperature), so a run at 1995 MHz is
        compared with one at 1995 MHz."""
        chosen: dict[tuple[str, str], list[Verdict]] = {}
        used: list[UnitRun] = []
        for run in self.runs(uuid) if runs is None else runs:
            fresh = [v for v in run.verdicts if run.lends(v) and len(chosen.get(results.run_key(v), [])) < MAX_STATES
                     and not any(unit_compare.same_state(o, v) for o in chosen.get(results.run_key(v), []))]
            if fresh:
                used.append(run)
                for v in fresh:
                    chosen.setdefault(results.run_key(v), []).append(v)
            if run.forced:
                break  # accepted after a planned change: what came before it is no longer the unit's baseline
        return Baseline(uuid, [v for vs in chosen.values() for v in vs], used)


def by_unit(verdicts: Iterable[Verdict]) -> dict[str, list[Verdict]]:
    out: dict[str, list[Verdict]] = {}
    for v in verdicts:
        if v.gpu and _UUID.match(v.gpu.get("uuid") or ""):
            out.setdefault(v.gpu["uuid"], []).append(v)
    return out


def read_run(path: str | Path) -> UnitRun:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(f"{p} cannot be read as a unit run ({exc}); move it out of the store") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("facts"), list):
        raise BaselineError(f"{p} is not a gpuprops unit run (expected \"schema\": \"{SCHEMA}\" and a 'facts' list)")
    from .report_schema import SchemaError, check_unit_run
    try:
        check_unit_run(data, str(p))
    except SchemaError as exc:
        raise BaselineError(str(exc)) from None
    verdicts = [Verdict.from_dict(d) for d in data["facts"]]
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    red = {tuple(k.split("::", 1)) for k in data.get("red", []) if isinstance(k, str) and "::" in k}
    return UnitRun(p, meta, bool(data.get("accepted")), str(data.get("why", "")), verdicts, red,
                   data.get("forced") is True)


@dataclasses.dataclass
class Baseline:
    """What a unit is compared with: readings per fact and the runs they came from."""

    uuid: str
    verdicts: list[Verdict]
    runs: list[UnitRun]

    def describe(self, now_meta: dict | None = None) -> str:
        """'run of <date> on <host> (<file>), N facts; since then: driver a -> b' for the summary."""
        if not self.runs:
            return "no baseline yet: this run's passing readings become the unit's baseline"
        head = self.runs[0].describe() + (f" and {len(self.runs) - 1} older run(s) for the readings it does not lend"
                                          if len(self.runs) > 1 else "")
        text = f"{head}, {len({results.run_key(v) for v in self.verdicts})} facts"
        if now_meta is not None:
            text += "; since then: " + (", ".join(changes(self.runs[0].meta, now_meta)) or "no change of driver, "
                                        "CUDA, VBIOS, max SM clock or compiler")
        return text


def changes(old: dict, new: dict) -> list[str]:
    """What differs between two runs' unit metas, e.g. 'driver 570.86.15 -> 580.159.04'."""
    out = []
    for key, label in WATCHED:
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None and str(a) != str(b):
            out.append(f"{label} {a} -> {b}")
    return out


def from_report(path: str | Path) -> list[Verdict]:
    """The verdicts of a file given as the baseline: a --gpuprops-report JSON or a stored unit run."""
    p = Path(path)
    try:
        data = results.read_json(p)
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            return read_run(p).verdicts
        return results.SessionResults.from_json(data, str(p))[0].verdicts
    except results.ResultsError as exc:
        raise BaselineError(str(exc)) from None


def compare_units(store: Store, choice: str, verdicts: list[Verdict], meta: dict
                  ) -> tuple[list[Verdict], list[str], dict[str, Baseline]]:
    """This run's MOVED verdicts, a line per unit for the summary, and each unit's baseline: with
    ``choice`` LAST each unit against its own baseline in ``store``, NONE nothing, else the report
    or stored run at that path for every unit in it."""
    if choice == NONE:
        return [], [], {}
    if choice != LAST:
        moved, changed, other_state = unit_compare.compare_all(from_report(choice), verdicts)
        return moved, [f"compared with {choice}{not_compared(changed, other_state, stored=False)}"], {}
    moved, notes, used = [], [], {}
    for uuid, mine in sorted(by_unit(verdicts).items()):
        base = used[uuid] = store.baseline(uuid)
        got, changed, other_state = unit_compare.compare_all(base.verdicts, mine)
        moved += got
        notes.append(f"{uuid[:12]}: {base.describe(unit_meta_of(mine, uuid, meta))}"
                     + (f"; {len(got)} MOVED" if base.runs else "") + not_compared(changed, other_state))
    return moved, notes, used


def not_compared(changed: list[str], other_state: list[str], *, stored: bool = True) -> str:
    """What a compare's summary line says of the facts it did not compare: those whose method changed since
    their baseline readings, and the powers read in another SM clock or thermal state ("" where none);
    ``stored``: the baseline is the unit's store, where this run's readings become the next baseline."""
    def some(facts):
        return f"{', '.join(facts[:3])}{', ...' if len(facts) > 3 else ''}"
    then = ": this run's reading is their baseline from now on" if stored else ""
    return ((f"; {len(changed)} not compared, their method changed since ({some(changed)}{then})" if changed else "")
            + (f"; {len(other_state)} not compared, read in another SM clock or thermal state than their baseline "
               f"readings ({some(other_state)})" if other_state else ""))


def unit_meta_of(verdicts: Iterable[Verdict], uuid: str, meta: dict) -> dict:
    """This run's meta for one unit (its GPU identity as the verdicts carry it)."""
    gpu = next((v.gpu for v in verdicts if v.gpu and v.gpu.get("uuid") == uuid), {}) or {}
    return unit_meta(meta, gpu)
