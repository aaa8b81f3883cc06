"""baselines layer: a unit outside its SKU's recorded population whose owner has accepted it.

A SKU band describes the units it was set from and is never widened because a unit read outside it
(docs/method.md): such a unit FAILs, flagged assertions.OFF_POPULATION, a finding about the unit.
Once its owner has reviewed the finding and accepted the run (``--gpuprops-baseline-accept``), the
same reading on later runs is not red: the verdict is PASS with the flag
:data:`ACCEPTED_OFF_POPULATION` (and the OFF_POPULATION flag kept), and the summary line, the
terminal's list, the Markdown and the JSON (``Verdict.accepted_reading``) name every one.

PASS with a flag, not a status of its own: everything that asks whether a verdict is red, whether a
reading can be a baseline (baselines.UnitRun.lends), whether a unit held its band among its peers
(results.outliers) or whether a reading is settled (tools/same_unit_bands.py) already answers as an
accepted reading needs, and readers of older reports and other tools see no new status.

Only a reading that stays within the fact's same-unit band (unit_compare.same_unit_band) of a reading
the unit's baseline accepted is excused; that accepted reading must itself have been outside the
population (flagged OFF_POPULATION: the owner saw the finding). No accepted reading (a new unit), a
reading that moved past the band (MOVED too) or ``--gpuprops-baseline none``: it stays FAIL.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from . import assertions, baselines, results, unit_compare
from .assertions import OFF_POPULATION, Verdict

#: the flag of a PASS that is outside the SKU's population and within its unit's accepted reading
ACCEPTED_OFF_POPULATION = "outside the SKU's population, accepted for this unit"
#: the flag of an OFF_POPULATION FAIL whose unit has no accepted reading of it (or one it moved from)
NOT_ACCEPTED = "not accepted for this unit"
#: a unit named in a fact's source (the units its population was measured on)
_UNIT_NAME = re.compile(r"\bGPU-[0-9a-fA-F]{8}\b")


@dataclasses.dataclass
class AcceptedReading:
    """A reading of one fact in a run its unit's baseline accepted."""

    verdict: Verdict
    date: str
    path: str
    forced: bool


def off_population(v: Verdict) -> bool:
    return any(f.startswith(OFF_POPULATION) for f in v.flags)


def excusable(v: Verdict) -> bool:
    """A FAIL only because the unit is outside the SKU's population: a settled, confirmed measured
    reading flagged OFF_POPULATION (THROTTLED, NOISY, ERROR, UNSTABLE are other statuses)."""
    return (v.status == assertions.FAIL and results._comparable(v) and off_population(v)
            and not any(f.startswith("not confirmed") for f in v.flags))


def accepted_readings(runs: list[baselines.UnitRun]) -> dict[tuple[str, str], list[AcceptedReading]]:
    """Per fact (results.run_key), a unit's accepted readings outside the population, newest first,
    one per SM clock state (at most baselines.MAX_STATES): from its runs (newest first) that were
    accepted, forced or not, back to the newest forced one (the baseline starts again there)."""
    out: dict[tuple[str, str], list[AcceptedReading]] = {}
    for run in runs:
        if not run.accepted:
            continue
        for v in run.verdicts:
            if not (results._baseline_reading(v) and off_population(v)):
                continue
            have = out.setdefault(results.run_key(v), [])
            if len(have) < baselines.MAX_STATES and not any(
                    unit_compare.same_clock(unit_compare.reading_clock(a.verdict), unit_compare.reading_clock(v)) for a in have):
                have.append(AcceptedReading(v, run.date, str(run.path or "?"), run.forced))
        if run.forced:
            break
    return out


def runs_in_file(path: str | Path) -> dict[str, baselines.UnitRun]:
    """Each unit's run in a file given as the baseline: a stored unit run as it was accepted, or a
    report, whose units were accepted as its ``meta.baselines.stored`` says (a report of a run that
    stored nothing accepted nothing)."""
    p = Path(path)
    data = results.read_json(p)
    if isinstance(data, dict) and data.get("schema") == baselines.SCHEMA:
        run = baselines.read_run(p)
        return {uuid: run for uuid in baselines.by_unit(run.verdicts)}
    res, meta = results.SessionResults.from_json(data, str(p))
    stored = {s.get("uuid"): s for s in (meta.get("baselines") or {}).get("stored") or [] if isinstance(s, dict)}
    out = {}
    for uuid, mine in baselines.by_unit(res.verdicts).items():
        s = stored.get(uuid) or {}
        out[uuid] = baselines.UnitRun(p, meta, s.get("accepted") is True, str(s.get("why", "")), mine,
                                      forced="--gpuprops-baseline-accept" in str(s.get("why", "")))
    return out


