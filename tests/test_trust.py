"""Trust: a failure is confirmed before it is reported, every failing or skipped fact test shows in
the report, the report agrees with the exit status, and the fleet rules (outliers, moved facts)
work on given numbers. The plugin is driven through pytester with a fake GPU where it needs one."""

import json

import pytest
from gp_testing import child_processes_outside_mutmut, fake_gpu_conftest

from pytest_gpuprops import assertions as A
from pytest_gpuprops import confirmation, unit_compare
from pytest_gpuprops import facts as F
from pytest_gpuprops import results as R
from pytest_gpuprops.measure import Measurement

LDS = F.load_facts("sm_90")["lds_latency_cycles"]  # 23 ± 0.25 cycles


def _v(values):
    return A.evaluate(LDS, Measurement.given("lds", values))


# -- confirm: pure ---------------------------------------------------------------------------


def test_a_failure_that_reproduces_is_a_confirmed_fail_with_every_measurement():
    again = iter([_v([24.2] * 3), _v([24.3] * 3)])
    v = confirmation.confirm(_v([24.1] * 3), lambda: next(again))
    assert v.status == A.FAIL and [a["measured"] for a in v.attempts] == [24.1, 24.2, 24.3]
    assert "confirmed: failed 3 of 3 measurements" in v.flags
    assert "attempt 3: 24.300 cycles" in v.message()
    with pytest.raises(A.FactMismatch):
        A.raise_for(v)


def test_a_failure_that_does_not_reproduce_is_unstable_and_still_fails_the_test():
    again = iter([_v([23.0] * 3), _v([24.2] * 3)])
    v = confirmation.confirm(_v([24.1] * 3), lambda: next(again))
    assert v.status == A.UNSTABLE and [a["status"] for a in v.attempts] == ["FAIL", "PASS", "FAIL"]
    assert "1 of 3 measurements passed" in v.flags and not v.ok
    with pytest.raises(A.UnstableMeasurement, match="did not fail again"):
        A.raise_for(v)


def test_a_pass_is_not_measured_again():
    def boom():
        raise AssertionError("a passing fact must not be measured again")
    assert confirmation.confirm(_v([23.0] * 3), boom).status == A.PASS


def test_a_noisy_first_measurement_is_discarded_and_the_next_two_judge_the_fact():
    noisy = A.evaluate(LDS, Measurement.given("lds", [20.0, 26.0, 23.0]))
    assert noisy.status == A.NOISY
    failed = confirmation.confirm(noisy, lambda: _v([30.0] * 3))
    assert failed.status == A.FAIL and "confirmed: failed 2 of 3 measurements" in failed.flags
    passed = confirmation.confirm(noisy, lambda: _v([23.0] * 3))
    assert passed.status == A.PASS and passed.measured == 23.0 and passed.ok
    assert passed.flags[-1].startswith("first measurement discarded, noisy: noise 13.04% over target 1.00% "
                                       "(converged) (23.000 cycles (min 20.000, max 26.000")
    assert [a["status"] for a in passed.attempts] == ["NOISY", "PASS", "PASS"]
    again = iter([_v([23.0] * 3), _v([30.0] * 3)])
    assert confirmation.confirm(noisy, lambda: next(again)).status == A.UNSTABLE
    never = confirmation.confirm(noisy, lambda: noisy)  # never settled: NOISY, confirmed over all three, nothing discarded
    assert never.status == A.NOISY and never.flags[-1] == "confirmed: failed 3 of 3 measurements"
    assert not any(f.startswith(confirmation.DISCARDED_FIRST) for f in never.flags)


def test_confirmation_count_is_two_fresh_measurements():
    calls = []
    confirmation.confirm(_v([30.0] * 3), lambda: calls.append(1) or _v([30.0] * 3))
    assert len(calls) == confirmation.CONFIRMATIONS == 2


# -- fleet rules: pure -----------------------------------------------------------------------


def _on(gpu, value, node="hwtests/test_smem.py::test_lds_latency[50]"):
    v = _v([value] * 3)
    v.gpu = {"index": gpu, "name": "H100", "uuid": f"GPU-{gpu:08d}", "host": "n1"}
    v.nodeid = node
    return v


