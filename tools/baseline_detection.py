#!/usr/bin/env python3
"""What a unit's baseline compare catches, from real runs: every reading of a baseline run moved by a
planted shift, compared with a later run of the same units.

    python3 tools/baseline_detection.py base.json rerun.json          # MOVED of compared, per shift
    python3 tools/baseline_detection.py base.json rerun.json --facts pytest_gpuprops/facts/sm_90.toml
                                                                       # with the bands of a facts file
    python3 tools/baseline_detection.py base.json --plant 0.05 -o planted.json
                                                                       # a baseline 5 % off, for
                                                                       # pytest hwtests --gpuprops-baseline planted.json
    python3 tools/baseline_detection.py --store STORE --plant 0.05 -o PLANTED_STORE
                                                                       # a copy of a baseline store with every
                                                                       # stored reading 5 % off, for
                                                                       # pytest hwtests --gpuprops-baselines PLANTED_STORE

A planted store is the unit's whole baseline moved: its readings at each SM clock and thermal state the
unit's runs met (a power is compared only within its state), where one report holds one reading a fact.

The issue's bar: unshifted, no fact MOVED; a 2 % shift MOVED on at least 95 % of the facts
compared; 5 % on every one. Both directions are planted; a fact counts as caught only if both are.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_gpuprops import facts as gp_facts  # noqa: E402
from pytest_gpuprops import results, unit_compare  # noqa: E402


def with_bands(verdicts, facts_path: str | None):
    """The verdicts with the same-unit band of the facts file given (its GPU's section first)."""
    if not facts_path:
        return list(verdicts)
    loaded = gp_facts.load_file(facts_path)
    out = []
    for v in verdicts:
        chosen = gp_facts.select_gpu(loaded, (v.gpu or {}).get("name", "")) if v.gpu else loaded
        f = chosen.get(v.fact)
        out.append(dataclasses.replace(v, same_unit_tolerance_rel=f.same_unit_tolerance_rel if f else None))
    return out


def shifted(verdicts, shift: float):
    return [dataclasses.replace(v, measured=v.measured * (1 + shift)) if results._comparable(v) else v
            for v in verdicts]


def caught(base, current, shift: float) -> tuple[set, set]:
    """(facts compared, facts MOVED both ways) with the baseline planted ``shift`` off."""
    compared = {(results.gpu_key(v), *results.run_key(v)) for v in current if results._baseline_reading(v)} & {
        (results.gpu_key(v), *results.run_key(v)) for v in base if results._baseline_reading(v)}
    if shift == 0:
        moved = {(results.gpu_key(m), *results.run_key(m)) for m in unit_compare.compare(base, current)}
        return compared, moved
    both = None
    for sign in (+1, -1):
        got = {(results.gpu_key(m), *results.run_key(m)) for m in unit_compare.compare(shifted(base, sign * shift), current)}
        both = got if both is None else both & got
    return compared, both or set()


def plant_store(store: Path, shift: float, out: Path) -> int:
    """A copy of the baseline store ``store`` at ``out`` (a new folder) with every stored reading moved by
    ``shift``; the number of run files written."""
    written = 0
    for src in sorted(store.glob("*/*.json")):
        doc = json.loads(src.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("facts"), list):
            continue  # not a unit run (the store never takes such a file for a baseline either)
        for fact in doc["facts"]:
            if isinstance(fact.get("measured"), (int, float)) and not isinstance(fact["measured"], bool):
                fact["measured"] = fact["measured"] * (1 + shift)
        doc["planted_shift"] = shift
        dst = out / src.parent.name / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(json.dumps(doc, indent=1))
        written += 1
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", nargs="?")
    ap.add_argument("--store", help="with --plant: a baseline store (--gpuprops-baselines) to copy with its readings moved")
    ap.add_argument("current", nargs="?")
    ap.add_argument("--facts", help="take the same-unit bands from this facts file, not from the reports")
    ap.add_argument("--shifts", type=float, nargs="+", default=[0.0, 0.02, 0.05])
    ap.add_argument("--plant", type=float, help="write a baseline with every reading this fraction off")
    ap.add_argument("-o", "--output")
    a = ap.parse_args(argv)
    if a.store is not None:
        if a.plant is None or a.base is not None:
            print("baseline_detection: --store goes with --plant and -o, without a report", file=sys.stderr)
            return 2
        if not a.output or Path(a.output).exists():
            print("baseline_detection: --plant needs -o NEW_FOLDER (never an existing one)", file=sys.stderr)
            return 2
        n = plant_store(Path(a.store), a.plant, Path(a.output))
        if not n:
            print(f"baseline_detection: {a.store} holds no unit runs (<uuid>/<run>.json)", file=sys.stderr)
            return 2
        print(f"wrote {a.output}: {n} unit run(s) of {a.store}, every stored reading moved by {a.plant:+.1%}")
        return 0
    if a.base is None:
        print("baseline_detection: give a report (or --store with --plant)", file=sys.stderr)
        return 2
    base_res, meta = results.load(a.base)
    if a.plant is not None:
        if not a.output or Path(a.output).exists():
            print("baseline_detection: --plant needs -o NEW_FILE (never an existing one)", file=sys.stderr)
            return 2
        base_res.verdicts = shifted(base_res.verdicts, a.plant)
        Path(a.output).write_text(json.dumps(base_res.to_json({**meta, "planted_shift": a.plant})))
        print(f"wrote {a.output}: every measured reading of {a.base} moved by {a.plant:+.1%}")
        return 0
    if not a.current:
        print("baseline_detection: give the later run to compare, or --plant", file=sys.stderr)
        return 2
    base = with_bands(base_res.verdicts, a.facts)
    current = with_bands(results.load(a.current)[0].verdicts, a.facts)
    for shift in a.shifts:
        compared, moved = caught(base, current, shift)
        missed = sorted(compared - moved) if shift else sorted(moved)
        what = "false MOVED" if shift == 0 else "MOVED both ways"
        print(f"shift {shift:.0%}: {len(moved)} of {len(compared)} facts {what}"
              + (f" ({len(moved) / max(len(compared), 1):.1%})" if shift else ""))
        for key in missed[:20]:
            print(f"   {'moved' if shift == 0 else 'missed'}: {key[0][:12]} {key[1]} {key[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
