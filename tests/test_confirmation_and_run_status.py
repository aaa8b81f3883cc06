"""Trust in how a run ends: every kind of failing fact is measured again before it is reported, a run
cut short never reads green (its report, its Markdown, its terminal line, `gpuprops merge`), a GPU
asked for and missing fails the run, and the fault runs seen on the device stay true (a compile
killed half-way, two processes on one GPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
from gp_testing import KERNELS, child_processes_outside_mutmut, fake_gpu_conftest, ncu_stand_in

from pytest_gpuprops import (
    accepted_units,
    assertions,
    baselines,
    cli,
    devices,
    measure,
    nsight,
    report,
    results,
)
from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops.fixture import CannotConfirm, FactChecker

GPU = devices.GpuInfo(0, "Fake GPU", "sm_99", 132, "580.0", "13.0", "13.0", "0000:00:00.0", 1980, "GPU-0", "n1")
L2 = gp_facts.Fact(name="l2_hit_latency_p10_cycles", arch="sm_99", unit="cycles", method="chase", source="units",
                   value=258.0, tolerance_abs=2.0)


class _State:
    def __init__(self):
        self.facts_path, self.record_path = None, None
        self.strict_population = False  # --gpuprops-population reach
        self.results = results.SessionResults()
        self.accepted = accepted_units.AcceptedUnits(None, baselines.NONE)  # no unit baseline consulted
        self.unit_baselines = accepted_units.UnitBaselines(None, baselines.NONE)
        self.move_confirm_s = {}

    def info(self, index):
        return GPU


def _checker(*facts):
    opt = SimpleNamespace(gpuprops_gpu=None, gpuprops_facts=None, gpuprops_kernels=None, gpuprops_noise=0.01,
                          gpuprops_budget=2.0)
    node = SimpleNamespace(nodeid="hwtests/t.py::test_fact", stash=pytest.Stash(), user_properties=[])
    known = gp_facts.Facts("sm_99", None, {f.name: f for f in facts}, {})
    request = SimpleNamespace(config=SimpleNamespace(option=opt), node=node,
                              getfixturevalue=lambda name: {"gpu_facts": known}[name])
    return FactChecker(request, _State(), 0)


def _series(*values_per_measurement, name="m"):
    """A measurement whose remeasure() hands out the next of the given value lists on every call, as
    fresh launches would. ``calls`` lists the measurements made."""
    calls = []

    def make():
        i = len(calls)
        calls.append(i)
        m = measure.Measurement.given(name, values_per_measurement[i])
        m.remeasure = make
        return m
    return make(), calls


# -- every kind of fact: a failure is measured again ----------------------------------------------------

def test_a_per_hop_percentile_that_fails_is_measured_again_and_confirmed():
    """The per-hop distribution facts (L2 / DRAM p10) once bypassed confirmation (no remeasure on a
    Measurement.given): a failure read 255.85 once, unconfirmed. Now it is measured twice more."""
    m, calls = _series([255.8, 255.9], [255.7, 255.9], [255.85, 255.8], name="p10")
    with pytest.raises(assertions.FactMismatch) as exc:
        _checker(L2).check("l2_hit_latency_p10_cycles", m)
    assert calls == [0, 1, 2]
    text = str(exc.value)
    assert "confirmed: failed 3 of 3 measurements" in text and text.count("-> FAIL") == 3


def test_a_percentile_that_fails_once_then_passes_is_unstable_not_passed():
    m, calls = _series([255.8, 255.9], [258.1, 258.0], [255.0, 255.1], name="p10")
    with pytest.raises(assertions.UnstableMeasurement) as exc:
        _checker(L2).check("l2_hit_latency_p10_cycles", m)
    assert calls == [0, 1, 2] and "1 of 3 measurements passed" in str(exc.value)


def test_a_measurement_that_cannot_be_repeated_is_refused_even_when_it_passes():
    """A check that could not confirm its failure is a defect of the test, found on the first run."""
    with pytest.raises(CannotConfirm, match="l2_hit_latency_p10_cycles: its measurement cannot be repeated"):
        _checker(L2).check("l2_hit_latency_p10_cycles", measure.Measurement.given("p10", [258.0]))


def test_a_model_that_fails_is_measured_again_and_a_model_without_a_way_to_do_so_is_refused():
    checker = _checker()
    again = []

    def remeasure():
        again.append(1)
        return [("ilp1", 24.0, 30.0)]
    with pytest.raises(assertions.FactMismatch, match="confirmed: failed 3 of 3"):
        checker.check_model("issue_model", [("ilp1", 24.0, 30.0)], tolerance_rel=0.02, unit="cycles", method="m",
                            source="s", remeasure=remeasure)
    assert len(again) == 2
    with pytest.raises(CannotConfirm, match="model issue_model"):
        checker.check_model("issue_model", [("ilp1", 24.0, 24.0)], tolerance_rel=0.02, unit="cycles", method="m",
                            source="s", remeasure=None)


def test_a_sweep_property_is_judged_again_on_fresh_measurements_before_it_fails():
    judged = []

    def knees_never_found():
        judged.append(1)
        return False, f"L1 knee at None B (sweep {len(judged)})"
    with pytest.raises(assertions.FactMismatch) as exc:
        _checker().check_condition("chase_capacity_knees", knees_never_found, method="sweep", source="sizes")
    assert len(judged) == 3
    assert "attempt 3: L1 knee at None B (sweep 3) -> FAIL" in str(exc.value)

    flips = iter([False, True, True])
    with pytest.raises(assertions.UnstableMeasurement):
        _checker().check_condition("chase_capacity_knees", lambda: (next(flips), "knees"), method="s", source="s")
    v = _checker().check_condition("chase_capacity_knees", lambda: (True, "L1 knee at 300 KiB"), method="s",
                                   source="s")
    assert v.status == assertions.PASS and v.kind == "condition" and v.attempts == []


def test_a_planted_shift_reaches_every_re_measurement_of_a_percentile(monkeypatch):
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", "0:l2_hit_latency_p10_cycles:-3")
    m, calls = _series([258.0], [258.1], [257.9], name="p10")
    with pytest.raises(assertions.FactMismatch, match="confirmed: failed 3 of 3"):
        _checker(L2).check("l2_hit_latency_p10_cycles", m)
    assert calls == [0, 1, 2]


# -- a failure is never hidden behind a skip while it is being confirmed -----------------------------

NCU_ERROR = ("ncu could not profile the kernels: ==ERR== ERR_NVGPUCTRPERM - The user does not have permission to "
             "access NVIDIA GPU Performance Counters on the target device 0.")
PIPE = gp_facts.Fact(name="hmma_16816_f32_tensor_pipe_cycles", arch="sm_99", unit="cycles", method="ncu",
                     source="H100", value=6.0, tolerance_abs=0.02)


def _ncu_errors_as_its_fixture_says():
    """What the ncu fixture does when Nsight Compute errors: pytest.skip with ncu's error."""
    try:
        raise nsight.NcuUnavailable(NCU_ERROR)
    except nsight.NcuUnavailable as exc:
        pytest.skip(str(exc))