def test_a_gpu_off_its_peers_median_by_more_than_the_tolerance_is_an_outlier_even_when_it_passes():
    vs = [_on(0, 23.0), _on(1, 23.02), _on(2, 23.24), _on(3, 22.99)]  # GPU 2 passes 23 ± 0.25 ...
    assert all(v.status == A.PASS for v in vs)
    out, note = R.outliers(vs)
    assert note == "outlier check: 4 GPUs, 1 facts compared, 0 outlier(s)"  # ... and is within 0.25 of 23.01
    vs[2] = _on(2, 23.3)
    out, note = R.outliers(vs)
    assert [(o.status, o.gpu["index"]) for o in out] == [("OUTLIER", 2)] and "1 outlier(s)" in note
    assert "23.300" in out[0].measured_text and "peer median 23.010" in out[0].expected


def test_outliers_compare_the_same_test_across_gpu_parameters():
    vs = [_on(0, 23.0, "t.py::test_x[50-gpu0]"), _on(1, 23.9, "t.py::test_x[50-gpu1]"),
          _on(2, 23.0, "t.py::test_x[50-gpu2]"), _on(0, 23.9, "t.py::test_x[500-gpu0]")]
    out, _ = R.outliers(vs)
    assert [o.nodeid for o in out] == ["t.py::test_x[50-gpu1]"]


def test_one_gpu_has_no_outlier_check_and_says_so():
    out, note = R.outliers([_on(0, 23.0), _on(0, 30.0, "other")])
    assert out == [] and note == "outlier check: not run (1 GPU measured; it needs two or more)"


def test_compare_names_the_gpu_and_fact_that_moved():
    old = [_on(0, 23.0), _on(1, 23.0)]
    new = [_on(0, 23.1), _on(1, 23.4)]
    moved = unit_compare.compare(old, new)
    assert [(m.status, m.gpu["uuid"], m.fact) for m in moved] == [("MOVED", "GPU-00000001", "lds_latency_cycles")]
    assert "moved +0.400" in moved[0].measured_text


def test_results_round_trip_through_json():
    res = R.SessionResults([_on(0, 23.0), _on(1, 24.0)], {LDS.name: LDS}, {"hmma": [{"ilp": 1}]})
    back, meta = R.SessionResults.from_json(json.loads(json.dumps(res.to_json({"date": "d"}))))
    assert [v.as_dict() for v in back.verdicts] == [v.as_dict() for v in res.verdicts]
    assert back.recorded == res.recorded and back.plot_points == res.plot_points and meta == {"date": "d"}
    with pytest.raises(R.ResultsError, match="not a gpuprops report"):
        R.SessionResults.from_json([1, 2])


# -- through the plugin ------------------------------------------------------------------------

FAKE_GPUS = fake_gpu_conftest(count=2)

# Each "measurement" reads the next value from a list; re-measuring reads the next one. SHIFT adds to
# GPU 1's values: the test-only hook that plants an outlier.
FLAKY_FACT = '''
import pytest
from pytest_gpuprops.measure import Measurement

VALUES = {values}
SHIFT = {shift}

def given(values, gpu):  # the values in turn, the last one from then on
    v = (values.pop(0) if len(values) > 1 else values[0]) + (SHIFT if gpu == 1 else 0)
    m = Measurement.given("lds", [v, v, v])
    m.remeasure = lambda: given(values, gpu)
    return m

@pytest.mark.gpu
def test_lds(gpuprops, gpuprops_gpu_index):
    gpuprops.check("lds_latency_cycles", given(list(VALUES), gpuprops_gpu_index), method="given")
'''


def _report(pytester, name="r.json"):
    return json.loads((pytester.path / name).read_text())


def test_a_planted_wrong_value_fails_confirmed_in_the_table_json_and_exit_status(pytester):
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[24.15, 24.16, 24.14], shift=0))
    r = pytester.runpytest_inprocess("--gpuprops-report", "r.json", "-v")  # -v: the attempts in the table
    r.assert_outcomes(failed=1)
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*lds_latency_cycles*23 ± 0.25 cycles*24.150*then 24.160, 24.140*FAIL (confirmed: "
                            "failed 3 of 3 measurements)*", "gpuprops: 1 FAIL"])
    data = _report(pytester)
    assert data["summary"] == {"FAIL": 1} and len(data["facts"][0]["attempts"]) == 3


def test_a_failure_that_does_not_reproduce_is_reported_unstable_not_passed(pytester):
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[24.15, 23.0, 23.01], shift=0))
    r = pytester.runpytest_inprocess("--gpuprops-report", "r.json")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*did not fail again when measured again*", "*UNSTABLE (2 of 3 measurements passed)*",
                            "gpuprops: 1 UNSTABLE"])
    assert _report(pytester)["summary"] == {"UNSTABLE": 1}


