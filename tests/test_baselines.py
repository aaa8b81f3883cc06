"""The unit baseline store (baselines.py) with given verdicts, and the default workflow through the
plugin: a second run on a unit compares with its first, a planted change is MOVED, a red run is
kept but not accepted, --gpuprops-baseline-accept and 'none' do what they say."""

import dataclasses
import json

import pytest
from gp_testing import fake_gpu_conftest, one_fact_test

from pytest_gpuprops import baselines, results, unit_compare
from pytest_gpuprops.assertions import Verdict

UUID = "GPU-c5d47081-161b-c161-0c26-c68d1b7f8938"
GPU = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": UUID, "host": "n1", "driver_version": "580.159.04",
       "cuda_driver_version": "13.0", "cuda_runtime_version": "13.0", "vbios_version": "96.00.DA.00.0C",
       "max_sm_clock_mhz": 1980}
FINISHED = {"date": "2026-11-26T09:30:00", "host": "n1", "compiler": "nvrtc 13.5",
            "run": results.run_status(0, 2, 2)}


def verdict(measured, fact="lds_latency_cycles", status="PASS", gpu=GPU, rel=0.005):
    return Verdict(fact, "sm_90", status, "23 ± 0.25 cycles", measured, f"{measured} cycles", "cycles", "m", "s",
                   nodeid=f"hwtests/t.py::test_{fact}", gpu=gpu, tolerance=0.25, same_unit_tolerance_rel=rel,
                   measurement={"values": [measured] * 50, "median": measured, "per_warp": [1.0] * 64})


def test_a_run_is_kept_per_unit_without_its_per_launch_values_and_read_back(tmp_path):
    store = baselines.Store(tmp_path)
    other = dict(GPU, uuid="GPU-27864b42-677c-a988-53d2-9c6308002028", index=1)
    saved = store.save([verdict(23.0), verdict(23.1, gpu=other), verdict(5.0, gpu=None)], FINISHED)
    assert [(u[:12], ok) for u, _p, ok, _w in saved] == [("GPU-27864b42", True), ("GPU-c5d47081", True)]
    assert store.units() == sorted([UUID, other["uuid"]])
    (run,) = store.runs(UUID)
    assert run.accepted and run.why == "accepted: finished with nothing red on this unit"
    assert run.meta["driver_version"] == "580.159.04" and run.meta["date"] == FINISHED["date"]
    assert [v.measured for v in run.verdicts] == [23.0]
    assert run.verdicts[0].measurement == {"median": 23.0}  # the values stay in the report, not the store
    doc = json.loads(run.path.read_text())
    assert doc["schema"] == baselines.SCHEMA and not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize("fleet, run, accept, accepted, why", [
    ([], results.run_status(0, 2, 2), False, True, "accepted: finished"),
    ([verdict(24.0, status="MOVED")], results.run_status(1, 2, 2), False, False,
     "not accepted: 1 red verdict(s) on this unit (lds_latency_cycles MOVED)"),
    ([], results.run_status(2, 2, 1), False, False, "not accepted: the run is incomplete (interrupted"),
    ([verdict(24.0, status="MOVED")], results.run_status(1, 2, 2), True, True,
     "accepted with --gpuprops-baseline-accept (1 red verdict(s))"),
])
def test_a_run_becomes_the_baseline_only_when_finished_with_nothing_red_or_when_accepted(tmp_path, fleet, run, accept,
                                                                                        accepted, why):
    store = baselines.Store(tmp_path)
    ((_u, _p, ok, text),) = store.save([verdict(23.0)] + fleet, dict(FINISHED, run=run), accept=accept)
    assert ok is accepted and text.startswith(why)


def test_the_baseline_is_the_newest_accepted_reading_of_each_fact(tmp_path, monkeypatch):
    store = baselines.Store(tmp_path)
    stamps = iter(["20261126T090000", "20261126T100000", "20261126T110000"])

    class Clock:
        @staticmethod
        def now():
            class T:
                def strftime(self, _):
                    return next(stamps)
            return T()
    monkeypatch.setattr(baselines._dt, "datetime", Clock)
    store.save([verdict(23.0), verdict(5.0, fact="ffma")], FINISHED)  # the whole suite
    store.save([verdict(23.1)], dict(FINISHED, date="2026-11-26T10:00:00"))  # -k lds, accepted
    red = dict(FINISHED, date="2026-11-26T11:00:00", run=results.run_status(1, 1, 1))
    store.save([verdict(30.0), verdict(30.0, status="FAIL")], red)  # red: kept, never its red fact's baseline
    base = store.baseline(UUID)
    assert sorted((v.fact, v.measured) for v in base.verdicts) == [("ffma", 5.0), ("lds_latency_cycles", 23.1)]
    assert [r.date for r in base.runs] == ["2026-11-26T10:00:00", "2026-11-26T09:30:00"]
    assert base.describe().startswith("run of 2026-11-26T10:00:00 on n1 (") and "1 older run(s)" in base.describe()
    assert len(store.runs(UUID)) == 3


def test_a_finished_run_with_one_red_fact_lends_its_other_readings_but_not_the_red_one(tmp_path):
    store = baselines.Store(tmp_path)
    store.save([verdict(23.0), verdict(5.0, fact="ffma")], FINISHED)
    later = dict(FINISHED, date="2026-11-26T10:00:00", run=results.run_status(1, 2, 2))
    moved = dataclasses.replace(verdict(24.0), status="MOVED", kind="baseline")
    ((_u, _p, ok, why),) = store.save([verdict(24.0), verdict(5.01, fact="ffma"), moved], later)
    assert not ok and "which keep their earlier baselines" in why
    base = {v.fact: v.measured for v in store.baseline(UUID).verdicts}
    assert base == {"lds_latency_cycles": 23.0, "ffma": 5.01}  # the moved fact keeps 23.0
    noisy = dict(FINISHED, date="2026-11-26T11:00:00", run=results.run_status(1, 2, 2))
    store.save([verdict(23.1), verdict(9.0, fact="ffma", status="NOISY")], noisy)
    assert {v.fact: v.measured for v in store.baseline(UUID).verdicts} == {"lds_latency_cycles": 23.1, "ffma": 5.01}
    cut = dict(FINISHED, date="2026-11-26T12:00:00", run=results.run_status(2, 2, 1))  # interrupted: lends nothing
    store.save([verdict(23.9)], cut)
    assert {v.fact: v.measured for v in store.baseline(UUID).verdicts}["lds_latency_cycles"] == 23.1