class AcceptedUnits:
    """The accepted readings of the baseline this run uses (``choice``: baselines.LAST the store,
    baselines.NONE nothing, else a file), read once per unit in each process (an xdist worker reads
    the store itself; the controller writes it only at the run's end)."""

    def __init__(self, store: baselines.Store, choice: str):
        self.store, self.choice = store, choice
        self._of: dict[str, dict] = {}
        self._file: dict[str, baselines.UnitRun] | None = None

    def of(self, uuid: str) -> dict[tuple[str, str], list[AcceptedReading]]:
        if self.choice == baselines.NONE:
            return {}
        if uuid not in self._of:
            if self.choice == baselines.LAST:
                runs = self.store.runs(uuid)
            else:
                if self._file is None:
                    try:
                        self._file = runs_in_file(self.choice)
                    except (results.ResultsError, baselines.BaselineError):
                        self._file = {}  # the run's end says what is wrong with the file (a usage error)
                runs = [self._file[uuid]] if uuid in self._file else []
            self._of[uuid] = accepted_readings(runs)
        return self._of[uuid]

    def judge(self, v: Verdict) -> Verdict:
        """``v``, or where it is :func:`excusable` and within its same-unit band of the nearest-clock
        reading its unit accepted, a PASS flagged :data:`ACCEPTED_OFF_POPULATION` naming that reading.
        An excusable FAIL that stays a FAIL says why (a flag), unless no baseline is used."""
        if self.choice == baselines.NONE or not excusable(v):
            return v
        got = self.of(results.gpu_key(v)).get(results.run_key(v), [])
        if not got:
            return _flagged(v, f"{NOT_ACCEPTED}: no accepted run of this unit read it outside the population; "
                               "review the unit, and once understood rerun with --gpuprops-baseline-accept: later "
                               "runs within its same-unit band report it, not red")
        nearest = unit_compare.nearest_clock([a.verdict for a in got], v)
        a = next(a for a in got if a.verdict is nearest)
        base = a.verdict.measured
        band = unit_compare.same_unit_band(v, base)
        moved = v.measured - base
        if abs(moved) > band:
            return _flagged(v, f"{NOT_ACCEPTED}: moved {moved:+.3f} {v.unit} ({moved / base:+.2%}) from the reading "
                               f"{base:.3f} accepted on {a.date}, beyond its same-unit band ±{band:.3g}")
        out = dataclasses.replace(v, status=assertions.PASS)
        out.flags = [*v.flags, f"{ACCEPTED_OFF_POPULATION}: accepted on {a.date} at {base:.3f} {v.unit}, within its "
                               f"same-unit band ±{band:.3g} ({moved:+.3f}); a finding kept in every report"]
        out.accepted_reading = {"measured": base, "date": a.date, "path": a.path, "forced": a.forced,
                                "sm_clock_mhz": unit_compare.reading_clock(a.verdict), "band": band}
        return out


def _flagged(v: Verdict, flag: str) -> Verdict:
    out = dataclasses.replace(v)
    out.flags = [*v.flags, flag]
    return out


def accepted(verdicts) -> list[Verdict]:
    """The verdicts passed because their unit accepted a reading outside the SKU's population."""
    return [v for v in verdicts if v.accepted_reading and any(f.startswith(ACCEPTED_OFF_POPULATION) for f in v.flags)]


def findings_within_reach(verdicts) -> list[Verdict]:
    """The PASS verdicts outside their fact's band but within its population's reach
    (assertions.POPULATION_REACH): findings about their units, listed, not red; not those already
    listed as accepted for their unit."""
    return [v for v in verdicts if v.status == assertions.PASS and not v.accepted_reading
            and any(assertions.WITHIN_REACH in f for f in v.flags)]


def describe_finding(v: Verdict) -> str:
    """One line per finding within reach: the value, the band, the units recorded and their names."""
    lo, hi = v.units_range
    off = (v.measured / hi - 1) if v.measured > hi else (v.measured / lo - 1)
    return (f"{v.fact} on {results.gpu_label(v)}: {v.measured:.3f} {v.unit}, {off:+.1%} past the {_units(v)}; band "
            f"{v.expected}")


def _units(v: Verdict) -> str:
    """The units a population fact was recorded from: their range and the names its source gives."""
    lo, hi = v.units_range or (None, None)
    names = list(dict.fromkeys(_UNIT_NAME.findall(v.source)))
    units = f"units {lo:g} .. {hi:g}" if lo is not None else "units ?"
    return units + (f" ({', '.join(names)})" if names else " (units not named in the source)")


def describe(v: Verdict) -> str:
    """One line per accepted verdict: the value, the SKU population and the units behind it, the
    accepted run's date and value."""
    a = v.accepted_reading or {}
    return (f"{v.fact} on {results.gpu_label(v)}: {v.measured:.3f} {v.unit}; SKU population {v.expected} from "
            f"{_units(v)}; accepted run of {a.get('date', '?')}: {a.get('measured', float('nan')):.3f} {v.unit} "
            f"({a.get('path', '?')})")


class UnitBaselines:
    """Each unit's baseline readings as a check sees them (``choice``: baselines.LAST the store,
    baselines.NONE nothing, else a file), read once per unit in each process (an xdist worker reads the
    store itself): :meth:`moved` tells a check that its reading moved off its unit's own baseline, so it is
    measured again (confirmation.confirm_move) before the run's end compares it (baselines.compare_units)."""

    def __init__(self, store: baselines.Store, choice: str):
        self.store, self.choice = store, choice
        self._of: dict[str, dict] = {}
        self._file: list[Verdict] | None = None  # a compare file's readings, read once for every unit in it

    def of(self, uuid: str) -> dict:
        """The unit's baseline readings, indexed for unit_compare.moved (empty: none, or no baseline used)."""
        if self.choice == baselines.NONE:
            return {}
        if uuid not in self._of:
            try:
                if self.choice == baselines.LAST:
                    readings = self.store.baseline(uuid).verdicts
                else:
                    if self._file is None:
                        self._file = baselines.from_report(self.choice)
                    readings = [v for v in self._file if results.gpu_key(v) == uuid]
            except (results.ResultsError, baselines.BaselineError):
                readings = []  # the run's end says what is wrong with it (a usage error)
            self._of[uuid] = unit_compare.moved_index(readings)
        return self._of[uuid]

    def moved(self, v: Verdict) -> bool:
        """Whether the run's end would call ``v`` (its GPU and test set) MOVED against its unit's baseline."""
        return unit_compare.moved(self.of(results.gpu_key(v)), v)