def _red(call, red=assertions.FactMismatch) -> str:
    """The message of the failure ``call()`` raises; a skip (which pytest.raises would let through,
    leaving this test skipped, not red) fails the test."""
    try:
        with pytest.raises(red) as exc:
            call()
    except pytest.skip.Exception as skipped:
        pytest.fail(f"a failing fact was skipped while it was being confirmed: {skipped}")
    return str(exc.value)


def test_a_failing_fact_whose_confirmation_by_ncu_errors_fails_saying_so_not_skipped():
    checker = _checker(PIPE)
    text = _red(lambda: checker.check("hmma_16816_f32_tensor_pipe_cycles",
                                      measure.Measurement.given("cycles per HMMA", [7.0]),
                                      remeasure=_ncu_errors_as_its_fixture_says))
    assert text.startswith("fact hmma_16816_f32_tensor_pipe_cycles on sm_99 does not hold:")
    assert "  expected: 6 ± 0.02 cycles\n" in text and "  measured: 7.000 cycles" in text
    assert ("  flags:    not confirmed: measuring it again failed because Nsight Compute (ncu) errored: "
            + NCU_ERROR + "; the first measurement failed, so this is reported as a failure, not skipped: check ncu "
            "(GPUPROPS_NCU, ncu --version, permission to read the GPU's counters: ERR_NVGPUCTRPERM) and run the "
            "reproduce command again") in text
    (v,) = checker.verdicts
    assert v.status == assertions.FAIL and v.measured == 7.0 and v.attempts == []
    # an ncu error raised as such (not through the fixture's skip) is the same failure
    assert "Nsight Compute (ncu) errored: ncu could not profile" in _red(lambda: _checker(PIPE).check(
        "hmma_16816_f32_tensor_pipe_cycles", measure.Measurement.given("c", [7.0]),
        remeasure=lambda: (_ for _ in ()).throw(nsight.NcuUnavailable(NCU_ERROR))))