def test_a_plain_assert_in_a_fact_test_is_an_error_row_never_all_pass(pytester):
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile('''
        import pytest
        from pytest_gpuprops.measure import Measurement

        def given():  # measured again with the same values, should a check fail
            m = Measurement.given("lds", [23.0] * 3)
            m.remeasure = given
            return m

        @pytest.mark.gpu
        def test_passes(gpuprops):
            gpuprops.check("lds_latency_cycles", given(), method="given")

        @pytest.mark.gpu
        def test_passes_then_asserts(gpuprops):
            gpuprops.check("lds_latency_cycles", given(), method="given")
            assert 6.92 == pytest.approx(6.15, rel=0.12), "ILP 1 x 4 warps off the model"

        @pytest.mark.gpu
        def test_skipped(gpuprops):
            pytest.skip("no such unit on this GPU")
    ''')
    r = pytester.runpytest_inprocess("--gpuprops-report", "r.json", "-v")  # -v: every test's row
    r.assert_outcomes(passed=1, failed=1, skipped=1)
    r.stdout.fnmatch_lines(["*test_passes_then_asserts*call failed: AssertionError: ILP 1 x 4 warps off the model*ERROR*",
                            "*test_skipped*no such unit on this GPU*SKIPPED*",
                            "gpuprops: 1 ERROR, 2 PASS, 1 SKIPPED"])
    data = _report(pytester)
    assert data["summary"] == {"ERROR": 1, "PASS": 2, "SKIPPED": 1}
    md = (pytester.path / "r.md").read_text()
    assert "## Not passing" in md and "off the model" in md


def test_without_a_gpu_every_fact_test_is_listed_as_skipped_with_its_reason(pytester, monkeypatch):
    from pytest_gpuprops import devices
    monkeypatch.setattr(devices, "gpu_unavailable_reason", lambda index=0: "no CUDA driver or GPU (test)")
    pytester.makepyfile('''
        import pytest
        pytestmark = pytest.mark.gpu
        def test_regbank_a(gpuprops):
            pass
        def test_regbank_b(gpuprops):
            pass
    ''')
    r = pytester.runpytest_inprocess("-k", "regbank", "-v")  # -v: every skipped test's row
    r.assert_outcomes(skipped=2)
    r.stdout.fnmatch_lines(["*test_regbank_a*needs a GPU: no CUDA driver or GPU (test)*SKIPPED*",
                            "gpuprops: 2 SKIPPED"])


def test_several_gpus_one_after_another_that_differ_inside_the_band_pass(pytester):
    pytester.makeconftest(FAKE_GPUS)
    # GPU 0 reads 22.8, GPU 1 (shifted) 23.2: each passes 23 ± 0.25; they differ by 0.4 > 0.25, 1.8 %:
    # what healthy units do, so reported, not red
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0.4))
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--gpuprops-report", "r.json")
    r.assert_outcomes(passed=2)
    assert r.ret == 0
    r.stdout.fnmatch_lines(["*per GPU*", "*lds_latency_cycles*test_lds*22.800 PASS*23.200 PASS*",
                            "gpuprops outlier check: 2 GPUs, 1 facts compared, 0 outlier(s), 2 fact(s) where units "
                            "differ inside the SKU's band (not red)", "*UNITS DIFFER*"])
    data = _report(pytester)
    assert {f["gpu"]["index"] for f in data["facts"]} == {0, 1}
    assert sorted((f["gpu"]["index"], f["status"]) for f in data["fleet"]) == [(0, "UNITS DIFFER"), (1, "UNITS DIFFER")]


def test_several_gpus_one_after_another_with_a_planted_outlier(pytester):
    pytester.makeconftest(FAKE_GPUS)
    # GPU 1 reads 24.0, 5.3 % off GPU 0: it fails its band and is an outlier; the run fails
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8, 22.8, 22.8], shift=1.2))
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--gpuprops-report", "r.json")
    r.assert_outcomes(passed=1, failed=1)
    assert r.ret == 1
    r.stdout.fnmatch_lines(["gpuprops outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)", "*OUTLIER*"])
    data = _report(pytester)
    assert sorted((f["gpu"]["index"], f["status"]) for f in data["fleet"]) == [(0, "OUTLIER"), (1, "OUTLIER")]


def test_same_values_on_every_gpu_pass_the_outlier_check(pytester):
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[23.0], shift=0.1))
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "0,1")
    r.assert_outcomes(passed=2)
    assert r.ret == 0
    r.stdout.fnmatch_lines(["gpuprops outlier check: 2 GPUs, 1 facts compared, 0 outlier(s)"])


