"""tools/same_unit_bands.py and tools/baseline_detection.py on reports written here: the band rule
(margin over the widest same-unit range, the floors), writing bands into a facts file that still
loads, and the planted-shift counts the issue's bar is read from."""

import json
import sys
from pathlib import Path

import pytest

from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops import results
from pytest_gpuprops.assertions import Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import baseline_detection  # noqa: E402
import same_unit_bands  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def _verdict(fact, value, uuid, scope="arch", status="PASS", node=None):
    gpu = {"index": 0, "name": H100, "uuid": uuid, "host": "n"}
    return Verdict(fact, "sm_90", status, "x", value, f"{value}", "cycles", "m", "s", gpu=gpu, tolerance=1.0,
                   scope=scope, nodeid=node or f"hwtests/t.py::test_{fact}")


def _reports(tmp_path, runs):
    """One report per process: runs = [[(fact, value, uuid, scope?), ...], ...]."""
    paths = []
    for i, rows in enumerate(runs):
        p = tmp_path / f"run{i}.json"
        p.write_text(json.dumps(results.SessionResults([_verdict(*r) for r in rows]).to_json({})))
        paths.append(str(p))
    return paths


def test_the_band_is_the_margin_over_the_widest_unit_range_and_never_under_the_floor(tmp_path):
    paths = _reports(tmp_path, [
        [("lds", 100.0, "GPU-a"), ("lds", 100.0, "GPU-b"), ("dram", 680.0, "GPU-a", "gpu"), ("steady", 4.0, "GPU-a")],
        [("lds", 100.4, "GPU-a"), ("lds", 100.1, "GPU-b"), ("dram", 686.8, "GPU-a", "gpu"), ("steady", 4.0, "GPU-a")],
        [("lds", 100.2, "GPU-a"), ("lds", 100.0, "GPU-b"), ("dram", 683.0, "GPU-a", "gpu"), ("steady", 4.0, "GPU-a")],
    ])
    found, sku = same_unit_bands.bands(paths)
    lds = found[(None, "lds")]
    assert lds["unit"] == "GPU-a" and lds["spread"] == pytest.approx(0.4 / 100.2)
    assert lds["rel"] == pytest.approx(0.010)  # 2.5 x 0.399 % = 0.998 %, rounded up to 0.1 %
    assert found[(H100, "dram")]["rel"] == pytest.approx(0.025)  # a GPU-section fact is its SKU's
    assert found[(None, "steady")]["rel"] == same_unit_bands.FLOOR_REL  # never read apart: the floor
    assert sku == {"GPU-a": H100, "GPU-b": H100}
    assert "3 facts; band >= 2 %: 1" in same_unit_bands.table(found, sku)


def test_a_clock_on_a_15_mhz_grid_gets_at_least_one_and_a_half_steps():
    band = same_unit_bands.band({"GPU-a": [1980.0, 1995.0, 1995.0], "GPU-b": [1980.0, 1980.0]})
    assert band["quantum"] == 15.0
    assert band["rel"] >= 1.5 * 15.0 / 1987.5


def test_noisy_or_throttled_readings_and_single_readings_set_no_band(tmp_path):
    paths = _reports(tmp_path, [[("a", 10.0, "GPU-a"), ("b", 10.0, "GPU-a")],
                                [("a", 20.0, "GPU-a", "arch", "NOISY"), ("c", 1.0, "GPU-a")]])
    found, _ = same_unit_bands.bands(paths)
    assert (None, "a") not in found  # the NOISY 20.0 is not counted: one reading left
    assert (None, "c") not in found  # one reading: nothing to say