def test_a_skip_while_confirming_a_model_or_a_property_leaves_the_failure_standing():
    text = _red(lambda: _checker().check_model("issue_model", [("ilp1", 24.0, 30.0)], tolerance_rel=0.02,
                                               unit="cycles", method="m", source="s",
                                               remeasure=lambda: pytest.skip("the GPU went away")))
    assert ("not confirmed: measuring it again was skipped (the GPU went away); the first measurement failed, so "
            "this is reported as a failure, not skipped") in text
    judged = []

    def judge():
        judged.append(1)
        if len(judged) > 1:
            pytest.skip("no sweep this time")
        return False, "L1 knee at None B"
    assert "was skipped (no sweep this time)" in _red(
        lambda: _checker().check_condition("chase_capacity_knees", judge, method="sweep", source="sizes"))


def test_a_passing_fact_never_asks_ncu_again_and_a_skip_before_the_first_measurement_stays_a_skip():
    asked = []
    v = _checker(PIPE).check("hmma_16816_f32_tensor_pipe_cycles", measure.Measurement.given("c", [6.01]),
                             remeasure=lambda: asked.append(1))
    assert v.status == assertions.PASS and asked == []
    with pytest.raises(pytest.skip.Exception, match="ERR_NVGPUCTRPERM"):
        _checker(PIPE).check("hmma_16816_f32_tensor_pipe_cycles", _ncu_errors_as_its_fixture_says(),
                             remeasure=_ncu_errors_as_its_fixture_says)


def _run_tensor_pipe_test(pytester, monkeypatch, profiles):
    """hwtests/test_tensorcore.py's tensor-pipe test on a fake sm_90 GPU, ncu's profiles handed out in
    turn (a dict list per profile, or an exception to raise)."""
    from pytest_gpuprops import session
    hwtests = KERNELS.parent / "hwtests"
    pytester.makeconftest(fake_gpu_conftest("sm_90") + f"\nimport sys\nsys.path.insert(0, {str(hwtests)!r})\n")
    pytester.makepyfile(test_tensor_pipe=(hwtests / "test_tensorcore.py").read_text())
    handed = iter(profiles)

    def ncu_profile(self, specs, metrics, index=None):
        got = next(handed)
        if isinstance(got, Exception):
            raise got
        return [dict(zip(metrics, row)) for row in got][:len(specs)]
    monkeypatch.setattr(session.GpuPropsState, "ncu_profile", ncu_profile)
    return pytester.runpytest_inprocess("-p", "no:randomly", "-rs", "-k", "tensor_pipe_cycles",
                                        "--gpuprops-report", "r.json")


def test_the_tensor_pipe_fact_fails_red_when_ncu_errors_while_its_failure_is_confirmed(pytester, monkeypatch):
    monkeypatch.setenv("GPUPROPS_NCU", ncu_stand_in(pytester.path))
    n = 128000
    failing = [(7.0 * n, n, 29.0)] * 3  # 7 cycles per HMMA against 6 +- 0.02
    r = _run_tensor_pipe_test(pytester, monkeypatch, [failing, nsight.NcuUnavailable(NCU_ERROR)])
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*FactMismatch: fact hmma_16816_f32_tensor_pipe_cycles on sm_90 does not hold:",
                            "*expected: 6 ± 0.02 cycles",
                            "*flags:    not confirmed: measuring it again failed because Nsight Compute (ncu) "
                            "errored: ncu could not profile the kernels: ==ERR== ERR_NVGPUCTRPERM*"])
    (v,) = json.loads((pytester.path / "r.json").read_text())["facts"]
    assert v["status"] == "FAIL" and v["verdict"].startswith("FAIL (not confirmed: measuring it again failed")


