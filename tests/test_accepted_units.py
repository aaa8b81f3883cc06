"""A unit outside its SKU's recorded population (an OFF_POPULATION FAIL) whose owner accepted the run
(--gpuprops-baseline-accept): later readings within the fact's same-unit band of the accepted one
PASS, flagged and listed everywhere; a new unit, a moved reading, NOISY and THROTTLED readings, and
--gpuprops-baseline none stay as they were. The figures are the H100 GPU-fd48deeb reading of
dsmem_latency_cluster2_cycles (198.71 cycles, 2026-11-26) against the sm_90 band
197.484 ± 1.09 from units 196.898 .. 198.07 (pytest_gpuprops/facts/sm_90.toml)."""

import dataclasses
import json

import pytest
from gp_testing import fake_gpu_conftest, one_fact_test

from pytest_gpuprops import accepted_units as AU
from pytest_gpuprops import assertions as A
from pytest_gpuprops import baselines, confirmation, report, results, unit_compare
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.measure import Measurement

UUID = "GPU-fd48deeb-0000-0000-0000-000000000000"
GPU = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": UUID, "host": "n1"}
FACT = Fact(name="dsmem_latency_cluster2_cycles", arch="sm_90", unit="cycles", method="chase",
            source="units GPU-7a297dd4 (196.9), GPU-b8adcc21 (198.07), GPU-3ce30699 (196.898)",
            value=197.4842187, tolerance_abs=1.09, units_range=(196.8984375, 198.07), same_unit_tolerance_rel=0.01)
RUN = {"date": "2026-11-26T10:00:00", "host": "n1", "run": results.run_status(1, 1, 1)}
NODE = "hwtests/test_async_units.py::test_dsmem_latency[2]"


def reading(value, *, throttle=(), settled=True, fact=FACT):
    """A confirmed verdict of ``value`` on the unit, as the fixture makes it."""
    values = [value] * 3 if settled else [value * 0.95, value, value * 1.05]  # 5 % apart: over a 1 % target
    m = Measurement.given("dsmem", values)
    m.sm_clock_mhz, m.throttle = 1980.0, list(throttle)
    v = A.evaluate(fact, m, max_sm_clock_mhz=1980, strict_population=True)  # --gpuprops-population strict
    v = confirmation.confirm(v, lambda: A.evaluate(fact, m, max_sm_clock_mhz=1980, strict_population=True))
    v.nodeid, v.gpu = NODE, dict(GPU)
    return v


def store_with(tmp_path, value, *, accept=True):
    """A store holding one run of the unit reading ``value``, accepted with --gpuprops-baseline-accept."""
    store = baselines.Store(tmp_path)
    store.save([reading(value)], RUN, accept=accept)
    return store


def test_the_reading_as_evaluated_is_a_fail_outside_the_population():
    v = reading(198.71)
    assert v.status == A.FAIL and AU.excusable(v)
    assert any(f.startswith(A.OFF_POPULATION) for f in v.flags)


def test_an_accepted_unit_within_its_same_unit_band_passes_with_the_flag_and_the_accepted_reading(tmp_path):
    judged = AU.AcceptedUnits(store_with(tmp_path, 198.71), baselines.LAST).judge(reading(198.72))
    assert judged.status == A.PASS and judged.ok
    assert any(f.startswith(A.OFF_POPULATION) for f in judged.flags)  # the finding stays said
    flag = next(f for f in judged.flags if f.startswith(AU.ACCEPTED_OFF_POPULATION))
    assert "accepted on 2026-11-26T10:00:00 at 198.710 cycles" in flag and "±1.99" in flag
    assert judged.accepted_reading["measured"] == 198.71 and judged.accepted_reading["forced"] is True
    assert AU.accepted([judged]) == [judged] and not results.red([judged])
    line = AU.describe(judged)
    for part in ("198.720 cycles", "197.484 ± 1.09 cycles", "units 196.898 .. 198.07",
                 "GPU-7a297dd4, GPU-b8adcc21, GPU-3ce30699", "accepted run of 2026-11-26T10:00:00: 198.710"):
        assert part in line, line


def test_a_unit_without_an_accepted_reading_stays_fail_and_says_how_to_accept(tmp_path):
    judged = AU.AcceptedUnits(baselines.Store(tmp_path), baselines.LAST).judge(reading(198.71))
    assert judged.status == A.FAIL
    assert any(f.startswith(AU.NOT_ACCEPTED) and "--gpuprops-baseline-accept" in f for f in judged.flags)
    with pytest.raises(A.FactMismatch):
        A.raise_for(judged)