def test_writing_bands_sets_each_table_and_the_note_and_the_file_still_loads(tmp_path):
    facts = tmp_path / "sm_90.toml"
    facts.write_text('arch = "sm_90"\n\n[lds]\nvalue = 100.0\ntolerance_abs = 1.0\nsame_unit_tolerance_rel = 0.2\n'
                     'unit = "cycles"\nmethod = "m"\nsource = "s"\n\n'
                     f'[gpus."{H100}".dram]\nvalue = 680.0\ntolerance_rel = 0.03\nunit = "cycles"\nmethod = "m"\n'
                     'source = "s"\n')
    found = {(None, "lds"): {"rel": 0.01}, (H100, "dram"): {"rel": 0.025}, ("NVIDIA H200", "lds"): {"rel": 0.02}}
    assert same_unit_bands.write(facts, found, "3 processes on GPU-a, 2026-11-26") == 2
    loaded = gp_facts.load_file(facts)
    assert loaded["lds"].same_unit_tolerance_rel == 0.02  # an arch fact: the widest of every SKU
    assert loaded.gpu_sections[H100]["dram"].same_unit_tolerance_rel == 0.025
    assert loaded.meta["same_unit_source"] == "3 processes on GPU-a, 2026-11-26"
    same_unit_bands.write(facts, found, "again")  # a second write replaces, never repeats
    assert facts.read_text().count("same_unit_tolerance_rel") == 2 and gp_facts.load_file(facts).meta[
        "same_unit_source"] == "again"


def test_only_missing_sets_bands_where_there_are_none_and_adds_to_the_note(tmp_path):
    """--only-missing: a band set from more units stays as it was, a fact without one gets this data's,
    and the file's note keeps what it said and adds this source."""
    facts = tmp_path / "sm_90.toml"
    facts.write_text('arch = "sm_90"\nsame_unit_source = "earlier: five units"\n\n[lds]\nvalue = 100.0\n'
                     'tolerance_abs = 1.0\nsame_unit_tolerance_rel = 0.013\nunit = "cycles"\nmethod = "m"\n'
                     'source = "s"\n\n'
                     f'[gpus."{H100}".dram]\nvalue = 680.0\ntolerance_rel = 0.03\nunit = "cycles"\nmethod = "m"\n'
                     'source = "s"\n')
    found = {(None, "lds"): {"rel": 0.05}, (H100, "dram"): {"rel": 0.025}}
    assert same_unit_bands.write(facts, found, "later: one node", only_missing=True) == 1
    loaded = gp_facts.load_file(facts)
    assert loaded["lds"].same_unit_tolerance_rel == 0.013
    assert loaded.gpu_sections[H100]["dram"].same_unit_tolerance_rel == 0.025
    assert loaded.meta["same_unit_source"] == "earlier: five units later: one node"
    assert same_unit_bands.write(facts, found, "x", only_missing=True) == 0  # nothing is missing any more
    assert facts.read_text().count("same_unit_tolerance_rel") == 2