def test_the_tensor_pipe_fact_skips_with_the_reason_where_there_is_no_ncu(pytester, monkeypatch):
    monkeypatch.delenv("GPUPROPS_NCU", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("glob.glob", lambda p: [])
    r = _run_tensor_pipe_test(pytester, monkeypatch, [])
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*SKIPPED*Nsight Compute (ncu) is not on PATH (set GPUPROPS_NCU to its path)*"])


# -- how a run ended ---------------------------------------------------------------------------------

def test_run_status_says_interrupted_and_counts_what_did_not_run():
    run = results.run_status(2, 109, 20)
    assert run == {"status": "finished", "exit_status": 2, "exit": "INTERRUPTED", "interrupted": True,
                   "selected": 109, "finished": 20, "not_run": 89, "complete": False}
    assert results.incomplete_reason(run) == ("interrupted (exit status 2): 20 of 109 selected tests finished, "
                                              "89 did not run")
    assert results.run_status(0, 109, 109)["complete"] and results.incomplete_reason(results.run_status(1, 5, 5)) is None
    assert results.incomplete_reason(results.run_status(1, 10, 3)) == ("3 of 10 selected tests finished, 7 did not "
                                                                       "run (exit status 1 TESTS_FAILED)")
    assert "exit status 3 (INTERNAL_ERROR)" in results.incomplete_reason(results.run_status(3, 0, 0))
    assert "killed" in results.incomplete_reason(results.RUNNING)
    assert "no 'run' entry" in results.incomplete_reason(None)


def test_the_summary_line_of_a_run_cut_short_says_so_before_its_counts():
    v = assertions.Verdict("lds", "sm_90", "PASS", "23", 23.0, "23", "cycles", "m", "s")
    assert report.summary_line([v] * 20, results.run_status(2, 109, 20)) == (
        "gpuprops: INCOMPLETE (interrupted (exit status 2): 20 of 109 selected tests finished, 89 did not run): "
        "20 PASS")
    assert report.summary_line([v], results.run_status(0, 1, 1)) == "gpuprops: 1 PASS"
    assert report.summary_line([], results.RUNNING).startswith("gpuprops: INCOMPLETE (the run had not finished")


def test_the_summary_line_names_the_facts_a_unit_read_beyond_their_population():
    import dataclasses
    v = assertions.Verdict("lds", "sm_90", "PASS", "23", 23.0, "23", "cycles", "m", "s")
    flag = [f"{assertions.BEYOND_UNITS} (22.9 .. 23.1): a new sample"]
    beyond = [dataclasses.replace(v, fact=f"fact_{i}", flags=flag) for i in range(5)]
    assert report.summary_line([v, beyond[0], beyond[0]]) == (
        "gpuprops: 3 PASS; 1 beyond the units measured so far (fact_0: inside the band; tools/unit_values.py lists them)")
    assert report.summary_line([v, *beyond]).endswith(
        "; 5 beyond the units measured so far (fact_0, fact_1, fact_2, ...: inside the band; tools/unit_values.py lists them)")


FACTS = '''
arch = "sm_90"
[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.1
unit = "cycles"
method = "given"
source = "given"
'''


def _fact_tests(n: int, stop_after: int | None, how: str = "") -> str:
    """n GPU fact tests on a fake GPU; test number ``stop_after`` ends the run the way ``how`` says."""
    body = ["import os, signal", "import pytest", "from pytest_gpuprops.measure import Measurement", ""]
    for i in range(n):
        body += ["@pytest.mark.gpu", f"def test_fact_{i:02d}(gpuprops):"]
        if i == stop_after:
            body.append(f"    {how}")
        body += ["    m = Measurement.given('lds', [23.0])", "    m.remeasure = lambda: Measurement.given('lds', [23.0])",
                 "    gpuprops.check('lds_latency_cycles', m, method='given')", ""]
    return "\n".join(body)


def _setup(pytester, tests: str):
    pytester.makeconftest(fake_gpu_conftest("sm_90"))
    pytester.makefile(".toml", facts=FACTS)
    pytester.makepyfile(test_facts=tests)


def test_an_interrupted_run_writes_a_report_that_says_so_and_exits_non_zero(pytester):
    """Ctrl-C after 5 of 12 facts: JSON, Markdown and the terminal say INCOMPLETE with the counts."""
    _setup(pytester, _fact_tests(12, 5, "raise KeyboardInterrupt"))
    r = pytester.runpytest_inprocess("--gpuprops-facts", "facts.toml", "--gpuprops-report", "r.json", "-p",
                                     "no:randomly", no_reraise_ctrlc=True)
    assert r.ret == pytest.ExitCode.INTERRUPTED
    data = json.loads((pytester.path / "r.json").read_text())
    run = data["meta"]["run"]
    assert (run["interrupted"], run["complete"], run["selected"], run["finished"], run["not_run"]) == \
           (True, False, 12, 5, 7)
    assert data["summary"] == {"PASS": 5}
    md = (pytester.path / "r.md").read_text()
    line = ("gpuprops: INCOMPLETE (interrupted (exit status 2): 5 of 12 selected tests finished, 7 did not run): "
            "5 PASS")
    assert line in md.splitlines()
    r.stdout.fnmatch_lines([line])
    merged = _merge(pytester.path / "r.json")
    assert merged[0] == 1 and "1 of 1 node(s) INCOMPLETE" in merged[1] and "interrupted (exit status 2)" in merged[1]


def test_a_whole_run_is_complete_and_merge_counts_it_as_passed(pytester):
    _setup(pytester, _fact_tests(3, None))
    r = pytester.runpytest_inprocess("--gpuprops-facts", "facts.toml", "--gpuprops-report", "r.json")
    assert r.ret == 0
    run = json.loads((pytester.path / "r.json").read_text())["meta"]["run"]
    assert run == results.run_status(0, 3, 3)
    r.stdout.fnmatch_lines(["gpuprops: 3 PASS"])
    code, out = _merge(pytester.path / "r.json")
    assert code == 0 and "INCOMPLETE" not in out


def test_stopping_at_the_first_failure_is_not_a_complete_run(pytester):
    _setup(pytester, _fact_tests(4, 1, "assert False, 'planted'"))
    r = pytester.runpytest_inprocess("--gpuprops-facts", "facts.toml", "--gpuprops-report", "r.json", "-x",
                                     "-p", "no:randomly")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    run = json.loads((pytester.path / "r.json").read_text())["meta"]["run"]
    assert (run["complete"], run["finished"], run["not_run"]) == (False, 2, 2)


def _merge(*paths):
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["merge", *map(str, paths)])
    return code, out.getvalue()


