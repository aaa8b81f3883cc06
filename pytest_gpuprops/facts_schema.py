"""facts layer, the schema: what a fact table may hold and what each key must be. Every problem is
said as 'what is wrong; what is expected', and facts.py refuses a file with all of its problems; no
Fact is made here (facts.py makes them from tables found sound)."""

from __future__ import annotations

import math
import re

#: a fact's name: lower_snake_case
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: What a fact table may hold; anything else (a misspelt ``tolerence_abs``) is refused, not ignored.
KEYS = {"measured": ("value", "tolerance_abs", "tolerance_rel", "unit", "method", "source", "kind", "scope",
                      "units_range", "same_unit_tolerance_rel"),
         "static": ("kind", "by_compiler", "unit", "method", "source")}
SCHEMA_HINT = "see the facts TOML schema in docs/reference.md"
#: the units the facts and the tests use; a unit that is not one of these but nearly is (``cyles``,
#: ``Mhz``, ``GB/sec``) is a misspelling and refused; a unit unlike all of them is a new one
UNITS = ("cycles", "B/clk", "GB/s", "MHz", "TFLOP/s", "banks", "%", "ns", "bytes/cycle", "cycles/FFMA",
         "cycles/access", "cycles/MMA/SMSP", "cycles/HMMA/SMSP", "FLOP/clk/SM", "GB/s/SM")


def misspelt_unit(unit: str) -> str | None:
    """The known unit ``unit`` is a misspelling of (a different case, or nearly the same letters), or None."""
    import difflib
    if unit in UNITS:
        return None
    same = [u for u in UNITS if u.casefold() == unit.strip().casefold()]
    near = same or difflib.get_close_matches(unit.strip(), UNITS, n=1, cutoff=0.75)
    return near[0] if near else None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fact_problems(name: str, t: dict) -> list[str]:
    """Everything wrong with one fact table, each as 'what is wrong; what is expected'."""
    kind = t.get("kind", "measured")
    if kind not in KEYS:
        return [f'kind = {kind!r}: expected "measured" (the default) or "static"']
    problems = []
    unknown = sorted(set(t) - set(KEYS[kind]))
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)} for a {kind} fact; allowed: {', '.join(KEYS[kind])}")
    missing = [k for k in ("value", "unit", "method", "source") if k not in t and (k != "value" or kind == "measured")]
    if missing:
        problems.append(f"lacks {', '.join(missing)}; every fact needs a value, unit, method and source")
    for k in ("unit", "method", "source"):
        if k in t and (not isinstance(t[k], str) or not t[k].strip()):
            problems.append(f"{k} must be a non-empty string, not {t[k]!r}")
    if isinstance(t.get("unit"), str) and t["unit"].strip() and misspelt_unit(t["unit"]):
        problems.append(f"unit = {t['unit']!r}: did you mean {misspelt_unit(t['unit'])!r}? (units in use: "
                        f"{', '.join(UNITS)})")
    if kind == "measured":
        if "value" in t and (not _number(t["value"]) or not math.isfinite(t["value"])):
            problems.append(f"value = {t['value']!r}: expected a finite number")
        if "tolerance_abs" not in t and "tolerance_rel" not in t:
            problems.append("has no tolerance: give tolerance_abs (in its unit) and/or tolerance_rel (a fraction, "
                            "0.02 = 2 %); write tolerance_abs = 0 for a fact that must hold exactly")
        for k in ("tolerance_abs", "tolerance_rel"):
            if k in t and (not _number(t[k]) or not math.isfinite(t[k]) or t[k] < 0):
                problems.append(f"{k} = {t[k]!r}: expected a finite number >= 0")
        if "same_unit_tolerance_rel" in t:
            r = t["same_unit_tolerance_rel"]
            if not _number(r) or not math.isfinite(r) or not 0 < r < 1:
                problems.append(f"same_unit_tolerance_rel = {r!r}: expected a fraction between 0 and 1 (0.01 = 1 %), "
                                "the band one unit repeats the fact within (tools/same_unit_bands.py)")
        if "units_range" in t and not problems:
            problems += _units_range_problems(t)
    else:
        table = t.get("by_compiler")
        if not isinstance(table, dict) or not table:
            problems.append('lacks by_compiler, a table of compiler -> value: by_compiler = { "nvrtc 13.5" = 24 }')
        else:
            for c, v in table.items():
                if not _number(v) or not math.isfinite(v):
                    problems.append(f"by_compiler[{c!r}] = {v!r}: expected a finite number")
    return problems


def table_tolerance(t: dict) -> float:
    """A fact table's tolerance in its unit, as :attr:`Fact.tolerance` reads it: the wider of
    tolerance_abs and tolerance_rel x |value|."""
    return max(float(t.get("tolerance_abs", 0.0)), abs(float(t["value"])) * float(t.get("tolerance_rel", 0.0)))


def _units_range_problems(t: dict) -> list[str]:
    """A population fact's units_range must be [lowest, highest] and lie inside value +- tolerance: a
    tolerance that leaves out a unit already measured is wrong arithmetic, not a strict fact."""
    r = t["units_range"]
    if (not isinstance(r, list) or len(r) != 2 or not all(_number(v) and math.isfinite(v) for v in r)
            or r[0] > r[1]):
        return [f"units_range = {r!r}: expected [lowest, highest], the values the units measured so far read"]
    value, tol = float(t["value"]), table_tolerance(t)
    if r[0] < value - tol - 1e-9 or r[1] > value + tol + 1e-9:
        return [f"units_range = {r!r} reaches outside value +- tolerance ({value - tol:g} .. {value + tol:g}): "
                "the tolerance must cover every unit measured; recompute the entry with tools/population_fact.py"]
    return []
