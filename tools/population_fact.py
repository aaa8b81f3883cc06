#!/usr/bin/env python3
"""A fact that differs by unit (an L2 slice map, a floorswept GPC, a memory stack, a power limit) takes
its value and tolerance from the units measured so far. This is the rule, as code, so that a facts
entry can be recomputed and checked rather than worked out by hand (a hand-rounded midpoint once left
an edge unit 0.0005 cycles outside its own population):

* value = the exact middle of the lowest and highest value any unit read;
* cycles: tolerance = half that range + the larger of 2 x the largest run noise and the floor a
  single unit's recording gets (0.5 cycles), rounded up to 0.01;
* time units (MHz, GB/s, TFLOP/s): relative tolerance = the larger of 3 % and half the range
  (relative) + 2 x the largest run noise, rounded up to 0.0001.

    python3 tools/population_fact.py --unit GPU-24f5286e=66.9375,66.9375 --unit GPU-2cf08462=70.9375 --noise 0
    python3 tools/population_fact.py --time --unit GPU-a=7400.1,7151.6 --unit GPU-b=6848.1 --noise 0.2%

prints the value, the tolerance and the sentence for the entry's source. With ``--facts FILE --fact
NAME [--gpu SKU]`` it checks that entry instead: every unit value must lie inside the entry's band by
at least the floor's margin (cycles: 0.5; time units: none beyond the band), else exit status 1.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

CYCLES_FLOOR = 0.5
TIME_UNIT_FLOOR_REL = 0.03


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
    half = (p.highest - p.lowest) / 2
    if p.relative:
        rule = (f"tolerance: the larger of 3 % and half that range ({100 * half / abs(p.value):.2f} %) + 2 x the "
                f"largest run noise ({100 * noise_rel:.2f} %)")
    else:
        rule = (f"tolerance: half that range ({half:.3f}) + the larger of 2 x the largest run noise "
                f"({100 * noise_rel:.2f} %) and the {CYCLES_FLOOR}-cycle floor")
    return f"units: {listed}. Value: the middle of {p.lowest:g} and {p.highest:g}; {rule}"


def entry_covers(entry: dict, units: dict[str, list[float]], *, floor: float | None = None) -> list[str]:
    """What in a facts ``entry`` (its value and tolerance) leaves a unit value outside, or closer to the
    band's edge than ``floor`` (cycles: 0.5 by default); [] when every value is covered."""
    value = float(entry["value"])
    if "tolerance_abs" in entry:
        tol, margin = float(entry["tolerance_abs"]), CYCLES_FLOOR if floor is None else floor
    else:
        tol, margin = float(entry["tolerance_rel"]) * abs(value), 0.0 if floor is None else floor
    problems = []
    for label, values in units.items():
        for v in values:
            room = tol - abs(v - value)
            if room < margin - 1e-9:
                where = "outside" if room < 0 else f"only {room:.4g} inside (less than {margin:g})"
                problems.append(f"{label} read {v:g}: {where} the band {value:g} +- {tol:.4g}")
    return problems


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
    ap.add_argument("--unit", action="append", type=_parse_unit, required=True, help="LABEL=v1,v2,... per unit")
    ap.add_argument("--noise", type=_parse_noise, required=True, help="largest run noise: 0.0056 or 0.56%%")
    ap.add_argument("--time", action="store_true", help="a fact in time units (relative tolerance, 3 %% floor)")
    ap.add_argument("--facts", help="check this facts file's entry instead of printing a new one")
    ap.add_argument("--fact", help="with --facts: the fact's name")
    ap.add_argument("--gpu", help="with --facts: the GPU section (e.g. 'NVIDIA H100 80GB HBM3'); none: the arch's")
    args = ap.parse_args(argv)
    units = dict(args.unit)
    if args.facts:
        import tomllib
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
        p = population(units, args.noise, time_unit=args.time)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lo, hi = p.band()
    key = "tolerance_rel" if p.relative else "tolerance_abs"
    print(f"value = {p.value:.10g}\n{key} = {p.tolerance:.10g}")  # never rounded into the range
    print(f"# band {lo:.4f} .. {hi:.4f}; units {p.lowest:g} .. {p.highest:g}")
    print(source_sentence(units, args.noise, p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
