#!/usr/bin/env python3
"""A fact that differs by unit (an L2 slice map, a floorswept GPC, a memory stack, a power limit) takes
its value and tolerance from the units measured so far. This is the rule, as code, so that a facts
entry can be recomputed and checked rather than worked out by hand (a hand-rounded midpoint once left
an edge unit 0.0005 cycles outside its own population):

* value = the exact middle of the lowest and highest value any unit read;
* cycles: tolerance = half that range + the larger of 2 x the largest run noise and the floor a
  single unit's recording gets (0.5 cycles), rounded up to 0.01;
* time units (MHz, GB/s, TFLOP/s), power (W) and host-side microseconds: relative tolerance = the larger of 3 % and half the range
  (relative) + 2 x the largest run noise, rounded up to 0.0001.

    python3 tools/population_fact.py --unit GPU-24f5286e=66.9375,66.9375 --unit GPU-2cf08462=70.9375 --noise 0
    python3 tools/population_fact.py --time --unit GPU-a=7400.1,7151.6 --unit GPU-b=6848.1 --noise 0.2%

prints the value, the tolerance and the sentence for the entry's source. With ``--facts FILE --fact
NAME [--gpu SKU]`` it checks that entry instead: every unit value must lie inside the entry's band by
at least the floor's margin (cycles: 0.5; time units: none beyond the band), else exit status 1.

After a device run, the units can come from its reports, and the entry can be rewritten in place:

    python3 tools/population_fact.py --facts pytest_gpuprops/facts/sm_90.toml --gpu "NVIDIA H200" \
        --fact tma_2d_4k_latency_cycles --reports out/run*.json --write

``--reports``: each report's readings of the fact, grouped by GPU UUID (readings that were THROTTLED,
NOISY or taken under thermal slowdown left out), the run noise the largest they report. ``--write``:
the entry's ``units_range`` is the earlier units, the reports' units join it, and value, tolerance,
``units_range`` and a sentence of the source are rewritten; the file is read back and left as it was
if it does not load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from dataclasses import dataclass

from pytest_gpuprops import assertions, facts, facts_schema
from pytest_gpuprops.facts import tomllib  # the standard library's from Python 3.11, tomli before

CYCLES_FLOOR = 0.5
TIME_UNIT_FLOOR_REL = 0.03
#: units whose facts take the relative rule: the clock-dependent time units, and power and host-side
#: microseconds, which scale with what the unit draws or the host it sits in rather than on a cycle grid
RELATIVE_UNITS = (*assertions.TIME_UNITS, "W", "us")


@dataclass(frozen=True)
class Population:
    value: float
    tolerance: float  # absolute for cycles, relative for time units
    relative: bool
    lowest: float
    highest: float
    margin: float  # what the band leaves beyond the units' range (same unit as tolerance)

    def band(self) -> tuple[float, float]:
        tol = self.tolerance * abs(self.value) if self.relative else self.tolerance
        return self.value - tol, self.value + tol


def _round_up(x: float, step: float) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 10)


def population(units: dict[str, list[float]], noise_rel: float, *, time_unit: bool = False,
               floor: float | None = None) -> Population:
    """The fact's value and tolerance from ``units`` (label -> the values its runs read) and the
    largest relative run-to-run noise of the statistic (0.0056 for 0.56 %)."""
    values = [v for vs in units.values() for v in vs]
    if not values:
        raise ValueError("no unit values: give each unit as --unit LABEL=v1,v2,...")
    if noise_rel < 0 or noise_rel >= 0.5:
        raise ValueError(f"run noise {noise_rel!r} is not a relative noise: give 0.0056 or 0.56% for 0.56 %")
    lo, hi = min(values), max(values)
    mid = (lo + hi) / 2
    half = (hi - lo) / 2
    if time_unit:
        floor = TIME_UNIT_FLOOR_REL if floor is None else floor
        spread = half / abs(mid) + 2 * noise_rel
        tol = _round_up(max(floor, spread), 0.0001)
        return Population(mid, tol, True, lo, hi, tol - half / abs(mid))
    floor = CYCLES_FLOOR if floor is None else floor
    tol = _round_up(half + max(2 * noise_rel * abs(mid), floor), 0.01)
    return Population(mid, tol, False, lo, hi, tol - half)


def source_sentence(units: dict[str, list[float]], noise_rel: float, p: Population) -> str:
    """The part of a facts entry's source that says where its value and tolerance come from."""
    listed = "; ".join(f"{label} ({', '.join(f'{v:g}' for v in vs)})" for label, vs in units.items())
    return f"units: {listed}. Value: the middle of {p.lowest:g} and {p.highest:g}; tolerance: {_rule_text(p, noise_rel)}"