def test_widen_only_ever_widens_and_exclude_leaves_a_fact_as_it_was(tmp_path):
    """--widen: a band narrower than this data's grows to it, a wider one stays (it was set from units these
    reports lack), a fact without one gets this data's; --exclude leaves a fact alone whatever the data say."""
    facts = tmp_path / "sm_90.toml"
    facts.write_text('arch = "sm_90"\nsame_unit_source = "earlier: five units"\n\n'
                     '[lds]\nvalue = 100.0\ntolerance_abs = 1.0\nsame_unit_tolerance_rel = 0.013\nunit = "cycles"\n'
                     'method = "m"\nsource = "s"\n\n'
                     '[sts]\nvalue = 100.0\ntolerance_abs = 1.0\nsame_unit_tolerance_rel = 0.04\nunit = "cycles"\n'
                     'method = "m"\nsource = "s"\n\n'
                     '[atom]\nvalue = 100.0\ntolerance_abs = 1.0\nsame_unit_tolerance_rel = 0.01\nunit = "cycles"\n'
                     'method = "m"\nsource = "s"\n\n'
                     f'[gpus."{H100}".dram]\nvalue = 680.0\ntolerance_rel = 0.03\nunit = "cycles"\nmethod = "m"\n'
                     'source = "s"\n\n'
                     f'[gpus."{H100}".store]\nvalue = 550.0\ntolerance_rel = 0.03\nsame_unit_tolerance_rel = 0.032\n'
                     'unit = "cycles"\nmethod = "m"\nsource = "s"\n')
    found = {(None, "lds"): {"rel": 0.029}, (None, "sts"): {"rel": 0.02}, (H100, "dram"): {"rel": 0.025},
             (H100, "store"): {"rel": 0.11}}
    assert same_unit_bands.write(facts, found, "later: nine units", widen=True, exclude="^store$") == 2
    loaded = gp_facts.load_file(facts)
    assert loaded["lds"].same_unit_tolerance_rel == 0.029  # widened
    assert loaded["sts"].same_unit_tolerance_rel == 0.04  # stays: wider than this data's
    assert loaded["atom"].same_unit_tolerance_rel == 0.01  # no data: stays
    assert loaded.gpu_sections[H100]["dram"].same_unit_tolerance_rel == 0.025  # had none
    assert loaded.gpu_sections[H100]["store"].same_unit_tolerance_rel == 0.032  # excluded: a method to fix
    assert loaded.meta["same_unit_source"] == "earlier: five units later: nine units"
    assert facts.read_text().count("same_unit_tolerance_rel") == 5
    with pytest.raises(ValueError, match="two modes"):
        same_unit_bands.write(facts, found, "x", widen=True, only_missing=True)


def test_planted_shifts_are_counted_only_when_caught_both_ways(tmp_path):
    base = [_verdict("tight", 100.0, "GPU-a"), _verdict("loose", 100.0, "GPU-a")]
    base[0].same_unit_tolerance_rel, base[1].same_unit_tolerance_rel = 0.01, 0.03
    rerun = [_verdict("tight", 100.3, "GPU-a"), _verdict("loose", 100.3, "GPU-a")]
    for v, b in zip(rerun, base):
        v.same_unit_tolerance_rel = b.same_unit_tolerance_rel
    compared, moved = baseline_detection.caught(base, rerun, 0.0)
    assert len(compared) == 2 and moved == set()
    _, moved = baseline_detection.caught(base, rerun, 0.02)
    assert [k[1] for k in moved] == ["tight"]  # 2 % against a 3 % band is not caught
    _, moved = baseline_detection.caught(base, rerun, 0.05)
    assert sorted(k[1] for k in moved) == ["loose", "tight"]


def test_a_planted_baseline_file_is_written_new_and_only_new(tmp_path, capsys):
    (p,) = _reports(tmp_path, [[("lds", 100.0, "GPU-a")]])
    out = tmp_path / "planted.json"
    assert baseline_detection.main([p, "--plant", "0.05", "-o", str(out)]) == 0
    assert [v.measured for v in results.load(out)[0].verdicts] == [pytest.approx(105.0)]
    assert baseline_detection.main([p, "--plant", "0.05", "-o", str(out)]) == 2  # never over a file


def test_a_fact_read_in_two_clock_states_gets_its_band_from_within_each_state():
    per_unit = {"GPU-a": [(7252.5, 1979.8), (7105.1, 1994.9), (7100.1, 1994.9)],
                "GPU-b": [(7216.4, 1979.9), (7246.8, 1978.7), (7290.3, 1979.7)]}
    states = same_unit_bands.by_state(per_unit)
    assert sorted(states) == ["GPU-a@1980MHz", "GPU-a@1995MHz", "GPU-b@1979MHz"]
    b = same_unit_bands.band(states)
    assert b["unit"] == "GPU-b@1979MHz" and b["spread"] == pytest.approx((7290.3 - 7216.4) / 7246.8)
    # a DRAM stream's clock wanders: no two readings share a state, so the band is per unit, whatever the clock
    wandering = {"GPU-a": [(3070.4, 1950.0), (3076.5, 1935.0), (3067.1, 1920.4)]}
    assert same_unit_bands.by_state(wandering) == {"GPU-a": [3070.4, 3076.5, 3067.1]}