def test_compare_with_an_earlier_report_fails_naming_gpu_and_fact(pytester, monkeypatch):
    # the same file is rewritten between runs with the same size: no stale bytecode may answer
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0))
    pytester.runpytest_inprocess("--gpuprops-report", "old.json").assert_outcomes(passed=1)
    pytester.makepyfile(FLAKY_FACT.format(values=[23.2], shift=0))
    r = pytester.runpytest_inprocess("--gpuprops-compare", "old.json")
    r.assert_outcomes(passed=1)  # 23.2 still holds the fact (23 ± 0.25) ...
    assert r.ret == 1  # ... but moved by 0.4 since the baseline, more than the tolerance
    r.stdout.fnmatch_lines(["*lds_latency_cycles*baseline 22.800 ± 0.228 cycles (same-unit band 1.00%)*23.200 cycles on node1:gpu0 Fake GPU*"
                            "(moved +0.400, +1.75%)*MOVED*"])
    pytester.makepyfile(FLAKY_FACT.format(values=[22.9], shift=0))
    assert pytester.runpytest_inprocess("--gpuprops-compare", "old.json").ret == 0


def test_a_reading_moved_once_is_measured_again_and_a_unit_that_changed_is_moved(pytester, monkeypatch):
    """Against the unit's stored baseline (22.8, band 1 %): a state of the GPU that passes within seconds
    moves one reading (23.2), measured twice more (22.8, 22.9): the median judges and the run is green; a
    unit that changed reads 23.2 every time: MOVED, red."""
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # the test file is rewritten between runs
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0))
    assert pytester.runpytest_inprocess().ret == 0  # the unit's baseline
    pytester.makepyfile(FLAKY_FACT.format(values=[23.2, 22.8, 22.9], shift=0))
    r = pytester.runpytest_inprocess("--gpuprops-report", "r.json")
    assert r.ret == 0, r.stdout.str()[-2000:]
    (v,) = _report(pytester)["facts"]
    assert v["status"] == "PASS" and v["measured"] == pytest.approx(22.9)
    assert [a["measured"] for a in v["attempts"]] == pytest.approx([23.2, 22.8, 22.9])
    assert v["flags"][-1] == ("off its unit's baseline in 1 of 3 measurements (23.2, 22.8, 22.9 cycles): the "
                              "median judged")
    pytester.makepyfile(FLAKY_FACT.format(values=[23.2], shift=0))
    r = pytester.runpytest_inprocess()
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*baseline 22.900 ± 0.229 cycles (same-unit band 1.00%)*23.200 cycles*(moved +0.300, "
                            "+1.31%)*MOVED*"])


XDIST_STATIC = '''
import pytest

@pytest.mark.static
@pytest.mark.parametrize("value", [24, 25])
def test_dependent_spacing(gpuprops_static, value):
    gpuprops_static.check("sm_90", "hmma_16816_f32_dependent_issue_cycles", value, "nvrtc 13.5")

@pytest.mark.static
def test_plain_failure():
    assert 1 == 2, "planted"
'''


def test_xdist_gives_the_same_verdicts_and_report_as_one_process(pytester, monkeypatch):
    pytest.importorskip("xdist")
    child_processes_outside_mutmut(monkeypatch)
    pytester.makepyfile(XDIST_STATIC)
    one = pytester.runpytest_inprocess("--gpuprops-report", "one.json")
    two = pytester.runpytest_subprocess("-n", "2", "--gpuprops-report", "two.json")
    one.assert_outcomes(passed=1, failed=2)
    two.assert_outcomes(passed=1, failed=2)

    def key(d):
        return sorted((f["nodeid"], f["fact"], f["status"], f["measured"]) for f in d["facts"])
    a, b = _report(pytester, "one.json"), _report(pytester, "two.json")
    assert key(a) == key(b) and a["summary"] == b["summary"] == {"ERROR": 1, "FAIL": 1, "PASS": 1}
    two.stdout.fnmatch_lines(["*gpuprops facts*", "gpuprops: 1 FAIL, 1 ERROR, 1 PASS"])


def test_xdist_one_worker_per_gpu_measures_every_gpu(pytester, monkeypatch):
    pytest.importorskip("xdist")
    child_processes_outside_mutmut(monkeypatch)
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0.4))
    r = pytester.runpytest_subprocess("-n", "2", "--gpuprops-gpus", "all", "--gpuprops-report", "r.json")
    r.assert_outcomes(passed=2)
    data = _report(pytester)
    assert sorted(f["gpu"]["index"] for f in data["facts"]) == [0, 1]
    assert sorted((f["gpu"]["index"], f["status"]) for f in data["fleet"]) == [(0, "UNITS DIFFER"), (1, "UNITS DIFFER")]
    assert r.ret == 0  # a healthy pair that differs as units do
    # the controller kept each unit's run in the store: a second run compares with it, unit by unit
    assert sorted(d["uuid"] for d in data["meta"]["baselines"]["stored"]) == [
        "GPU-00000000-0000-0000-0000-000000000000", "GPU-00000001-0000-0000-0000-000000000000"]