def entry_covers(entry: dict, units: dict[str, list[float]], *, floor: float | None = None) -> list[str]:
    """What in a facts ``entry`` (its value and tolerance) leaves a unit value outside, or closer to the
    band's edge than ``floor`` (cycles: 0.5 by default); [] when every value is covered."""
    value, tol = float(entry["value"]), facts_schema.table_tolerance(entry)
    margin = floor if floor is not None else CYCLES_FLOOR if "tolerance_abs" in entry else 0.0
    problems = []
    for label, values in units.items():
        for v in values:
            room = tol - abs(v - value)
            if room < margin - 1e-9:
                where = "outside" if room < 0 else f"only {room:.4g} inside (less than {margin:g})"
                problems.append(f"{label} read {v:g}: {where} the band {value:g} +- {tol:.4g}")
    return problems


#: verdicts whose reading does not speak for the unit: not settled, or clocks held down
_LEFT_OUT = ("NOISY", "THROTTLED", "ERROR", "SKIPPED")


def units_from_reports(paths: list[str], fact: str, gpu: str | None = None, *, settings: set[str] | None = None
                       ) -> tuple[dict[str, list[float]], float]:
    """The readings of ``fact`` in report JSONs (``--gpuprops-report``), by GPU UUID, and the largest
    relative noise among them; only reports of GPU model ``gpu`` when given. ``settings``: filled with
    the model, driver and CUDA version of each reading taken ("NVIDIA H100 80GB HBM3, driver
    580.159.04, CUDA 13.0"), for the entry's source."""
    units: dict[str, list[float]] = {}
    noise = 0.0
    for path in paths:
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable report JSON ({exc}); give the files --gpuprops-report "
                             "wrote") from None
        for v in data.get("facts", []):
            info = v.get("gpu") or data.get("meta", {}).get("gpu") or {}
            if v.get("fact") != fact or not isinstance(v.get("measured"), (int, float)):
                continue
            if gpu and info.get("name") != gpu:
                continue
            flags = " ".join(v.get("flags") or [])
            if v.get("status") in _LEFT_OUT or "thermal" in flags or "hw_slowdown" in flags:
                continue
            label = (info.get("uuid") or f"GPU {info.get('index', '?')} of {path}")[:12]
            units.setdefault(label, []).append(float(v["measured"]))
            if settings is not None:  # a verdict names its GPU; the driver and CUDA are the host's (meta)
                host = data.get("meta", {}).get("gpu") or {}
                driver = info.get("driver_version") or host.get("driver_version", "?")
                cuda = info.get("cuda_driver_version") or host.get("cuda_driver_version", "?")
                settings.add(f"{info.get('name', 'GPU model not reported')}, driver {driver}, CUDA {cuda}")
            noise = max(noise, float((v.get("measurement") or {}).get("noise") or 0.0))
    return units, noise