def test_what_changed_between_two_runs_of_a_unit_is_named():
    old = baselines.unit_meta(FINISHED, GPU)
    new = baselines.unit_meta(dict(FINISHED, compiler="nvrtc 13.6"), dict(GPU, driver_version="590.10",
                                                                         vbios_version="96.00.DA.00.0D"))
    assert baselines.changes(old, new) == ["driver 580.159.04 -> 590.10", "VBIOS 96.00.DA.00.0C -> 96.00.DA.00.0D",
                                           "compiler nvrtc 13.5 -> nvrtc 13.6"]
    assert baselines.changes(old, old) == []
    base = baselines.Baseline(UUID, [verdict(23.0)], [baselines.UnitRun(None, old, True, "", [verdict(23.0)])])
    assert base.describe(new) == ("run of 2026-11-26T09:30:00 on n1, 1 facts; since then: driver 580.159.04 -> "
                                  "590.10, VBIOS 96.00.DA.00.0C -> 96.00.DA.00.0D, compiler nvrtc 13.5 -> nvrtc 13.6")
    assert baselines.Baseline(UUID, [], []).describe().startswith("no baseline yet")


def test_a_file_that_is_not_a_unit_run_is_never_a_baseline(tmp_path):
    store = baselines.Store(tmp_path)
    folder = tmp_path / UUID
    folder.mkdir()
    (folder / "20261126T000000-x-1.json").write_text("{not json")
    (folder / "20261126T000001-x-1.json").write_text('{"schema": "other", "facts": []}')
    assert store.runs(UUID) == [] and len(store.read(UUID)[1]) == 2
    with pytest.raises(baselines.BaselineError, match="is not a gpuprops unit run"):
        baselines.read_run(folder / "20261126T000001-x-1.json")


def test_a_store_named_on_a_file_is_refused_at_start_up_and_a_new_folder_is_not(pytester, tmp_path, monkeypatch):
    (tmp_path / "f").write_text("")
    r = pytester.runpytest_inprocess("--gpuprops-baselines", str(tmp_path / "f" / "b"))
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--gpuprops-baselines {tmp_path / 'f' / 'b'}: {tmp_path / 'f'} is a file, not a folder" in r.stderr.str()
    monkeypatch.setenv("GPUPROPS_BASELINE_DIR", str(tmp_path / "f" / "c"))
    r = pytester.runpytest_inprocess()
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "GPUPROPS_BASELINE_DIR" in r.stderr.str()
    assert pytester.runpytest_inprocess("--gpuprops-baselines", str(tmp_path / "new" / "store")).ret == \
        pytest.ExitCode.NO_TESTS_COLLECTED  # created on the first run that has readings to keep


def test_the_default_store_follows_the_variable_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPROPS_BASELINE_DIR", str(tmp_path / "s"))
    assert baselines.default_dir() == tmp_path / "s"
    monkeypatch.delenv("GPUPROPS_BASELINE_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "x"))
    assert baselines.default_dir() == tmp_path / "x" / "gpuprops" / "baselines"


def test_a_report_or_a_stored_run_serves_as_a_baseline_file(tmp_path):
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(results.SessionResults([verdict(23.0)]).to_json({})))
    assert [v.measured for v in baselines.from_report(rep)] == [23.0]
    ((_u, path, _ok, _w),) = baselines.Store(tmp_path / "s").save([verdict(23.2)], FINISHED)
    assert [v.measured for v in baselines.from_report(path)] == [23.2]
    with pytest.raises(baselines.BaselineError, match="cannot read report"):
        baselines.from_report(tmp_path / "missing.json")


# -- the default workflow through the plugin ----------------------------------------------------

FACTS = ('arch = "sm_90"\n\n[lds_latency_cycles]\nvalue = 23.0\ntolerance_abs = 1.0\n'
         'same_unit_tolerance_rel = 0.005\nunit = "cycles"\nmethod = "chase"\nsource = "given"\n')


@pytest.fixture
def unit(pytester, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # the test file is rewritten between runs
    pytester.makeconftest(fake_gpu_conftest(count=1))
    (pytester.path / "sm_90.toml").write_text(FACTS)

    def run(value, *args):
        pytester.makepyfile(one_fact_test("lds_latency_cycles", value, "test_lds"))
        return pytester.runpytest_inprocess("--gpuprops-facts", "sm_90.toml", "--gpuprops-baselines",
                                            str(tmp_path / "store"), *args)
    return run


def test_the_second_run_on_a_unit_compares_with_the_first_and_a_planted_two_percent_is_moved(unit):
    first = unit(23.0)
    assert first.ret == 0
    first.stdout.fnmatch_lines(["gpuprops baseline: GPU-00000000: no baseline yet*",
                                "gpuprops baseline: GPU-00000000: this run stored as *; accepted*"])
    again = unit(23.05)  # 0.2 %: the unit repeats itself
    assert again.ret == 0
    again.stdout.fnmatch_lines(["gpuprops baseline: GPU-00000000: run of * on *, 1 facts; since then: no change of "
                                "driver, CUDA, VBIOS, max SM clock or compiler; 0 MOVED"])
    moved = unit(23.05 * 1.02)  # 2 % off the last accepted run: inside the SKU's band (23 ± 1), not the unit's
    assert moved.ret == 1
    moved.assert_outcomes(passed=1)
    moved.stdout.fnmatch_lines(["*baseline 23.050 ± 0.115 cycles (same-unit band 0.50%)*(moved +0.461, +2.00%)*MOVED"])


def test_a_change_inside_the_sku_band_is_moved_on_the_same_unit(unit):
    assert unit(23.0).ret == 0
    r = unit(23.2)  # holds 23 ± 1, but 0.87 % off this unit's own 23.0 (band 0.5 %)
    assert r.ret == 1
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*this run stored as *; not accepted: 1 red verdict(s)*",
                            "*baseline 23.000 ± 0.115 cycles (same-unit band 0.50%)*(moved +0.200, +0.87%)*MOVED*"])
    assert unit(23.2).ret == 1  # still compared with the last accepted run, not the red one
    accepted = unit(23.2, "--gpuprops-baseline-accept")  # the change is understood: the new baseline
    assert accepted.ret == 1  # this run is still red ...
    assert unit(23.2).ret == 0  # ... and the next one compares with the accepted one


