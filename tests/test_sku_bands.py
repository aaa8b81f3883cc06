"""The SKU bands of the packaged facts: what each one is sure to catch on every unit it was set from
(reported by `gpuprops facts --detection`), and that none grew without a method change
(tools/sku_band_ledger.py against tests/golden/sku_bands.json). Both read the real facts files."""

import json
import sys
from pathlib import Path

import pytest

from pytest_gpuprops import cli, cli_facts
from pytest_gpuprops import facts as gp_facts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import sku_band_ledger as ledger_tool  # noqa: E402

#: no SKU band may let a shift this large pass on a unit it was set from
MOST_A_BAND_MAY_MISS = 0.10


def _fact(**kw):
    base = dict(name="x", arch="sm_90", unit="cycles", method="chase", source="s", value=100.0, tolerance_abs=2.0)
    return gp_facts.Fact(**{**base, **kw})


@pytest.mark.parametrize("kw, shift", [
    ({}, 0.02),  # one value: the tolerance, relative
    ({"units_range": (99.0, 101.0)}, 3.0 / 99.0),  # the bottom unit must rise past 102
    ({"units_range": (98.0, 101.5), "tolerance_abs": 2.0}, 4.0 / 98.0),
    ({"value": 0.0}, None),
    ({"kind": "static", "value": None, "by_compiler": {"nvrtc 13.5": 24}}, None),
])
def test_the_detection_shift_is_what_moves_every_recorded_unit_out_of_the_band(kw, shift):
    got = _fact(**kw).detection_shift
    assert got == pytest.approx(shift) if shift is not None else got is None


def test_a_unit_shifted_by_the_detection_shift_leaves_the_band_and_a_smaller_shift_may_not():
    f = _fact(units_range=(98.0, 101.5))
    d = f.detection_shift
    for unit in (98.0, 99.5, 101.5):
        for sign in (+1, -1):
            assert not f.accepts(unit * (1 + sign * d * 1.0001))
    assert f.accepts(98.0 * (1 + d * 0.99))  # the bottom unit, just under the shift, still passes


def test_every_packaged_fact_catches_a_ten_percent_shift_on_every_unit_it_was_set_from(capsys):
    sets = [gp_facts.load_facts(a) for a in gp_facts.packaged_archs()]
    rows = cli_facts.detection_rows(sets)
    assert len(rows) > 250
    print(cli_facts.detection_table(sets))  # the report: `pytest -s -k ten_percent` or `gpuprops facts --detection`
    weak = [f"{sec} {name}: {d:.1%}" for sec, name, d, _ in rows if d > MOST_A_BAND_MAY_MISS]
    assert not weak, ("these SKU bands let a shift over 10 % pass on a unit they were set from; fix the method "
                      "or set the band from the units (tools/population_fact.py):\n  " + "\n  ".join(weak))


def test_the_detection_command_lists_the_weakest_first(capsys):
    assert cli.main(["facts", "--arch", "sm_90", "--detection"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["section", "fact"] and len(out) > 250
    cells = [line.split("  ") for line in out[2:]]
    values = [float(next(c for c in cell if c.strip().endswith("%")).strip().rstrip("%")) for cell in cells]
    assert values == sorted(values, reverse=True) and values[0] > values[-1]


# -- no band grows without a method change -------------------------------------------------------


def test_no_packaged_band_grew_under_the_method_it_was_set_with():
    now, ledger = ledger_tool.packaged_bands(), ledger_tool.read_ledger()
    diff = ledger_tool.differences(now, ledger)
    assert not diff["grew"], ("these SKU bands are wider than when they were set, with the same method (a unit that "
                              "falls outside a band is a finding, not a reason to widen it):\n  "
                              + "\n  ".join(ledger_tool.describe(k, now, ledger) for k in diff["grew"]))
    assert not diff["new"] and not diff["method changed"] and not diff["gone"], (
        f"the ledger is behind the facts files ({ {k: v for k, v in diff.items() if v and k != 'narrowed'} }): run "
        "python3 tools/sku_band_ledger.py --write --why '<what changed, when>'")


def _bands(tol, method="chase", units=None):
    return {"sm_90:arch:x": {"tolerance": tol, "units_range": units, "method": ledger_tool.method_hash(method)}}


def test_a_wider_band_with_the_same_method_is_refused_and_with_a_new_method_taken():
    ledger = ledger_tool.write(_bands(1.0), {}, "first", None, [])
    assert ledger["sm_90:arch:x"]["why"] == "new fact: first"
    assert ledger_tool.differences(_bands(1.5), ledger)["grew"] == ["sm_90:arch:x"]
    with pytest.raises(SystemExit, match="grew under the method they were set with"):
        ledger_tool.write(_bands(1.5), ledger, "a unit read outside", None, [])
    # a method change, or a narrower band, is taken
    assert ledger_tool.differences(_bands(1.5, method="chase, 4 x L2"), ledger)["method changed"] == ["sm_90:arch:x"]
    assert ledger_tool.write(_bands(0.8), ledger, "", None, [])["sm_90:arch:x"]["tolerance"] == 0.8
    # a planned recording of units, named for the fact
    got = ledger_tool.write(_bands(1.5), ledger, "", "units GPU-a, GPU-b recorded 2026-12-01", ["sm_90:arch:x"])
    assert got["sm_90:arch:x"]["why"] == "units GPU-a, GPU-b recorded 2026-12-01"


def test_the_method_hash_ignores_line_breaks_and_spacing_only():
    assert ledger_tool.method_hash("a  b\nc") == ledger_tool.method_hash("a b c") != ledger_tool.method_hash("a b d")


def test_the_ledger_file_is_sorted_json_with_a_reason_per_entry():
    data = json.loads(ledger_tool.LEDGER.read_text())
    assert list(data) == sorted(data) and all(e.get("why") for e in data.values())