def earlier_noise(entry: dict, time_unit: bool) -> float:
    """The run noise an entry's tolerance was made with, read back from it: its margin beyond its
    units' range is 2 x that noise where the noise, not the floor, set it (0 where the floor did). A
    recomputation never takes less: the new units' reports may be quieter than the runs that set it."""
    lo, hi = (float(v) for v in entry["units_range"])
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    tol = entry.get("tolerance_rel" if time_unit else "tolerance_abs")
    if tol is None or not mid:
        return 0.0
    if time_unit:
        margin = float(tol) - half / abs(mid)
        return margin / 2 if float(tol) > TIME_UNIT_FLOOR_REL + 1e-9 and margin > 0 else 0.0
    margin = float(tol) - half
    return margin / (2 * abs(mid)) if margin > CYCLES_FLOOR + 0.01 else 0.0


def rewrite_entry(path: str, gpu: str | None, fact: str, units: dict[str, list[float]], noise_rel: float,
                  today: str, setting: str = "") -> Population:
    """Recompute a facts entry from its earlier units (its units_range) and ``units``, and write value,
    tolerance, units_range and a source sentence in place; the file is read back, and restored if it
    does not load."""
    text = open(path).read()
    data = tomllib.loads(text)
    entry = (data.get("gpus", {}).get(gpu, {}) if gpu else data).get(fact)
    if not isinstance(entry, dict) or "value" not in entry:
        raise ValueError(f"{path} has no fact {fact!r} in " + (f"section gpus.{gpu!r}" if gpu else "the arch's facts"))
    every = dict(units)
    time_unit = entry.get("unit") in RELATIVE_UNITS
    if "units_range" in entry:
        every["earlier units"] = [float(v) for v in entry["units_range"]]
        noise_rel = max(noise_rel, earlier_noise(entry, time_unit))
    p = population(every, noise_rel, time_unit=time_unit)
    header = f'[gpus."{gpu}".{fact}]' if gpu else f"[{fact}]"
    start = text.index(header + "\n")
    end = text.find("\n\n", start)
    end = len(text.rstrip("\n")) if end < 0 else end
    block = text[start:end]
    key = "tolerance_rel" if time_unit else "tolerance_abs"
    block = re.sub(r"\n(tolerance_abs|tolerance_rel|units_range) = [^\n]*", "", block)
    block = re.sub(r"\nvalue = [^\n]*", f"\nvalue = {p.value:.10g}\n{key} = {p.tolerance:.10g}\n"
                   f"units_range = [{p.lowest!r}, {p.highest!r}]", block, count=1)
    listed = "; ".join(f"{label} ({', '.join(f'{v:g}' for v in vs)})" for label, vs in units.items())
    when = f"{today} ({setting})" if setting else today
    block = re.sub(r'(\nsource = ".*)"$', lambda m: m.group(1) + f". Recomputed {when} with {listed} "
                   f"(tools/population_fact.py): population {p.lowest:g}-{p.highest:g}, value = its middle, "
                   f"tolerance = {_rule_text(p, noise_rel)}\"", block, count=1, flags=re.S)
    new_text = text[:start] + block + text[end:]
    with open(path, "w") as fh:
        fh.write(new_text)
    try:
        facts.load_facts(str(data.get("arch")), path)
    except facts.FactsError:
        with open(path, "w") as fh:
            fh.write(text)
        raise
    return p


def _rule_text(p: Population, noise_rel: float) -> str:
    half = (p.highest - p.lowest) / 2
    if p.relative:
        return (f"the larger of 3 % and half the range ({100 * half / abs(p.value):.2f} %) + 2 x the largest run "
                f"noise ({100 * noise_rel:.2f} %)")
    return (f"half the range ({half:.3f}) + the larger of 2 x the largest run noise ({100 * noise_rel:.2f} %) "
            f"and the {CYCLES_FLOOR}-cycle floor")


def _parse_unit(text: str) -> tuple[str, list[float]]:
    label, sep, values = text.partition("=")
    try:
        parsed = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        parsed = []
    if not sep or not label or not parsed:
        raise argparse.ArgumentTypeError(f"--unit {text!r}: expected LABEL=v1,v2,... (e.g. GPU-24f5286e=66.94,66.94)")
    return label, parsed


