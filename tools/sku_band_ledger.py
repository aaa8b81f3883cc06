#!/usr/bin/env python3
"""The SKU bands as they were set: a ledger that lets a band change only with its method, or by a
planned recording of units, never quietly after a unit fell outside it.

Each measured fact of the packaged facts files (arch tables and GPU sections) has an entry in
tests/golden/sku_bands.json: its tolerance, its units_range and a hash of its method text. The CPU
suite (tests/test_sku_bands.py) fails when a band is wider than its entry while the method is the
one the entry was set with. ::

    python3 tools/sku_band_ledger.py                 # what differs from the ledger; exit 1 if a band grew
    python3 tools/sku_band_ledger.py --write         # take new facts, narrowed bands and changed methods
    python3 tools/sku_band_ledger.py --write --planned "units GPU-a, GPU-b recorded 2026-12-01" \\
        --fact sm_90:NVIDIA H200:dram_latency_cycles # a wider band from a planned recording, said so

``--write`` refuses a band that grew under the same method unless ``--planned`` names the recording
for the facts given with ``--fact``; the reason is kept in the entry.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_gpuprops import facts as gp_facts  # noqa: E402

LEDGER = ROOT / "tests" / "golden" / "sku_bands.json"


def method_hash(method: str) -> str:
    return hashlib.sha256(" ".join(method.split()).encode()).hexdigest()[:12]


def bands(sets) -> dict[str, dict]:
    """key 'arch:section:fact' -> the band as the facts files set it now."""
    out = {}
    for f in sets:
        for section, table in f.sections():
            for x in table.values():
                if x.kind != "measured":
                    continue
                out[f"{f.arch}:{section}:{x.name}"] = {
                    "tolerance": round(x.tolerance, 9), "units_range": list(x.units_range) if x.units_range else None,
                    "method": method_hash(x.method)}
    return out


def packaged_bands() -> dict[str, dict]:
    return bands([gp_facts.load_facts(a) for a in gp_facts.packaged_archs()])


def differences(now: dict[str, dict], ledger: dict[str, dict]) -> dict[str, list[str]]:
    """{'grew': [...], 'method changed': [...], 'new': [...], 'narrowed': [...], 'gone': [...]} by key."""
    out: dict[str, list[str]] = {"grew": [], "method changed": [], "new": [], "narrowed": [], "gone": []}
    for key, b in sorted(now.items()):
        old = ledger.get(key)
        if old is None:
            out["new"].append(key)
        elif old["method"] != b["method"]:
            out["method changed"].append(key)
        elif b["tolerance"] > old["tolerance"] + 1e-9:
            out["grew"].append(key)
        elif b["tolerance"] < old["tolerance"] - 1e-9:
            out["narrowed"].append(key)
    out["gone"] = sorted(set(ledger) - set(now))
    return out


def read_ledger(path: Path = LEDGER) -> dict[str, dict]:
    return json.loads(path.read_text()) if path.exists() else {}


def describe(key: str, now: dict, ledger: dict) -> str:
    old = ledger.get(key)
    if old is None:
        return f"{key}: not in the ledger"
    return (f"{key}: tolerance {old['tolerance']:g} -> {now[key]['tolerance']:g}, units {old['units_range']} -> "
            f"{now[key]['units_range']} ({old.get('why', '')})")


def write(now: dict, ledger: dict, why: str, planned: str | None, planned_facts: list[str]) -> dict:
    """The ledger updated: every fact but those whose band grew under their method, unless planned."""
    diff = differences(now, ledger)
    refused = [k for k in diff["grew"] if not (planned and k in planned_facts)]
    if refused:
        raise SystemExit("sku_band_ledger: refused, these bands grew under the method they were set with:\n  "
                         + "\n  ".join(describe(k, now, ledger) for k in refused)
                         + "\nA unit outside its SKU's band is a finding about the unit, not a reason to widen it. "
                           "Fix the method (a new method text), or, for a planned recording of units, pass "
                           "--planned 'which units, when' --fact KEY")
    out = {k: v for k, v in ledger.items() if k in now}
    for k in diff["new"] + diff["method changed"] + diff["narrowed"] + [k for k in diff["grew"] if k in planned_facts]:
        reason = planned if k in diff["grew"] else {**{x: "new fact" for x in diff["new"]},
                                                    **{x: "method changed" for x in diff["method changed"]},
                                                    **{x: "narrowed" for x in diff["narrowed"]}}[k]
        out[k] = {**now[k], "why": f"{reason}: {why}" if why else reason}
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="update tests/golden/sku_bands.json")
    ap.add_argument("--why", default="", help="a sentence kept with each entry written (date, units, change)")
    ap.add_argument("--planned", help="the planned recording of units that widens the bands of --fact")
    ap.add_argument("--fact", action="append", default=[], help="arch:section:fact, e.g. sm_90:arch:ffma_latency_cycles")
    a = ap.parse_args(argv)
    now, ledger = packaged_bands(), read_ledger()
    if a.write:
        LEDGER.write_text(json.dumps(write(now, ledger, a.why, a.planned, a.fact), indent=1) + "\n")
        print(f"wrote {LEDGER}")
        return 0
    diff = differences(now, ledger)
    for kind, keys in diff.items():
        for k in keys:
            print(f"{kind}: {describe(k, now, ledger) if k in now else k}")
    return 1 if diff["grew"] else 0


if __name__ == "__main__":
    sys.exit(main())