def test_a_write_of_one_fact_narrows_its_band_and_adds_to_the_note(tmp_path):
    """--exclude leaving every fact but one: that fact's band follows the data (here narrower, from more units
    under the same rule) and the note keeps what it said of the others."""
    facts = tmp_path / "sm_90.toml"
    facts.write_text('arch = "sm_90"\nsame_unit_source = "earlier: five units"\n\n[lds]\nvalue = 100.0\n'
                     'tolerance_abs = 1.0\nsame_unit_tolerance_rel = 0.013\nunit = "cycles"\nmethod = "m"\n'
                     'source = "s"\n\n'
                     f'[gpus."{H100}".far]\nvalue = 455.0\ntolerance_rel = 0.03\nsame_unit_tolerance_rel = 0.048\n'
                     'unit = "cycles"\nmethod = "m"\nsource = "s"\n')
    found = {(None, "lds"): {"rel": 0.05}, (H100, "far"): {"rel": 0.025}}
    assert same_unit_bands.write(facts, found, "far: eight units", exclude="^(?!far$)") == 1
    loaded = gp_facts.load_file(facts)
    assert loaded["lds"].same_unit_tolerance_rel == 0.013
    assert loaded.gpu_sections[H100]["far"].same_unit_tolerance_rel == 0.025
    assert loaded.meta["same_unit_source"] == "earlier: five units far: eight units"


UNIT_A = "GPU-c5d47081-0b8e-3b9f-2c37-4e2a0e1f5a61"
UNIT_B = "GPU-27864b42-677c-a988-53d2-9c6308002028"


def test_a_planted_store_moves_every_stored_reading_of_every_run_and_unit(tmp_path, capsys):
    """The unit's whole baseline moved: a power is compared only with a reading of its own clock and
    thermal state, and one report holds one state; a store holds the newest reading of each."""
    from pytest_gpuprops import baselines
    finished = {"date": "2026-11-26T09:30:00", "host": "n1", "run": results.run_status(0, 2, 2)}
    store = baselines.Store(tmp_path / "store")
    store.save([_verdict("lds", 100.0, UNIT_A), _verdict("lds", 200.0, UNIT_B)], finished)
    store.save([_verdict("lds", 101.0, UNIT_A)], dict(finished, date="2026-11-26T10:00:00"))
    (tmp_path / "store" / UNIT_A / "notes.json").write_text("[]")  # not a unit run: left out
    out = tmp_path / "planted"
    assert baseline_detection.main(["--store", str(tmp_path / "store"), "--plant", "0.05", "-o", str(out)]) == 0
    assert "3 unit run(s)" in capsys.readouterr().out
    planted = baselines.Store(out)
    assert sorted(planted.units()) == sorted([UNIT_A, UNIT_B])
    assert sorted(v.measured for r in planted.runs(UNIT_A) for v in r.verdicts) == [pytest.approx(105.0),
                                                                                    pytest.approx(106.05)]
    assert [v.measured for v in planted.baseline(UNIT_B).verdicts] == [pytest.approx(210.0)]
    # the store it came from is as it was, and a second plant never writes over the first
    assert sorted(v.measured for r in store.runs(UNIT_A) for v in r.verdicts) == [100.0, 101.0]
    assert baseline_detection.main(["--store", str(tmp_path / "store"), "--plant", "0.05", "-o", str(out)]) == 2
    assert baseline_detection.main(["--store", str(tmp_path / "empty"), "--plant", "0.05", "-o",
                                    str(tmp_path / "p2")]) == 2
    assert baseline_detection.main(["--store", str(tmp_path / "store"), "-o", str(tmp_path / "p3")]) == 2


def _filed(tmp_path, rows):
    """Reports of one reading each, ``rows`` = [(fact, value, uuid, session clock MHz, method)]."""
    paths = []
    for i, (fact, value, uuid, mhz, method) in enumerate(rows):
        v = _verdict(fact, value, uuid)
        v.method, v.measurement = method, {"sm_clock_mhz": mhz}
        p = tmp_path / f"filed{i}.json"
        p.write_text(json.dumps(results.SessionResults([v]).to_json({})))
        paths.append(str(p))
    return paths