def _parse_noise(text: str) -> float:
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--noise {text!r}: expected a relative noise, 0.0056 or 0.56%") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--unit", action="append", type=_parse_unit, default=[], help="LABEL=v1,v2,... per unit")
    ap.add_argument("--reports", nargs="+", default=[], metavar="JSON",
                    help="report JSONs of device runs: the fact's readings by GPU UUID (needs --fact)")
    ap.add_argument("--noise", type=_parse_noise, help="largest run noise: 0.0056 or 0.56%% (with --reports: at "
                                                        "least theirs)")
    ap.add_argument("--time", action="store_true", help="a fact in time units (relative tolerance, 3 %% floor)")
    ap.add_argument("--facts", help="check this facts file's entry instead of printing a new one")
    ap.add_argument("--fact", help="with --facts: the fact's name")
    ap.add_argument("--gpu", help="with --facts: the GPU section (e.g. 'NVIDIA H100 80GB HBM3'); none: the arch's")
    ap.add_argument("--write", action="store_true", help="with --facts and --fact: recompute the entry from its "
                                                         "earlier units and these, and write it in place")
    args = ap.parse_args(argv)
    units = dict(args.unit)
    noise = args.noise
    settings: set[str] = set()
    if args.reports:
        if not args.fact:
            ap.error("--reports needs --fact NAME: which fact's readings to take")
        try:
            found, reported_noise = units_from_reports(args.reports, args.fact, args.gpu, settings=settings)
        except ValueError as exc:
            ap.error(str(exc))
        if not found:
            ap.error(f"no usable reading of {args.fact!r} in the reports" + (f" of a {args.gpu}" if args.gpu else "")
                     + " (THROTTLED, NOISY and thermally slowed readings are left out)")
        units.update(found)
        noise = max(noise or 0.0, reported_noise)
    if not units:
        ap.error("give the units: --unit LABEL=v1,v2,... or --reports JSON...")
    if noise is None:
        ap.error("give --noise, the largest run noise (0.0056 or 0.56%), or --reports")
    if args.write:
        if not (args.facts and args.fact):
            ap.error("--write needs --facts FILE and --fact NAME (and --gpu for a per-GPU fact)")
        try:
            p = rewrite_entry(args.facts, args.gpu, args.fact, units, noise, datetime.date.today().isoformat(),
                              "; ".join(sorted(settings)))
        except (ValueError, OSError, facts.FactsError) as exc:  # the file is as it was
            print(f"error: {exc}", file=sys.stderr)
            return 2
        lo, hi = p.band()
        print(f"{args.fact}: value {p.value:.10g}, band {lo:.4f} .. {hi:.4f}, units {p.lowest:g} .. {p.highest:g} "
              f"written to {args.facts}")
        return 0
    if args.facts:
        with open(args.facts, "rb") as fh:
            data = tomllib.load(fh)
        section = data.get("gpus", {}).get(args.gpu, {}) if args.gpu else data
        entry = section.get(args.fact or "")
        if not isinstance(entry, dict) or "value" not in entry:
            where = f"section gpus.{args.gpu!r}" if args.gpu else "the arch's facts"
            print(f"error: {args.facts} has no fact {args.fact!r} in {where}; give --fact (and --gpu for a "
                  "per-GPU fact)", file=sys.stderr)
            return 2
        problems = entry_covers(entry, units)
        for line in problems:
            print(line)
        print(f"{args.fact}: {'does not cover' if problems else 'covers'} the {len(units)} units given")
        return 1 if problems else 0
    try:
        p = population(units, noise, time_unit=args.time)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lo, hi = p.band()
    key = "tolerance_rel" if p.relative else "tolerance_abs"
    print(f"value = {p.value:.10g}\n{key} = {p.tolerance:.10g}")  # never rounded into the range
    print(f"# band {lo:.4f} .. {hi:.4f}; units {p.lowest:g} .. {p.highest:g}")
    print(source_sentence(units, noise, p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