def test_baseline_none_neither_compares_nor_stores(unit, tmp_path):
    assert unit(23.0).ret == 0
    r = unit(23.2, "--gpuprops-baseline", "none")
    assert r.ret == 0 and "gpuprops baseline" not in r.stdout.str()
    assert len(list((tmp_path / "store").rglob("*.json"))) == 1


def test_a_report_given_as_the_baseline_is_used_instead_of_the_store(unit, pytester):
    assert unit(23.2, "--gpuprops-report", "old.json").ret == 0
    assert unit(23.0).ret == 1  # against the store's 23.2
    r = unit(23.2, "--gpuprops-baseline", "old.json")
    assert r.ret == 0
    r.stdout.fnmatch_lines(["gpuprops baseline: compared with old.json"])
    report = json.loads((pytester.path / "old.json").read_text())
    assert report["meta"]["baselines"]["stored"][0]["accepted"] is True


@pytest.mark.parametrize("args, message", [
    (["--gpuprops-baseline", ""], "--gpuprops-baseline '': expected 'last'"),
    (["--gpuprops-baseline", "nope.json"], "--gpuprops-baseline: cannot read report nope.json"),
    (["--gpuprops-compare", "a.json", "--gpuprops-baseline", "b.json"], "name two baselines; give one"),
    (["--gpuprops-baselines", ""], "--gpuprops-baselines '': expected a folder"),
])
def test_baseline_options_that_cannot_be_used_stop_the_run_at_start_up(pytester, args, message):
    (pytester.path / "a.json").write_text('{"facts": []}')
    r = pytester.runpytest_inprocess(*args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert message in r.stderr.str()


def test_the_store_keeps_units_apart_under_one_fleet_folder(tmp_path):
    store = baselines.Store(tmp_path)
    a = [verdict(23.0)]
    b = [dataclasses.replace(verdict(23.2), gpu=dict(GPU, uuid="GPU-27864b42-677c-a988-53d2-9c6308002028"))]
    store.save(a + b, FINISHED)
    assert [v.measured for v in store.baseline(UUID).verdicts] == [23.0]
    assert unit_compare.compare(store.baseline(UUID).verdicts, b) == []  # another unit's reading is not compared


def _at(measured, clock, **kw):
    v = verdict(measured, **kw)
    v.measurement = {"median": measured, "sm_clock_mhz": clock}
    return v


def test_the_baseline_keeps_a_reading_per_clock_state_and_the_compare_takes_the_nearest(tmp_path):
    # GPU-08869ce3, 2026-11-26: L2 read 7252.5 GB/s at 1979.8 MHz, 7105.1 at 1994.9 in another process
    store = baselines.Store(tmp_path)
    fact = dict(fact="l2_read_gbps", rel=0.026)  # (the helper's unit is cycles; the rule is the same)
    store.save([_at(7252.5, 1979.8, **fact)], FINISHED)
    store.save([_at(7105.1, 1994.9, **fact)], dict(FINISHED, date="2026-11-26T10:00:00"))
    store.save([_at(7250.0, 1980.1, **fact)], dict(FINISHED, date="2026-11-26T11:00:00"))
    base = store.baseline(UUID)
    assert sorted(v.measured for v in base.verdicts) == [7105.1, 7250.0]  # the newest per state
    assert base.describe().endswith(", 1 facts")
    assert unit_compare.compare(base.verdicts, [_at(7100.1, 1994.9, **fact)]) == []
    assert unit_compare.compare(base.verdicts, [_at(7240.0, 1979.7, **fact)]) == []
    (m,) = unit_compare.compare(base.verdicts, [_at(7100.1 * 1.05, 1994.9, **fact)])
    assert m.expected == "baseline 7105.100 ± 185 cycles (same-unit band 2.60%)"
    # a state the unit has not run in yet: the nearest, said so
    (m,) = unit_compare.compare(base.verdicts, [_at(7100.0 * 0.95, 2010.0, **fact)])
    assert m.expected.endswith("at 1994.9 MHz")


def test_a_rate_of_sm_work_in_a_clock_state_the_baseline_lacks_is_compared_per_clock(tmp_path):
    # H100 GPU-28469c12, 2026-11-26: FFMA 66.008 TFLOP/s at 1980.5 MHz, then 66.743 at 1995.6 in the next
    # process (+1.11 %, band 1 %): the same work per clock, not a move
    store = baselines.Store(tmp_path)
    ffma = dict(fact="ffma_fp32_tflops", rel=0.01)
    store.save([_at(66.008, 1980.5, **ffma)], FINISHED)
    base = store.baseline(UUID)
    assert unit_compare.compare(base.verdicts, [_at(66.743, 1995.6, **ffma)]) == []
    # 2 % less work per clock in the other state is still a move, said against the scaled baseline
    (m,) = unit_compare.compare(base.verdicts, [_at(66.008 * 1995.6 / 1980.5 * 0.98, 1995.6, **ffma)])
    assert m.expected == "baseline 66.511 ± 0.665 cycles (same-unit band 1.00%) (its 66.008 at 1980.5 MHz scaled to 1995.6 MHz)"
    assert "-2.00%" in m.measured_text
    # bytes through the L2 or DRAM are not SM work: compared as read, the other state named
    dram = dict(fact="dram_read_gbps", rel=0.01)
    store.save([_at(3100.0, 1980.5, **dram)], dict(FINISHED, date="2026-11-26T10:00:00"))
    (m,) = unit_compare.compare(store.baseline(UUID).verdicts, [_at(3100.0 * 1.012, 1995.6, **dram)])
    assert m.expected.endswith("at 1980.5 MHz")
    assert unit_compare.compare(store.baseline(UUID).verdicts, [_at(3100.0 * 1.005, 1995.6, **dram)]) == []



def _beside(measured, clock, session=1938.8, **kw):
    """A latency reading whose build read the SM clock beside its launches (KernelSpec.clock_beside)."""
    v = verdict(measured, **kw)
    v.measurement = {"median": measured, "sm_clock_mhz": session,
                     "launch": {"clock_beside_mhz": clock, "clock_beside_range_mhz": [clock, clock]}}
    return v


def test_a_latency_past_the_sm_is_compared_at_the_clock_read_beside_it(tmp_path):
    # H100 GPU-1d74b276, 2026-11-27: the DRAM chase read 682.44 cycles at 1994.2 MHz, 679.10 at 1979.2 in the
    # next process (-0.49 %); a 0.4 % band compared as read would call that a move
    dram = dict(fact="dram_latency_cycles", rel=0.004)
    store = baselines.Store(tmp_path)
    store.save([_beside(682.44, 1994.2, **dram)], FINISHED)
    base = store.baseline(UUID)
    assert unit_compare.reading_clock(base.verdicts[0]) == 1994.2  # the clock beside, not the session's
    assert unit_compare.compare(base.verdicts, [_beside(679.10, 1979.2, **dram)]) == []
    # in the same state it is compared as read: the same 0.49 % is a move there
    (m,) = unit_compare.compare(base.verdicts, [_beside(679.10, 1994.0, **dram)])
    assert m.expected == "baseline 682.440 ± 2.73 cycles (same-unit band 0.40%)"
    # a 2 % move in the other state is caught against the baseline scaled half way and its widened band
    (m,) = unit_compare.compare(base.verdicts, [_beside(682.44 * 1.02, 1979.2, **dram)])
    assert m.expected == ("baseline 679.869 ± 5.28 cycles (same-unit band 0.40% + 0.5 x the clocks' 0.75%) "
                          "(its 682.440 at 1994.2 MHz scaled to 1979.2 MHz)")
    # the band's widening reaches both ends: the clocks' whole ratio, and none of it
    assert unit_compare.compare(base.verdicts, [_beside(682.44 * 1979.2 / 1994.2, 1979.2, **dram)]) == []
    assert unit_compare.compare(base.verdicts, [_beside(682.44, 1979.2, **dram)]) == []
    # a reading stored before the clock was read beside it is compared as read, whatever the clocks
    old = verdict(682.44, **dram)
    old.measurement = {"median": 682.44, "sm_clock_mhz": 1938.8}
    (m,) = unit_compare.compare([old], [_beside(679.10, 1979.2, **dram)])
    assert m.expected.startswith("baseline 682.440 ± 2.73 cycles")
    # a fact in another unit than cycles is not scaled for the clock beside it
    fill = dict(fact="l2_dram_fill_bytes", rel=0.004)
    assert not unit_compare.partly_clocked(_beside(64.0, 1994.2, **fill), dataclasses.replace(
        _beside(64.0, 1979.2, **fill), unit="bytes"))


def test_a_power_read_in_a_far_clock_state_than_its_baseline_is_not_compared_and_said_so(tmp_path):
    # H200 GPU-d94475a2, 2026-11-26: zero-operand tensor power 282.174 W at 1725 MHz; a reading 5.2 % faster
    # (1815 MHz) is past POWER_CLOCK_REACH: another regime of the clock, no like-for-like compare
    store = baselines.Store(tmp_path)
    power = dict(fact="wgmma_bf16_zero_operand_power_w", rel=0.01)
    store.save([_at(282.174, 1725.0, **power)], FINISHED)
    base = store.baseline(UUID)
    reading = _at(296.9, 1815.0, **power)
    reading.unit = "W"
    assert unit_compare.compare(base.verdicts, [reading]) == []
    assert unit_compare.other_clock_state(base.verdicts, [reading]) == ["wgmma_bf16_zero_operand_power_w"]
    # in the baseline's state a 2 % move is still MOVED, and then nothing is said of the state
    same = _at(282.174 * 1.02, 1725.0, **power)
    same.unit = "W"
    (m,) = unit_compare.compare(base.verdicts, [same])
    assert "+2.00%" in m.measured_text and unit_compare.other_clock_state(base.verdicts, [same]) == []
    assert "°C" not in m.expected and "clocks'" not in m.expected  # no temperature recorded, no scaling: none said
    # a rate in cycles read in another state is compared as before (only the power's units are exempt)
    (m,) = unit_compare.compare(base.verdicts, [_at(282.174 * 1.02, 1740.0, **power)])
    assert m.expected.endswith("at 1725 MHz")
    # the summary's line for the unit says which facts were not compared and why
    moved, notes, _ = baselines.compare_units(store, baselines.LAST, [reading], {})
    assert moved == [] and ("1 not compared, read in another SM clock or thermal state than their baseline "
                            "readings (wgmma_bf16_zero_operand_power_w)") in notes[0]
    # once the store holds a reading in that state too, the next run in it is compared like for like
    store.save([reading], dict(FINISHED, date="2026-11-26T10:00:00"))
    assert unit_compare.other_clock_state(store.baseline(UUID).verdicts, [reading]) == []


def test_a_power_in_a_near_clock_state_is_compared_scaled_by_the_clocks_in_a_wider_band(tmp_path):
    # H200 GPU-d94475a2: 282.174 W at 1725 MHz, 287.83 W at 1740 MHz in the next process (+2.0 % for +0.87 %):
    # the baseline scaled to 1740 MHz reads 284.63, the band 1 % + 1.3 x 0.87 %: no MOVED
    store = baselines.Store(tmp_path)
    store.save([_power_from(282.174, 45, clock=1725.0, rel=0.01)], FINISHED)
    base = store.baseline(UUID).verdicts
    assert unit_compare.compare(base, [_power_from(287.83, 46, clock=1740.0, rel=0.01)]) == []
    assert unit_compare.other_clock_state(base, [_power_from(287.83, 46, clock=1740.0, rel=0.01)]) == []
    # H100 GPU-540d8aa9, 2026-11-26 late: 307.86 / 308.26 W at 1814.9 MHz from 43-44 degrees C; the planted
    # baseline (+5 %) against its next process's 306.33 W at 1800.0 MHz from 46: -4.26 % after scaling (to the 1.4th power of the clocks' ratio), over
    # the 3 % band + 1.3 x 0.82 %: MOVED, and the verdict says how the band was widened
    store = baselines.Store(tmp_path / "h100")
    store.save([_power_from(308.26 * 1.05, 44, clock=1814.9)], FINISHED)
    base = store.baseline(UUID).verdicts
    (m,) = unit_compare.compare(base, [_power_from(306.33, 46, clock=1800.0)])
    assert "-4.26%" in m.measured_text and "+ 0.95 x the clocks' 0.82%" in m.expected
    assert "scaled to 1800 MHz" in m.expected
    # unplanted, the same two readings agree
    store = baselines.Store(tmp_path / "h100-unplanted")
    store.save([_power_from(308.26, 44, clock=1814.9)], FINISHED)
    assert unit_compare.compare(store.baseline(UUID).verdicts, [_power_from(306.33, 46, clock=1800.0)]) == []
    # a baseline of the reading's own state is taken before one that needs scaling
    store.save([_power_from(306.33 * 1.05, 46, clock=1800.0)], dict(FINISHED, date="2026-11-26T10:00:00"))
    (m,) = unit_compare.compare(store.baseline(UUID).verdicts, [_power_from(306.33, 46, clock=1800.0)])
    assert "clocks'" not in m.expected and "-4.76%" in m.measured_text
    # near in clock and begun 3 degrees C warmer: the band opens above only (a warmer die draws more), so the
    # planted baseline's reading, lower still, is MOVED; 6 degrees warmer than that is past the reach: no compare
    (m,) = unit_compare.compare(base, [_power_from(306.33, 47, clock=1800.0)])
    assert "+ 1% a degree C above for +3 °C" in m.expected
    assert unit_compare.compare(base, [_power_from(306.33, 44 + unit_compare.POWER_TEMPERATURE_REACH_C + 1,
                                                   clock=1800.0)]) == []


def _power_from(watts: float, start_c: int | None, *, capped: bool = False, rel: float = 0.03,
                clock: float = 1815.0, limit_w: float | None = None):
    v = _at(watts, clock, fact="wgmma_bf16_zero_operand_power_w", rel=rel)
    v.unit = "W"
    v.measurement["launch"] = {"temperature_c": [start_c, start_c + 6]} if start_c is not None else {}
    if limit_w is not None:
        v.measurement["launch"]["power_limit_w"] = limit_w
    v.measurement["throttle"] = ["sw_power_cap"] if capped else []
    return v


def test_a_power_is_at_the_cap_when_it_reads_its_gpu_s_power_limit():
    # H100 GPU-bdc22158, 2026-11-26: 697.9-699.3 W of 700 at the cap; the zero-operand stress 311.7 W with
    # sw_power_cap named beside it too (the reason outlives the stress before it)
    assert unit_compare.held_at_power_cap(_power_from(697.93, 51, capped=True, limit_w=700.0))
    assert not unit_compare.held_at_power_cap(_power_from(311.73, 53, capped=True, limit_w=700.0))
    edge = 700.0 * unit_compare.AT_POWER_CAP
    assert unit_compare.held_at_power_cap(_power_from(edge, 51, limit_w=700.0))
    assert not unit_compare.held_at_power_cap(_power_from(edge - 0.01, 51, capped=True, limit_w=700.0))
    # a reading that recorded no limit, or no positive one: NVML's reason, as before
    assert unit_compare.held_at_power_cap(_power_from(311.73, 53, capped=True))
    assert not unit_compare.held_at_power_cap(_power_from(697.93, 51))
    assert not unit_compare.held_at_power_cap(_power_from(311.73, 53, limit_w=0.0))
    assert unit_compare.held_at_power_cap(_power_from(311.73, 53, limit_w=0.5))  # any positive limit is read


def test_a_power_at_the_cap_is_compared_at_any_clock_and_one_below_it_only_at_its_own(tmp_path):
    # GPU-bdc22158's random-operand power: 698.78 W at 1600.3 MHz in the baseline's process, 697.93 W at
    # 1592.2 MHz planted 5 % off: the clock 0.5 % off left it uncompared under the clock-state rule
    store = baselines.Store(tmp_path)
    store.save([_power_from(698.78 * 1.05, 47, capped=True, clock=1600.3, limit_w=700.0, rel=0.01)], FINISHED)
    base = store.baseline(UUID).verdicts
    (m,) = unit_compare.compare(base, [_power_from(697.93, 51, capped=True, clock=1592.2, limit_w=700.0, rel=0.01)])
    assert "-4.88%" in m.measured_text
    # the zero-operand power, under the cap (NVML's sw_power_cap beside it notwithstanding), in another clock
    # state than its baseline: compared scaled by the clocks, its band widened (POWER_CLOCK_SLACK), not as a
    # capped one: the planted 5 % reads -4.24 % after scaling (to 331.142 W), over 3 % + 0.95 x 0.83 %: MOVED;
    # unplanted, the same reading is +0.52 %
    store = baselines.Store(tmp_path / "zero")
    store.save([_power_from(311.73 * 1.05, 53, capped=True, clock=1800.0, limit_w=700.0)], FINISHED)
    base = store.baseline(UUID).verdicts
    reading = _power_from(317.09, 54, capped=True, clock=1815.0, limit_w=700.0)
    (m,) = unit_compare.compare(base, [reading])
    assert "baseline 331.142" in m.expected and "clocks' 0.83%" in m.expected and "-4.24%" in m.measured_text
    assert unit_compare.other_clock_state(base, [reading]) == []
    unplanted = baselines.Store(tmp_path / "zero-unplanted")
    unplanted.save([_power_from(311.73, 53, capped=True, clock=1800.0, limit_w=700.0)], FINISHED)
    assert unit_compare.compare(unplanted.baseline(UUID).verdicts, [reading]) == []
    # and in its own clock state, a stress begun 4 degrees C warmer that reads 4.8 % less: MOVED (warmer draws more)
    (m,) = unit_compare.compare(base, [_power_from(311.73, 57, capped=True, clock=1800.0, limit_w=700.0)])
    assert "-4.76%" in m.measured_text and "above for +4 °C" in m.expected
    # a baseline at the cap and a reading under it (the cap no longer reached): compared at any clock, MOVED
    store = baselines.Store(tmp_path / "fell")
    store.save([_power_from(698.78, 47, capped=True, clock=1600.3, limit_w=700.0, rel=0.01)], FINISHED)
    (m,) = unit_compare.compare(store.baseline(UUID).verdicts,
                                [_power_from(650.0, 47, clock=1650.0, limit_w=700.0, rel=0.01)])
    assert "-6.98%" in m.measured_text


def test_a_moved_power_says_the_temperatures_its_two_stresses_began_at(tmp_path):
    # H100 GPU-b842806c, 2026-11-26 night: zero-operand power 313.9 W from 48 degrees C
    store = baselines.Store(tmp_path)
    store.save([_power_from(313.9, 48)], FINISHED)
    (m,) = unit_compare.compare(store.baseline(UUID).verdicts, [_power_from(313.9 * 1.05, 50)])
    assert m.expected.endswith("(its stress began at 48 °C, this one at 50 °C)")
    assert unit_compare.start_temperature_c(_power_from(1.0, 50)) == 50
    assert unit_compare.start_temperature_c(_at(1.0, 1815.0)) is None


def test_a_power_below_the_cap_is_compared_only_with_a_stress_that_began_at_its_temperature(tmp_path):
    # H100 GPU-b842806c, 2026-11-26 night: zero-operand power 313.9 W from 48 degrees C, then 320.8-323.1 W
    # from 51-53 as the GPU warmed between processes (+2.2-2.9 %, the die's leakage, not the unit)
    store = baselines.Store(tmp_path)
    store.save([_power_from(313.9, 48)], FINISHED)
    base = store.baseline(UUID).verdicts
    warmer = _power_from(322.6, 53)
    # 5 degrees C warmer: compared in a band open 5 % further above (POWER_TEMPERATURE_SLACK), so the +2.8 % of a
    # warmer die is no MOVED, while 5 % less is; 7 degrees warmer is past the reach: not compared, and said so
    assert unit_compare.compare(base, [warmer]) == [] and unit_compare.other_clock_state(base, [warmer]) == []
    (m,) = unit_compare.compare(base, [_power_from(313.9 * 0.95, 53)])
    assert "-9.42 / +25.1 W" in m.expected
    far = _power_from(322.6, 48 + unit_compare.POWER_TEMPERATURE_REACH_C + 1)
    assert unit_compare.compare(base, [far]) == []
    assert unit_compare.other_clock_state(base, [far]) == ["wgmma_bf16_zero_operand_power_w"]
    # within SAME_START_TEMPERATURE_C the band is the same-unit one on both sides: 5 % is MOVED either way
    edge = 48 + unit_compare.SAME_START_TEMPERATURE_C
    assert len(unit_compare.compare(base, [_power_from(313.9 * 1.05, edge)])) == 1
    assert unit_compare.other_clock_state(base, [_power_from(313.9, edge)]) == []
    assert unit_compare.compare(base, [_power_from(313.9 * 1.05, edge + 1)]) == []  # 3 % + 3 %
    # a reading without a temperature is taken as in every thermal state
    assert len(unit_compare.compare(base, [_power_from(313.9 * 1.05, None)])) == 1
    # the store keeps the warmer reading as a state of its own; the next warm run compares with it
    store.save([warmer], dict(FINISHED, date="2026-11-26T10:00:00"))
    base = store.baseline(UUID).verdicts
    assert sorted(unit_compare.start_temperature_c(o) for o in base) == [48, 53]
    (m,) = unit_compare.compare(base, [_power_from(322.6 * 0.95, 52)])
    assert "baseline 322.600" in m.expected and "began at 53 °C, this one at 52 °C" in m.expected


def test_a_file_given_as_the_baseline_names_the_powers_it_did_not_compare(tmp_path):
    # a planted baseline of a four-H100 node, 2026-11-26: GPU-8a3eeee9's zero-operand stress began at 40 degrees C
    # in the baseline's process; one begun 7 degrees warmer (past POWER_TEMPERATURE_REACH_C): no compare, and the
    # summary says so
    (_uuid, path, _ok, _why), = baselines.Store(tmp_path / "planted").save([_power_from(304.7 * 1.05, 40)], FINISHED)
    moved, notes, _ = baselines.compare_units(baselines.Store(tmp_path / "store"), str(path), [_power_from(310.9, 47)], {})
    assert moved == [] and notes == [f"compared with {path}; 1 not compared, read in another SM clock or thermal "
                                     "state than their baseline readings (wgmma_bf16_zero_operand_power_w)"]
    # at the baseline's temperature the same file compares it: 5 % is MOVED
    moved, notes, _ = baselines.compare_units(baselines.Store(tmp_path / "store"), str(path), [_power_from(304.7, 41)], {})
    assert len(moved) == 1 and notes == [f"compared with {path}"]


def test_a_power_held_at_the_cap_is_compared_whatever_the_temperature(tmp_path):
    # the random-operand stress runs at the 700 W cap (sw_power_cap): the cap sets its power, not the die
    store = baselines.Store(tmp_path)
    store.save([_power_from(699.2, 40, capped=True, rel=0.01)], FINISHED)
    base = store.baseline(UUID).verdicts
    assert unit_compare.compare(base, [_power_from(699.5, 55, capped=True, rel=0.01)]) == []
    (m,) = unit_compare.compare(base, [_power_from(699.2 * 0.95, 55, capped=True, rel=0.01)])
    assert "-5.00%" in m.measured_text
    # and the store keeps no second thermal state of it
    store.save([_power_from(699.5, 55, capped=True, rel=0.01)], dict(FINISHED, date="2026-11-26T10:00:00"))
    assert len(store.baseline(UUID).verdicts) == 1


def test_the_baselines_command_lists_each_unit_its_runs_and_what_its_baseline_takes(tmp_path, capsys):
    from pytest_gpuprops import cli
    store = baselines.Store(tmp_path)
    store.save([verdict(23.0), verdict(5.0, fact="ffma")], FINISHED)
    red = dict(FINISHED, date="2026-11-26T10:00:00", run=results.run_status(1, 2, 2))
    store.save([verdict(23.1), verdict(9.0, fact="ffma", status="NOISY")], red)
    (tmp_path / UUID / "zz-broken.json").write_text("{")
    assert cli.main(["baselines", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"baseline store {tmp_path}: 1 unit(s)" in out and f"{UUID} (NVIDIA H100 80GB HBM3): 2 run(s)" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("2026-11-26")]
    # newest first: the red run lends its passing lds reading, the first run its ffma
    assert [(r[0], r[2], r[5], r[6]) for r in rows] == [("2026-11-26T10:00:00", "no", "2", "1"),
                                                        ("2026-11-26T09:30:00", "yes", "2", "1")]
    assert "not a unit run, never a baseline:" in out and "zz-broken.json" in out
    assert cli.main(["baselines", "--store", str(tmp_path), "--unit", "GPU-ffff"]) == 2
    assert "no unit 'GPU-ffff'" in capsys.readouterr().err
    assert cli.main(["baselines", "--store", str(tmp_path / "empty")]) == 0
    assert "no unit has run yet" in capsys.readouterr().out


def test_an_unwritable_default_store_does_not_stop_a_run_and_is_named_at_its_end(pytester, monkeypatch, tmp_path):
    # a CI machine with a read-only home: the default store is not checked at start-up
    monkeypatch.delenv("GPUPROPS_BASELINE_DIR")
    blocked = tmp_path / "home-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocked))  # a file: nothing can be made beneath it
    pytester.makeconftest(fake_gpu_conftest(count=1))
    (pytester.path / "sm_90.toml").write_text(FACTS)
    pytester.makepyfile(one_fact_test("lds_latency_cycles", 23.0, "test_lds"))
    r = pytester.runpytest_inprocess("--gpuprops-facts", "sm_90.toml")
    assert r.ret == 0
    r.stdout.fnmatch_lines([f"gpuprops baseline: could not store this run in {blocked}/gpuprops/baselines: *"])
    # a store the user names is checked at start-up
    r = pytester.runpytest_inprocess("--gpuprops-facts", "sm_90.toml", "--gpuprops-baselines", str(blocked / "s"))
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "is a file, not a folder" in r.stderr.str()


def test_a_run_accepted_after_a_planned_change_starts_the_baseline_again(tmp_path):
    store = baselines.Store(tmp_path)
    fact = dict(fact="dram_read_gbps", rel=0.021)
    store.save([_at(3070.0, 1950.0, **fact)], FINISHED)  # before a driver update, at one clock
    after = dict(FINISHED, date="2026-11-26T10:00:00", run=results.run_status(1, 1, 1))
    store.save([_at(3160.0, 1920.0, **fact)], after, accept=True)  # the change is understood: accepted
    base = store.baseline(UUID)
    assert [v.measured for v in base.verdicts] == [3160.0]  # the older reading, at another clock, is gone
    assert unit_compare.compare(base.verdicts, [_at(3158.0, 1951.0, **fact)]) == []


def test_a_facts_baseline_keeps_at_most_a_few_clock_states(tmp_path):
    store = baselines.Store(tmp_path)
    for k, clock in enumerate((1900.0, 1920.0, 1940.0, 1960.0, 1980.0)):
        store.save([_at(3070.0 + k, clock, fact="dram_read_gbps")], dict(FINISHED, date=f"2026-11-26T1{k}:00:00"))
    got = [v.measured for v in store.baseline(UUID).verdicts]
    assert len(got) == baselines.MAX_STATES and got[0] == 3074.0  # the newest first


def test_a_reading_taken_by_another_method_is_no_baseline_and_the_summary_says_so(tmp_path):
    """The facts file's method text changes with the method: a unit's reading of the old method would be a false
    MOVED (the H100's random-operand power read 1-3 % lower once its windows shared their boundaries)."""
    store = baselines.Store(tmp_path)
    store.save([verdict(23.0), verdict(700.0, fact="power_w", rel=0.01)], FINISHED)
    new_power = dataclasses.replace(verdict(690.0, fact="power_w", rel=0.01), method="windows sharing boundaries")
    moved, notes, _ = baselines.compare_units(store, baselines.LAST, [verdict(24.0), new_power], FINISHED)
    assert [m.fact for m in moved] == ["lds_latency_cycles"]  # 23 -> 24 is moved; the power is not compared
    assert notes[0].endswith("; 1 MOVED; 1 not compared, their method changed since (power_w: this run's reading is "
                             "their baseline from now on)")
    # the same method: compared, and 1.4 % is past its 1 % band
    assert [m.fact for m in unit_compare.compare(store.baseline(UUID).verdicts,
                                            [verdict(690.0, fact="power_w", rel=0.01)])] == ["power_w"]
    assert unit_compare.method_changed(store.baseline(UUID).verdicts, [verdict(23.0)]) == []


def test_of_near_state_baselines_a_power_is_compared_with_the_one_of_the_narrowest_band(tmp_path):
    # H100 GPU-190bcd2c, 2026-11-27: zero-operand power 311.95 W at 1808.6 MHz from 44 degrees C, 309.1 at 1815.0
    # from 41; the planted 5 % baselines against 308.28 at 1806.9 from 40. The nearest clock (1808.6) is 4 degrees
    # away (a band opened 4 % below: -5.8 % hides in it); the other, 0.45 % off in clock and 1 degree, is MOVED
    # (-4.42 % after scaling, over 3 % + 0.95 x 0.45 %)
    store = baselines.Store(tmp_path)
    store.save([_power_from(311.95 * 1.05, 44, clock=1808.6)], FINISHED)
    store.save([_power_from(309.1 * 1.05, 41, clock=1815.0)], dict(FINISHED, date="2026-11-26T10:00:00"))
    base = store.baseline(UUID).verdicts
    assert len(base) == 2
    (m,) = unit_compare.compare(base, [_power_from(308.28, 40, clock=1806.9)])
    assert "its 324.555 at 1815 MHz scaled to 1806.9 MHz" in m.expected and "-4.42%" in m.measured_text
    # unplanted, neither is MOVED
    store = baselines.Store(tmp_path / "unplanted")
    store.save([_power_from(311.95, 44, clock=1808.6)], FINISHED)
    store.save([_power_from(309.1, 41, clock=1815.0)], dict(FINISHED, date="2026-11-26T10:00:00"))
    assert unit_compare.compare(store.baseline(UUID).verdicts, [_power_from(308.28, 40, clock=1806.9)]) == []


def test_the_state_rules_at_their_edges():
    """unit_compare's state rules exactly at their limits, and with a side missing (the mutants that survived)."""
    # one clock state up to SAME_CLOCK (0.4 %) apart, inclusive; a missing clock is in every state
    assert unit_compare.same_clock(996.0, 1000.0) and not unit_compare.same_clock(995.9, 1000.0)
    assert unit_compare.same_clock(None, 1800.0) and unit_compare.same_clock(1800.0, None)
    # a reading's clock is any positive number it recorded
    assert unit_compare.reading_clock(_at(1.0, 1.0)) == 1.0 and unit_compare.reading_clock(_at(1.0, 0.0)) is None
    # one thermal state up to 2 degrees C apart, inclusive, whatever the temperatures
    assert unit_compare.same_state(_power_from(300.0, 48), _power_from(300.0, 50))
    assert not unit_compare.same_state(_power_from(300.0, 48), _power_from(300.0, 51))
    # a start temperature only where one was recorded as a number
    empty, text = _power_from(300.0, 48), _power_from(300.0, 48)
    empty.measurement["launch"]["temperature_c"] = []
    text.measurement["launch"]["temperature_c"] = ["hot"]
    assert unit_compare.start_temperature_c(empty) is None and unit_compare.start_temperature_c(text) is None
    # a method text on one side only is taken as the same method
    a, b = _at(1.0, 1800.0), _at(1.0, 1800.0)
    a.method, b.method = "", "energy counter"
    assert unit_compare.same_method(a, b) and unit_compare.same_method(b, a)
    # near states: clocks exactly 2 % apart and starts exactly 6 degrees C apart are near; a side without a
    # temperature is near in temperature
    assert unit_compare.near_state(_power_from(300.0, 40, clock=980.0), _power_from(300.0, 46, clock=1000.0))
    assert not unit_compare.near_state(_power_from(300.0, 40, clock=979.9), _power_from(300.0, 40, clock=1000.0))
    assert not unit_compare.near_state(_power_from(300.0, 40), _power_from(300.0, 47))
    assert unit_compare.near_state(_power_from(300.0, None, clock=1800.0), _power_from(300.0, 47, clock=1815.0))


def test_a_power_band_widens_for_the_clock_only_across_clock_states_and_for_the_temperature_past_2_degrees():
    base, band = 300.0, 9.0
    # the same clock state (0.39 % apart) and 2 degrees C: the same-unit band, nothing said
    assert unit_compare.power_band(_power_from(base, 44, clock=1815.0), _power_from(base, 46, clock=1808.0), base,
                                   band) == (9.0, 9.0, "")
    # another clock state, the same temperature: both sides by 0.95 x the clocks' 0.83 %
    below, above, how = unit_compare.power_band(_power_from(base, 44, clock=1815.0),
                                                _power_from(base, 44, clock=1830.0), base, band)
    assert below == above == pytest.approx(9.0 + 0.95 * 15 / 1815 * 300) and how == " + 0.95 x the clocks' 0.83%"
    # 3 degrees C cooler: the side below opens by 3 %, the side above stays
    below, above, how = unit_compare.power_band(_power_from(base, 47), _power_from(base, 44), base, band)
    assert (below, above) == (pytest.approx(18.0), 9.0) and how == " + 1% a degree C below for -3 °C"
    # both: the clocks' widening on both sides, the temperature's on its side, both said
    below, above, how = unit_compare.power_band(_power_from(base, 44, clock=1815.0),
                                                _power_from(base, 48, clock=1830.0), base, band)
    clock = 0.95 * 15 / 1815 * 300
    assert (below, above) == (pytest.approx(9.0 + clock), pytest.approx(9.0 + clock + 12.0))
    assert how == " + 0.95 x the clocks' 0.83% + 1% a degree C above for +4 °C"


def test_of_several_baselines_of_a_powers_own_state_the_nearest_clock_is_compared():
    # two readings of one state (0.3 % apart in clock, 1 degree C): the compare takes the nearest clock's,
    # not the first listed; the narrowest-band choice is for near states only
    newest, older = _power_from(320.0, 44, clock=1815.0), _power_from(300.0, 45, clock=1809.6)
    assert unit_compare.compare([newest, older], [_power_from(300.0, 45, clock=1809.6)]) == []


def test_a_reading_exactly_on_its_bands_edge_is_not_moved():
    assert unit_compare.compare([_at(128.0, 1980.0, rel=0.25)], [_at(96.0, 1980.0, rel=0.25)]) == []
    assert unit_compare.compare([_at(128.0, 1980.0, rel=0.25)], [_at(160.0, 1980.0, rel=0.25)]) == []
    assert len(unit_compare.compare([_at(128.0, 1980.0, rel=0.25)], [_at(95.9, 1980.0, rel=0.25)])) == 1


def test_only_a_reading_that_can_be_compared_is_named_for_a_changed_method():
    old = _at(1.0, 1800.0)
    old.method = "the old way"
    new = _at(1.0, 1800.0)
    new.method = "the new way"
    assert unit_compare.method_changed([old], [new]) == [new.fact]
    new.status = "NOISY"
    assert unit_compare.method_changed([old], [new]) == []


@pytest.mark.parametrize("clock, read", [(1994.2, 1994.2), (1.0, 1.0), (0, None), (0.0, None), (-3.0, None),
                                         ("1980", None), (None, None)])
def test_the_clock_beside_a_reading_is_a_positive_number_or_none(clock, read):
    v = verdict(680.0, fact="dram_latency_cycles")
    v.measurement = {"median": 680.0, "launch": {"clock_beside_mhz": clock}}
    assert unit_compare.clock_beside(v) == read


def test_a_reading_whose_clock_beside_is_zero_is_compared_as_read():
    """A clock beside that could not be read (0) is no clock state: the pair is compared as read, never scaled
    (nor divided by it)."""
    dram = dict(fact="dram_latency_cycles", rel=0.004)
    broken = _beside(682.44, 0.0, **dram)
    assert not unit_compare.partly_clocked(broken, _beside(682.44, 1979.2, **dram))
    assert unit_compare.compare([broken], [_beside(682.44 * 1.001, 1979.2, **dram)]) == []
    (m,) = unit_compare.compare([broken], [_beside(679.10, 1979.2, **dram)])
    assert "scaled" not in m.expected