def test_a_latency_pooled_over_clock_states_takes_its_units_whole_range(tmp_path):
    """Filed under two session-clock states with two readings each, the range is split by state unless the
    fact is pooled (--one-state): the session clock moves while the latency in cycles does not follow it."""
    paths = _filed(tmp_path, [("lat", 100.0, "GPU-a", 1925.0, "m"), ("lat", 100.1, "GPU-a", 1926.0, "m"),
                              ("lat", 101.0, "GPU-a", 1990.0, "m"), ("lat", 101.1, "GPU-a", 1991.0, "m")])
    split, _ = same_unit_bands.bands(paths)
    pooled, _ = same_unit_bands.bands(paths, one_state="lat")
    assert split[(None, "lat")]["rel"] == same_unit_bands.FLOOR_REL  # each state within 0.1 %
    assert pooled[(None, "lat")]["spread"] == pytest.approx(1.1 / 100.55)
    assert pooled[(None, "lat")]["rel"] == pytest.approx(0.028)  # 2.5 x 1.09 %, rounded up


def test_only_readings_of_the_files_current_method_count_where_asked(tmp_path):
    facts = tmp_path / "sm_90.toml"
    facts.write_text('arch = "sm_90"\n\n[lat]\nvalue = 100.0\ntolerance_abs = 1.0\nunit = "cycles"\n'
                     'method = "reserved"\nsource = "s"\n')
    paths = _filed(tmp_path, [("lat", 100.0, "GPU-a", None, "fresh"), ("lat", 104.0, "GPU-a", None, "fresh"),
                              ("lat", 100.0, "GPU-a", None, "reserved"), ("lat", 100.2, "GPU-a", None, "reserved")])
    every, _ = same_unit_bands.bands(paths)
    current, _ = same_unit_bands.bands(paths, methods=same_unit_bands.current_methods(facts))
    assert every[(None, "lat")]["spread"] > 0.03 and current[(None, "lat")]["spread"] == pytest.approx(0.2 / 100.1)
    assert same_unit_bands.main([*paths, "--current-method"]) == 2  # which methods: --facts is needed
    assert same_unit_bands.main([*paths, "--one-state", "("]) == 2  # a bad expression, said in one line


def test_a_latency_read_beside_its_clock_is_split_by_that_clock_s_state_not_the_session_s(tmp_path):
    # GPU-88396b0d, 2026-11-27: the DRAM chase 688.54 and 688.65 at 1980 MHz, 694.29 at 1995 (session clock ~1940)
    paths = []
    for i, (value, clock) in enumerate([(688.54, 1979.9), (694.29, 1994.7), (688.65, 1979.4)]):
        v = _verdict("dram", value, "GPU-a", "gpu")
        v.measurement = {"median": value, "sm_clock_mhz": 1938.8 + i,
                         "launch": {"clock_beside_mhz": clock, "clock_beside_range_mhz": [clock, clock]}}
        other = _verdict("dram", value * 1.001, "GPU-b", "gpu")
        other.measurement = {"median": value, "sm_clock_mhz": 1940.0,
                             "launch": {"clock_beside_mhz": clock, "clock_beside_range_mhz": [clock, clock]}}
        p = tmp_path / f"run{i}.json"
        p.write_text(json.dumps(results.SessionResults([v, other]).to_json({})))
        paths.append(str(p))
    found, _ = same_unit_bands.bands(paths)
    dram = found[(H100, "dram")]
    assert dram["unit"].endswith("@1979MHz") and dram["spread"] == pytest.approx(0.11 / 688.595, rel=1e-3)
    assert dram["rel"] == same_unit_bands.FLOOR_REL  # 0.02 % in one state, not the 0.83 % across the two