def test_a_red_run_that_was_not_accepted_lends_no_accepted_reading(tmp_path):
    judged = AU.AcceptedUnits(store_with(tmp_path, 198.71, accept=False), baselines.LAST).judge(reading(198.71))
    assert judged.status == A.FAIL


def test_an_accepted_reading_inside_the_population_was_never_reviewed_and_excuses_nothing(tmp_path):
    store = baselines.Store(tmp_path)
    store.save([reading(198.0)], dict(RUN, run=results.run_status(0, 1, 1)))  # PASS, accepted on its own
    assert store.runs(UUID)[0].accepted
    assert AU.AcceptedUnits(store, baselines.LAST).judge(reading(198.71)).status == A.FAIL


def test_a_reading_moved_two_percent_beyond_a_one_percent_band_stays_fail(tmp_path):
    judged = AU.AcceptedUnits(store_with(tmp_path, 198.71), baselines.LAST).judge(reading(198.71 * 1.02))
    assert judged.status == A.FAIL
    assert any(f.startswith(f"{AU.NOT_ACCEPTED}: moved +3.974 cycles (+2.00%)") for f in judged.flags), judged.flags
    # and the unit's baseline compare calls it MOVED, as for any reading
    moved = unit_compare.compare(store_with(tmp_path / "b", 198.71).baseline(UUID).verdicts, [judged])
    assert [m.status for m in moved] == [results.MOVED]


def test_noisy_and_throttled_readings_are_not_touched(tmp_path):
    units = AU.AcceptedUnits(store_with(tmp_path, 198.71), baselines.LAST)
    noisy = reading(198.72, settled=False)
    assert noisy.status == A.NOISY and units.judge(noisy) is noisy
    rate = dataclasses.replace(FACT, name="dsmem_gbps", unit="GB/s", value=100.0, tolerance_abs=1.0,
                               units_range=(99.5, 100.5))
    m = Measurement.given("dsmem", [90.0] * 3)
    m.sm_clock_mhz, m.throttle = 1700.0, ["sw_power_cap"]
    throttled = A.evaluate(rate, m, max_sm_clock_mhz=1980)
    throttled.nodeid, throttled.gpu = NODE, dict(GPU)
    assert throttled.status == A.THROTTLED and units.judge(throttled) is throttled


def test_baseline_none_leaves_the_fail(tmp_path):
    v = reading(198.72)
    assert AU.AcceptedUnits(store_with(tmp_path, 198.71), baselines.NONE).judge(v) is v


def test_a_report_given_as_the_baseline_lends_what_its_run_accepted(tmp_path):
    old = reading(198.71)
    data = results.SessionResults([old]).to_json({"date": "2026-11-26T10:00:00", "baselines": {"stored": [
        {"uuid": UUID, "path": "x", "accepted": True, "why": "accepted with --gpuprops-baseline-accept"}]}})
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert AU.AcceptedUnits(None, str(tmp_path / "old.json")).judge(reading(198.72)).status == A.PASS
    data["meta"]["baselines"]["stored"][0]["accepted"] = False
    (tmp_path / "red.json").write_text(json.dumps(data))
    assert AU.AcceptedUnits(None, str(tmp_path / "red.json")).judge(reading(198.72)).status == A.FAIL


def test_the_summary_line_counts_them(tmp_path):
    judged = AU.AcceptedUnits(store_with(tmp_path, 198.71), baselines.LAST).judge(reading(198.72))
    assert report.summary_line([judged]) == (
        "gpuprops: 1 PASS; 1 PASS outside the SKU's population, accepted for their unit "
        "(dsmem_latency_cluster2_cycles: listed with their accepted runs)")


# -- the workflow through the plugin --------------------------------------------------------------

FACTS = ('arch = "sm_90"\n\n[dsmem_latency_cluster2_cycles]\nvalue = 197.4842187\ntolerance_abs = 1.09\n'
         'units_range = [196.8984375, 198.07]\nsame_unit_tolerance_rel = 0.01\nunit = "cycles"\nmethod = "chase"\n'
         'source = "units GPU-7a297dd4 (196.9), GPU-b8adcc21 (198.07), GPU-3ce30699 (196.898)"\n')