def _node_report(path, host, values):
    vs = []
    for index, value in enumerate(values):
        v = _on(index, value)
        v.gpu = dict(v.gpu, host=host, uuid=f"GPU-{host}-{index}")
        vs.append(v)
    # a node's run that finished, every selected test run: merge counts it
    meta = {"host": host, "run": R.run_status(0, len(vs), len(vs))}
    path.write_text(json.dumps(R.SessionResults(vs).to_json(meta)))
    return path


def test_merge_prints_the_fleet_table_and_the_odd_gpu_out(tmp_path, capsys):
    from pytest_gpuprops.cli import main
    a = _node_report(tmp_path / "n1.json", "n1", [23.0, 23.0])
    b = _node_report(tmp_path / "n2.json", "n2", [23.01, 23.2])
    c = _node_report(tmp_path / "n3.json", "n3", [22.7, 23.0])
    assert main(["merge", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "n1:gpu0 H100" in out and "n2:gpu1 H100" in out and "outlier check: 4 GPUs, 1 facts compared, 0 outlier" in out
    assert main(["merge", str(a), str(b), str(c)]) == 1  # n3's GPU 0 reads 22.7: 0.3 off the median 23.0
    out = capsys.readouterr().out
    assert "1 outlier(s)" in out and "22.700 cycles on n3:gpu0" in out


def test_merge_refuses_what_is_not_a_report(tmp_path, capsys):
    from pytest_gpuprops.cli import main
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    assert main(["merge", str(bad)]) == 2
    assert "not a gpuprops report" in capsys.readouterr().err


def test_a_fact_not_recorded_for_this_arch_skips_saying_how_to_record_it(pytester):
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile('''
        import pytest
        from pytest_gpuprops.measure import Measurement

        @pytest.mark.gpu
        def test_new_unit(gpuprops):
            gpuprops.check("not_yet_recorded_cycles", Measurement.given("x", [1.0] * 3), method="given")
    ''')
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["gpuprops: 1 SKIPPED", "*no fact 'not_yet_recorded_cycles' for sm_90*--gpuprops-record*"])


UNCLEAN_RUNNER = '''
import pytest
from pytest_gpuprops import measure, timing

class _Runner:
    def __init__(self, *a, **k):
        pass
    def measure(self, name, spec, **kw):
        raise timing.UncleanRegion("regbank on ARCH: the timed region does not hold what the fact measures: LDCU")

def pytest_sessionstart(session):
    _mp.setattr(measure, "Runner", _Runner)

@pytest.mark.gpu
def test_regbank(gpuprops):
    gpuprops.measure("x", KernelSpec("k.cu", "k"), divisor=1)
'''


@pytest.mark.parametrize("arch, outcome", [("sm_100", "skipped"), ("sm_90", "failed")])
def test_an_unclean_region_skips_on_a_new_arch_and_fails_on_a_known_one(pytester, arch, outcome):
    conftest = fake_gpu_conftest(arch) + UNCLEAN_RUNNER.split("@pytest.mark.gpu")[0].replace("ARCH", arch)
    pytester.makeconftest(conftest)
    pytester.makepyfile("import pytest\nfrom pytest_gpuprops.kernel_spec import KernelSpec\n\n@pytest.mark.gpu"
                        + UNCLEAN_RUNNER.split("@pytest.mark.gpu")[1])
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(**{outcome: 1})
    r.stdout.fnmatch_lines(["*LDCU*"])


def test_record_mode_under_xdist_writes_the_workers_measurements(pytester, monkeypatch):
    pytest.importorskip("xdist")
    child_processes_outside_mutmut(monkeypatch)
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[23.1], shift=0))
    r = pytester.runpytest_subprocess("-n", "2", "--gpuprops-record", "rec.toml")
    r.assert_outcomes(passed=1)
    from pytest_gpuprops import facts as F
    recorded = F._parse(pytester.path / "rec.toml")
    assert recorded["lds_latency_cycles"].value == 23.1 and "measured on Fake GPU" in recorded["lds_latency_cycles"].source