def _child_run(pytester, monkeypatch, how: str):
    """pytest in a child process, ended from inside its sixth test by ``how``."""
    child_processes_outside_mutmut(monkeypatch)
    _setup(pytester, _fact_tests(12, 5, how))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "--gpuprops-facts", "facts.toml", "--gpuprops-report", "r.json"],
                          cwd=pytester.path, capture_output=True, text=True, timeout=120)


def test_sigterm_a_ci_timeout_ends_the_run_as_interrupted_with_its_report(pytester, monkeypatch):
    done = _child_run(pytester, monkeypatch, "os.kill(os.getpid(), signal.SIGTERM)")
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr
    run = json.loads((pytester.path / "r.json").read_text())["meta"]["run"]
    assert (run["interrupted"], run["finished"], run["not_run"]) == (True, 5, 7)
    assert "gpuprops: INCOMPLETE (interrupted" in done.stdout


def test_a_killed_run_leaves_a_report_that_says_it_did_not_finish_never_a_stale_green_one(pytester, monkeypatch):
    """SIGKILL (out of memory, a hard timeout) runs no handler: the report written at start-up stays."""
    (pytester.path / "r.json").write_text(json.dumps({"schema": results.SCHEMA, "facts": [],
                                                      "meta": {"run": results.run_status(0, 1, 1)}}))
    done = _child_run(pytester, monkeypatch, "os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode == -signal.SIGKILL
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["meta"]["run"] == results.RUNNING and data["facts"] == []
    assert "INCOMPLETE (the run had not finished" in (pytester.path / "r.md").read_text()
    code, out = _merge(pytester.path / "r.json")
    assert code == 1 and "it was killed" in out


# -- a GPU asked for and missing --------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["--gpu", "3"], r"--gpu 3 asks for GPU 3, and only 1 GPU\(s\) are visible \(indices 0..0\)"),
    (["--gpuprops-gpus", "0,1"], r"--gpuprops-gpus 0,1 asks for GPU 1, and only 1 GPU\(s\) are visible"),
])
def test_a_gpu_asked_for_by_index_that_is_not_there_fails_the_run(pytester, args, says):
    _setup(pytester, _fact_tests(2, None))
    r = pytester.runpytest_inprocess("--gpuprops-facts", "facts.toml", *args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert __import__("re").search(says, r.stderr.str()), r.stderr.str()
    assert " passed" not in r.stdout.str() and " skipped" not in r.stdout.str()


def test_asking_for_a_gpu_on_a_machine_with_none_fails_and_not_asking_skips_with_the_reason(pytester):
    pytester.makeconftest('''
import pytest
from pytest_gpuprops import devices
_mp = pytest.MonkeyPatch()
def pytest_configure(config):
    _mp.setattr(devices, "gpu_unavailable_reason", lambda index=0: "no CUDA driver or GPU (test)")
    _mp.setattr(devices, "visible_gpu_count", lambda: 0)
def pytest_unconfigure(config):
    _mp.undo()
''')
    pytester.makepyfile(test_facts=_fact_tests(2, None))
    for args in (["--gpu", "0"], ["--gpuprops-gpus", "all"]):
        r = pytester.runpytest_inprocess(*args)
        assert r.ret == pytest.ExitCode.USAGE_ERROR
        assert "asks for a GPU, and none is visible here: no CUDA driver or GPU (test)" in r.stderr.str()
    r = pytester.runpytest_inprocess("-rs")
    assert r.ret == 0
    r.assert_outcomes(skipped=2)
    r.stdout.fnmatch_lines(["*needs a GPU: no CUDA driver or GPU (test)"])


def test_a_malformed_plant_shift_is_one_usage_error_at_start_up(pytester, monkeypatch):
    _setup(pytester, _fact_tests(3, None))
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", "garbage")
    r = pytester.runpytest_inprocess("--gpuprops-facts", "facts.toml")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert r.stderr.str().count("GPUPROPS_PLANT_SHIFT='garbage': expected <gpu index>:<fact>:<delta>") == 1
    assert "Traceback" not in r.stderr.str() and " error" not in r.stdout.str()


# -- the fault runs that held on the device, kept -----------------------------------------------------

def test_a_compile_killed_half_way_leaves_a_cache_the_next_run_uses(tmp_path, monkeypatch):
    """SIGKILL during the first compiles: entries are written to a temporary file and moved into
    place, so the next run finds either no entry or a whole one, and its cubin disassembles."""
    from pytest_gpuprops import sass
    from pytest_gpuprops.compile import compile_cuda
    child_processes_outside_mutmut(monkeypatch)
    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        from pytest_gpuprops.compile import compile_cuda
        for u in range(1, 400):
            compile_cuda({str(KERNELS / 'ffma.cu')!r}, "sm_90", {{"ILP": 1, "UNROLL": u}}, cache_dir={str(cache)!r})
    """)
    child = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(cache.rglob("*"))) < 3:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    for u in (1, 2, 3):
        cubin = compile_cuda(KERNELS / "ffma.cu", "sm_90", {"ILP": 1, "UNROLL": u}, cache_dir=cache).cubin
        ffma = [i for i in sass.Cubin(cubin, "sm_90").instructions("ffma") if i.opcode == "FFMA"]
        assert len(ffma) == u


def test_two_processes_measuring_one_gpu_take_turns(tmp_path, monkeypatch):
    """The per-GPU file lock: two processes' measuring spans on one GPU never overlap."""
    child_processes_outside_mutmut(monkeypatch)
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    script = textwrap.dedent("""
        import sys, time
        from pytest_gpuprops import gpulock
        with gpulock.gpu_lock(0):
            start = time.monotonic()
            time.sleep(0.4)
            print(start, time.monotonic())
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
             for _ in range(2)]
    spans = sorted(tuple(map(float, p.communicate(timeout=60)[0].split())) for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert spans[0][1] <= spans[1][0], f"the two processes measured at the same time: {spans}"


def test_collecting_only_is_not_an_incomplete_run(pytester):
    """`pytest --co` runs nothing on purpose: its exit status stays 0 for any project with the plugin."""
    _setup(pytester, _fact_tests(3, None))
    r = pytester.runpytest_inprocess("--co", "-q")
    assert r.ret == 0 and "INCOMPLETE" not in r.stdout.str()