@pytest.fixture
def unit(pytester, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # the test file is rewritten between runs
    pytester.makeconftest(fake_gpu_conftest(count=1))
    (pytester.path / "sm_90.toml").write_text(FACTS)

    def run(value, *args, xdist=False, population="strict"):
        """One run reading ``value``; the accepting workflow is that of --gpuprops-population strict (and
        of readings past the population's reach)."""
        pytester.makepyfile(one_fact_test("dsmem_latency_cluster2_cycles", value, "test_dsmem"))
        args = ("--gpuprops-facts", "sm_90.toml", "--gpuprops-baselines", str(tmp_path / "store"),
                "--gpuprops-population", population, *args)
        if xdist:
            return pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly", *args)
        return pytester.runpytest_inprocess(*args)
    return run


def test_first_run_red_then_accepted_then_later_runs_report_it_not_red(unit, pytester):
    first = unit(198.71)  # a new unit: a finding to review
    assert first.ret == 1
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(["*not accepted for this unit: no accepted run*--gpuprops-baseline-accept*"])
    assert unit(198.71, "--gpuprops-baseline-accept").ret == 1  # reviewed and accepted: this run is still red
    later = unit(198.72, "--gpuprops-report", "r.json")
    assert later.ret == 0
    later.assert_outcomes(passed=1)
    later.stdout.fnmatch_lines([
        "gpuprops: 1 PASS; 1 PASS outside the SKU's population, accepted for their unit "
        "(dsmem_latency_cluster2_cycles: listed with their accepted runs)",
        "*outside the SKU's population, accepted for their unit (not red)*",
        "  dsmem_latency_cluster2_cycles on node1:gpu0 Fake GPU (GPU-00000000): 198.720 cycles; SKU population "
        "197.484 ± 1.09 cycles from units 196.898 .. 198.07 (GPU-7a297dd4, GPU-b8adcc21, GPU-3ce30699); "
        "accepted run of *: 198.710 cycles (*)",
        "*this run stored as *; accepted: finished with nothing red on this unit"])
    data = json.loads((pytester.path / "r.json").read_text())
    (v,) = data["facts"]
    assert v["status"] == "PASS" and v["accepted_reading"]["measured"] == 198.71
    assert any(f.startswith(AU.ACCEPTED_OFF_POPULATION) for f in v["flags"])
    results.load(pytester.path / "r.json")  # the schema reads it back
    md = (pytester.path / "r.md").read_text()
    assert "## Outside the SKU's population, accepted for their unit (not red)" in md
    assert "- dsmem_latency_cluster2_cycles on node1:gpu0 Fake GPU (GPU-00000000): 198.720 cycles" in md
    again = unit(198.70)  # the accepted run of the last run, not forced, keeps lending the reading
    assert again.ret == 0
    moved = unit(198.71 * 1.02)  # 2 % beyond the 1 % same-unit band: a FAIL, and MOVED
    assert moved.ret == 1
    moved.assert_outcomes(failed=1)
    moved.stdout.fnmatch_lines(["*not accepted for this unit: moved +3.9*", "*MOVED*"])
    none = unit(198.72, "--gpuprops-baseline", "none")
    assert none.ret == 1
    none.assert_outcomes(failed=1)


def test_xdist_workers_read_the_accepted_reading_from_the_store(unit, monkeypatch):
    pytest.importorskip("xdist")
    from gp_testing import child_processes_outside_mutmut
    child_processes_outside_mutmut(monkeypatch)
    assert unit(198.71, "--gpuprops-baseline-accept").ret == 1
    r = unit(198.72, xdist=True)
    assert r.ret == 0
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*1 PASS outside the SKU's population, accepted for their unit*"])


def test_on_a_node_the_accepted_unit_and_its_peer_differ_inside_the_band_and_neither_is_an_outlier(tmp_path):
    judged = AU.AcceptedUnits(store_with(tmp_path, 198.71), baselines.LAST).judge(reading(198.72))
    peer = reading(197.0)
    peer.gpu = dict(GPU, index=1, uuid="GPU-9db59b7a-0000-0000-0000-000000000000")
    assert peer.status == A.PASS
    out, _ = results.outliers([judged, peer])
    assert [o.status for o in out] == [results.UNITS_DIFFER] * 2 and not results.red(out)
    unaccepted, _ = results.outliers([reading(198.72), peer])  # the same node before the unit was accepted
    assert results.OUTLIER in [o.status for o in unaccepted]


def test_a_new_unit_within_the_populations_reach_is_a_listed_finding_and_past_it_red(unit, pytester):
    """By default (--gpuprops-population reach) a first run reading 198.71 (0.3 % past the units
    196.898 .. 198.07, outside the band 197.484 ± 1.09) passes, flagged and listed as a finding with
    its value and the units; 218.0 (10.1 % above the lowest unit) is past the reach: FAIL; strict fails both."""
    first = unit(198.71, "--gpuprops-report", "f.json", population="reach")
    assert first.ret == 0
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines([
        "gpuprops: 1 PASS; 1 PASS outside the SKU's population, within its reach (dsmem_latency_cluster2_cycles: "
        "findings about their units, listed)",
        "*outside the SKU's population, within its reach (findings about their units, not red)*",
        "  dsmem_latency_cluster2_cycles on node1:gpu0 Fake GPU (GPU-00000000): 198.710 cycles, +0.3% past the units "
        "196.898 .. 198.07 (GPU-7a297dd4, GPU-b8adcc21, GPU-3ce30699); band 197.484 ± 1.09 cycles"])
    (v,) = json.loads((pytester.path / "f.json").read_text())["facts"]
    assert v["status"] == "PASS" and any(A.WITHIN_REACH in f and f.startswith(A.OFF_POPULATION) for f in v["flags"])
    assert "## Outside the SKU's population, within its reach" in (pytester.path / "f.md").read_text()
    past = unit(218.0, population="reach")
    assert past.ret == 1
    past.assert_outcomes(failed=1)
    past.stdout.fnmatch_lines(["*outside the SKU's recorded population: 218 against units*"])
    assert unit(198.71, "--gpuprops-baseline", "none").ret == 1  # strict


def test_the_reach_is_ten_percent_past_the_lowest_and_highest_unit_and_only_for_facts_that_differ_by_unit():
    assert A.within_reach(FACT, 196.898 * 1.10) and not A.within_reach(FACT, 196.898 * 1.1001)
    assert A.within_reach(FACT, 198.07 * 0.90) and not A.within_reach(FACT, 198.07 * 0.8999)
    arch_fact = dataclasses.replace(FACT, units_range=None)
    assert not A.within_reach(arch_fact, 198.0)
    v = A.evaluate(arch_fact, Measurement.given("dsmem", [199.0] * 3), max_sm_clock_mhz=1980)
    assert v.status == A.FAIL  # an arch fact outside its band: every unit must read it
    w = A.evaluate(FACT, Measurement.given("dsmem", [199.0] * 3), max_sm_clock_mhz=1980)
    assert w.status == A.PASS and any(A.WITHIN_REACH in f for f in w.flags)
    assert A.evaluate(FACT, Measurement.given("dsmem", [199.0] * 3), max_sm_clock_mhz=1980,
                      strict_population=True).status == A.FAIL


# ----------------------------------------------------------------------------------------------
# UnitBaselines: a check's question "did this reading move off my unit's baseline?"


def test_a_check_asks_its_units_stored_baseline_whether_a_reading_moved(tmp_path):
    ub = AU.UnitBaselines(store_with(tmp_path, 197.5), baselines.LAST)
    assert not ub.moved(reading(197.6)) and ub.moved(reading(195.0))  # 1 % band: ±1.975
    other = reading(195.0)
    other.gpu = {**GPU, "uuid": "GPU-00000000-another-unit"}  # a unit with no baseline: nothing moved
    assert not ub.moved(other)
    assert not AU.UnitBaselines(store_with(tmp_path / "none", 197.5), baselines.NONE).moved(reading(195.0))


def test_a_check_against_a_file_asks_the_file_not_the_store(tmp_path):
    """--gpuprops-compare FILE: the file's readings of the unit, whatever the store holds."""
    (_, path, _, _), = store_with(tmp_path / "file", 197.5).save([reading(197.5)], RUN)  # a stored run, as a file
    store = store_with(tmp_path / "store", 195.0)  # the store would call 195.0 on the baseline
    ub = AU.UnitBaselines(store, str(path))
    assert ub.moved(reading(195.0)) and not ub.moved(reading(197.6))


def test_a_compare_file_is_read_once_for_every_unit_in_it(tmp_path, monkeypatch):
    (_, path, _, _), = store_with(tmp_path / "file", 197.5).save([reading(197.5)], RUN)
    reads = []
    real = baselines.from_report
    monkeypatch.setattr(baselines, "from_report", lambda p: reads.append(p) or real(p))
    ub = AU.UnitBaselines(baselines.Store(tmp_path / "store"), str(path))
    other = reading(195.0)
    other.gpu = {**GPU, "uuid": "GPU-00000000-another-unit"}
    assert ub.moved(reading(195.0)) and not ub.moved(other) and reads == [str(path)]


def test_a_file_that_cannot_be_read_moves_nothing_at_check_time(tmp_path):
    """The run's end names what is wrong with the file (a usage error); a check just finds no baseline."""
    ub = AU.UnitBaselines(baselines.Store(tmp_path), str(tmp_path / "gone.json"))
    assert ub.of(UUID) == {} and not ub.moved(reading(195.0))
