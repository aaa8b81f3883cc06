"""The pytest plugin (plugin.py) through pytester, with the GPU layer replaced where a test needs
one: markers and options, their values and start-up path checks by their full messages, record
mode, model checks, the benchmark store, the measuring fixtures, the end-of-run terminal sections
line by line (facts, per GPU, fleet), --gpuprops-compare at session end, --gpuprops-gpus with and
without xdist, plots, the record file and the help text."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import types
from pathlib import Path

import pytest
from gp_testing import FAKE_GPU, Terminal, fake_gpu_conftest, ncu_stand_in
from test_trust import FLAKY_FACT, _on

from pytest_gpuprops import facts, fixture, plugin, summary
from pytest_gpuprops import session as gp_session
from pytest_gpuprops.measure import Measurement

# ----------------------------------------------------------------------------------------------
# markers, options, skips, record and check


FACT_TEST = '''
import pytest
from pytest_gpuprops.measure import Measurement

@pytest.mark.gpu
def test_lds(gpuprops):
    m = Measurement.given("lds", [VALUE, VALUE, VALUE])
    m.remeasure = lambda: Measurement.given("lds", [VALUE, VALUE, VALUE])  # a failure is measured again
    gpuprops.check("lds_latency_cycles", m, method="given")
'''


def test_markers_and_options_are_registered(pytester):
    out = pytester.runpytest("--markers").stdout.str()
    assert "@pytest.mark.gpu" in out and "@pytest.mark.static" in out and "@pytest.mark.arch" in out
    help_ = pytester.runpytest("--help").stdout.str()
    for opt in ("--gpu", "--gpuprops-facts", "--gpuprops-record", "--gpuprops-report", "--gpuprops-plots"):
        assert opt in help_


def test_gpu_tests_skip_with_a_one_line_reason_and_static_tests_run(pytester, monkeypatch):
    from pytest_gpuprops import devices
    monkeypatch.setattr(devices, "gpu_unavailable_reason", lambda index=0: "no CUDA driver or GPU (test)")
    pytester.makepyfile('''
        import pytest
        @pytest.mark.gpu
        def test_needs_gpu():
            raise AssertionError("must not run")
        def test_fixture_needs_gpu(gpuprops):
            raise AssertionError("must not run")
        @pytest.mark.static
        def test_static():
            assert 1 + 1 == 2
    ''')
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(passed=1, skipped=2)
    r.stdout.fnmatch_lines(["*SKIPPED*needs a GPU: no CUDA driver or GPU (test)"])


def test_disabled_plugin_leaves_no_trace(pytester):
    pytester.makepyfile("def test_x(gpuprops):\n    pass\n")
    r = pytester.runpytest("-p", "no:gpuprops")
    r.stdout.fnmatch_lines(["*fixture 'gpuprops' not found*"])
    assert pytester.runpytest("-p", "no:gpuprops", "--gpu", "0").ret == pytest.ExitCode.USAGE_ERROR


def test_record_then_check_then_planted_wrong_value(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    rec = pytester.path / "sm_90.toml"
    r = pytester.runpytest_inprocess("--gpuprops-record", str(rec))
    r.assert_outcomes(passed=1)
    assert "RECORDED" in r.stdout.str() and rec.exists()
    text = rec.read_text()
    assert "value = 23.0" in text and "measured on Fake GPU, driver 580.0, CUDA 13.0" in text
    # the next run accepts the recorded file
    pytester.runpytest_inprocess("--gpuprops-facts", str(rec)).assert_outcomes(passed=1)
    # recording again without --force is refused, with --force it is written
    again = pytester.runpytest_inprocess("--gpuprops-record", str(rec))
    assert "--force" in again.stderr.str() and again.ret == pytest.ExitCode.USAGE_ERROR  # refused at start-up
    # a planted wrong expectation fails and says why
    rec.write_text(text.replace("value = 23.0", "value = 27.6"))
    bad = pytester.runpytest_inprocess("--gpuprops-facts", str(rec))
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*fact lds_latency_cycles on sm_90 does not hold*", "*expected: 27.6*",
                              "*reproduce: pytest test_record_then_check_then_planted_wrong_value.py::test_lds*"])


def test_a_unit_beyond_the_recorded_units_inside_the_band_passes_flagged(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.3"))
    (pytester.path / "sm_90.toml").write_text(
        'arch = "sm_90"\n\n[lds_latency_cycles]\nvalue = 23.0\ntolerance_abs = 0.5\nunits_range = [22.9, 23.1]\n'
        'unit = "cycles"\nmethod = "chase"\nsource = "measured on Fake GPU, driver 580.0, CUDA 13.0, 2026-11-25"\n')
    r = pytester.runpytest_inprocess("--gpuprops-facts", "sm_90.toml", "--gpuprops-report", "rep.json", "-v")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*lds_latency_cycles*PASS (beyond the units measured so far (22.9 .. 23.1)*",
                            "gpuprops: 1 PASS; 1 beyond the units measured so far (lds_latency_cycles: "
                            "inside the band; tools/unit_values.py lists them)"])
    verdict = json.loads((pytester.path / "rep.json").read_text())["facts"][0]
    assert verdict["status"] == "PASS" and verdict["flags"][0].startswith("beyond the units measured so far")


def test_missing_facts_skip_with_how_to_record(pytester):
    pytester.makeconftest(FAKE_GPU.replace('"sm_90"', '"sm_75"'))
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*no facts recorded for sm_75*--gpuprops-record*"])


def test_report_and_junit_properties(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    r = pytester.runpytest_inprocess("--gpuprops-report", "rep.json", "--junitxml", "j.xml")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*gpuprops facts*", "all facts for sm_90*", "*lds_latency_cycles*23 ± 0.25 cycles*PASS*"])
    assert '"status": "PASS"' in (pytester.path / "rep.json").read_text()
    assert 'name="gpuprops:lds_latency_cycles"' in (pytester.path / "j.xml").read_text()


def test_arch_marker_skips_other_archs(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile('''
        import pytest
        @pytest.mark.gpu
        @pytest.mark.arch("sm_86")
        def test_only_86():
            pass
        @pytest.mark.gpu
        @pytest.mark.arch(min="sm_80")
        def test_from_80():
            pass
    ''')
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(passed=1, skipped=1)
    r.stdout.fnmatch_lines(["*fact is defined for sm_86; this GPU is sm_90"])


# ----------------------------------------------------------------------------------------------
# --force, record mode's expected values, model checks, the benchmark store, plots,
# the session metadata and the measuring fixtures


def test_record_again_with_force_overwrites(pytester, monkeypatch):
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # the test file is rewritten between runs
    pytester.makeconftest(FAKE_GPU)
    rec = pytester.path / "sm_90.toml"
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    pytester.runpytest_inprocess("--gpuprops-record", str(rec)).assert_outcomes(passed=1)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "24.5"))
    kept = pytester.runpytest_inprocess("--gpuprops-record", str(rec))
    # refused at start-up, before anything is measured, as a usage error
    assert kept.ret == pytest.ExitCode.USAGE_ERROR
    kept.stderr.fnmatch_lines([f"ERROR: --gpuprops-record {rec} exists; pass --force to overwrite it, or choose "
                               "another path"])
    assert "value = 23.0" in rec.read_text()
    forced = pytester.runpytest_inprocess("--gpuprops-record", str(rec), "--force")
    forced.stdout.fnmatch_lines([f"gpuprops recorded 1 facts to {rec}"])
    text = rec.read_text()
    assert "value = 24.5" in text and "value = 23.0" not in text
    # the reviewed tolerance and method of the fact being checked against (the packaged one) are kept
    from pytest_gpuprops.facts import load_facts
    packaged = load_facts("sm_90")["lds_latency_cycles"]
    assert f"tolerance_abs = {packaged.tolerance_abs}" in text and 'method = "given"' not in text
    assert load_facts("sm_90", rec)["lds_latency_cycles"].method == packaged.method


def test_record_with_nothing_measured_writes_nothing(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile("import pytest\n@pytest.mark.gpu\ndef test_x(gpu):\n    assert gpu.name == 'Fake GPU'\n")
    rec = pytester.path / "r.toml"
    r = pytester.runpytest_inprocess("--gpuprops-record", str(rec))
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["gpuprops record: nothing was measured, no file written"])
    assert not rec.exists()


def test_expected_values_and_model_checks(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile('''
        import pytest
        from pytest_gpuprops.measure import Measurement

        @pytest.mark.gpu
        def test_a_recorded(gpuprops):
            gpuprops.check("lds_latency_cycles", Measurement.given("lds", [21.0] * 3), method="m")
            assert gpuprops.expected("lds_latency_cycles") == 21.0

        @pytest.mark.gpu
        def test_b_model(gpuprops):
            gpuprops.check_model("ffma_model", [("a", 2.0, 2.1), ("b", 4.0, 3.0)], tolerance_rel=0.1, unit="c",
                                 method="m", source="s", remeasure=lambda: [("a", 2.0, 2.1), ("b", 4.0, 3.0)])

        @pytest.mark.gpu
        def test_c_unknown(gpuprops):
            gpuprops.expected("never_recorded_fact")
    ''')
    rec = pytester.path / "sm_90.toml"
    r = pytester.runpytest_inprocess("--gpuprops-record", str(rec), "-rs")
    r.assert_outcomes(passed=1, failed=1, skipped=1)
    r.stdout.fnmatch_lines(["*fact ffma_model on sm_90 does not hold*", "*1/2 cases within ±10% of the model*",
                            "*needs fact never_recorded_fact: record it first*"])
    # checking against the packaged sm_90 facts, expected() is the file's value
    pytester.makepyfile(test_e='''
        import pytest
        from pytest_gpuprops.facts import load_facts

        @pytest.mark.gpu
        def test_e(gpuprops):
            assert gpuprops.expected("lds_latency_cycles") == load_facts("sm_90")["lds_latency_cycles"].value
    ''')
    pytester.runpytest_inprocess("test_e.py").assert_outcomes(passed=1)


def test_min_arch_skip_says_which(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile('''
        import pytest
        @pytest.mark.gpu
        @pytest.mark.arch(min="sm_100")
        def test_new():
            pass
        @pytest.mark.gpu
        @pytest.mark.arch("sm_86", "sm_90")
        def test_listed():
            pass
    ''')
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(passed=1, skipped=1)
    r.stdout.fnmatch_lines(["*fact needs sm_100 or newer; this GPU is sm_90"])


@pytest.mark.parametrize("arch, n", [("sm_90", 90), ("sm_90a", 90), ("sm_100", 100), ("sm_75", 75)])
def test_arch_number(arch, n):
    assert plugin._arch_number(arch) == n


class _Bench:
    """Times its callable with its _timer, as pytest-benchmark's pedantic mode does."""

    def __init__(self):
        self.extra_info = {}
        self._timer = None
        self.deltas = []

    def pedantic(self, fn, rounds, iterations, warmup_rounds):
        assert (iterations, warmup_rounds) == (1, 0)
        for _ in range(rounds):
            t0 = self._timer()
            fn()
            self.deltas.append(self._timer() - t0)


def test_benchmark_store_replays_cycles():
    b = _Bench()
    m = Measurement.given("x", [10.0, 12.5, 11.0], stop_reason="sample cap", sm_clock_mhz=1755.0, unit="cycles")
    info = types.SimpleNamespace(name="Fake GPU", arch="sm_90")
    fixture.store_in_benchmark(b, m, info)
    assert b.deltas == [10.0, 12.5, 11.0]
    assert b.extra_info == {"unit": "cycles", "gpu": "Fake GPU", "arch": "sm_90", "stop_reason": "sample cap",
                            "noise": m.noise, "sm_clock_mhz": 1755.0}


def test_benchmark_json_carries_cycles_and_gpu(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark stands down in xdist workers
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile('''
        import pytest
        from pytest_gpuprops.measure import Measurement

        @pytest.mark.gpu
        def test_lds(gpuprops, benchmark):
            m = Measurement.given("lds", [23.0, 23.1, 22.9])
            m.remeasure = lambda: Measurement.given("lds", [23.0, 23.1, 22.9])
            gpuprops.check("lds_latency_cycles", m, benchmark=benchmark)
    ''')
    out = pytester.path / "b.json"
    pytester.runpytest_inprocess("--benchmark-json", str(out)).assert_outcomes(passed=1)
    data = json.loads(out.read_text())
    gp = data["machine_info"]["gpuprops"]
    assert (gp["gpu"], gp["arch"], gp["driver"], gp["cuda_driver"], gp["cuda_runtime"]) == \
        ("Fake GPU", "sm_90", "580.0", "13.0", "13.0")
    assert gp["compiler"].startswith("nvrtc ") and gp["nvdisasm"]
    (bench,) = data["benchmarks"]
    assert bench["stats"]["min"] == 22.9 and bench["stats"]["max"] == 23.1 and bench["stats"]["rounds"] == 3
    assert bench["extra_info"]["unit"] == "cycles"


def test_session_meta_says_what_is_unavailable(pytester, monkeypatch):
    from pytest_gpuprops import compile as gp_compile
    from pytest_gpuprops import sass
    state = gp_session.GpuPropsState(pytester.parseconfig())  # as pytest_configure makes it; a configured
    meta = state.meta()                                    # config costs ~0.3 s of gc to tear down
    assert meta["compiler"].startswith("nvrtc ") and meta["nvdisasm"] == sass.nvdisasm_version()
    assert "gpu" not in meta and "arch" not in meta and len(meta["date"]) == 19

    def broken(*a, **k):
        raise RuntimeError("no library")
    monkeypatch.setattr(gp_compile, "compiler_version", broken)
    monkeypatch.setattr(sass, "nvdisasm_version", broken)
    meta = state.meta()
    assert meta["compiler"] == "unavailable (no library)" and meta["nvdisasm"] == "unavailable (no library)"


def test_state_reads_the_options(pytester, tmp_path):
    # --gpuprops-facts is checked at start-up now, so it names a real, valid file
    (pytester.path / "f.toml").write_text('arch = "sm_90"\n[x]\nvalue = 1\ntolerance_abs = 0\nunit = "c"\n'
                                          'method = "m"\nsource = "s"\n')
    config = pytester.parseconfig("--gpu", "2", "--gpuprops-noise", "0.05", "--gpuprops-budget", "7",
                                  "--gpuprops-kernels", str(tmp_path), "--gpuprops-facts", "f.toml")
    state = gp_session.GpuPropsState(config)
    assert state.gpu_index == 2 and state.facts_path == "f.toml" and state.kernels_dir == tmp_path
    assert state.gpu_list() == [2] and state.default_index() == 2  # one GPU, the one --gpu names
    assert state.stop.noise_target == 0.05 and state.stop.time_budget_s == 7.0
    assert state.stop.min_samples == 5 and state.stop.max_samples == 100
    dflt = gp_session.GpuPropsState(pytester.parseconfig())
    assert dflt.kernels_dir == pytester.path / "kernels" and dflt.gpu_index == 0 and dflt.stop.noise_target == 0.01


FAKE_RUNNER = FAKE_GPU + '''
from pathlib import Path
from pytest_gpuprops import driver_launch, plots

class FakeRunner:
    def __init__(self, info, kernels_dir, *, stop, cache_dir=None):
        self.info, self.kernels_dir, self.stop, self.cache_dir = info, kernels_dir, stop, cache_dir

    def measure(self, name, spec, **kw):
        if spec.kernel == "broken":
            raise driver_launch.KernelLaunchError("planted launch failure")
        m = measure.Measurement.given(name, [23.0] * 3)
        m.remeasure = lambda: self.measure(name, spec, **kw)  # as the real Runner: fresh launches
        return m

def pytest_sessionstart(session):
    _mp.setattr(measure, "Runner", FakeRunner)
    _mp.setattr(plots, "plot_bandwidth", lambda vals, peak, path, title: (Path(path).write_text(repr(vals)), path)[1])
'''

FACTS = '''arch = "sm_90"
[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.5
unit = "cycles"
method = "m"
source = "s"

[dep]
kind = "static"
by_compiler = { "nvrtc 13.5" = 24 }
unit = "cycles"
method = "sass"
source = "compiled"
'''


def test_measuring_static_checks_ncu_and_plots_through_the_fixtures(pytester, monkeypatch):
    pytester.makeconftest(FAKE_RUNNER)
    (pytester.path / "facts.toml").write_text(FACTS)
    pytester.makepyfile('''
        import pytest
        from pytest_gpuprops.kernel_spec import KernelSpec

        @pytest.mark.gpu
        def test_measured(gpuprops, gpu_runner, gpu_facts):
            assert gpu_runner is gpuprops.runner and gpu_runner.stop.noise_target == 0.02
            assert gpu_runner.stop.time_budget_s == 3.0 and gpu_runner.cache_dir == "cachedir"
            assert gpuprops.gpu.name == "Fake GPU" and sorted(gpu_facts) == ["dep", "lds_latency_cycles"]
            gpuprops.check("lds_latency_cycles", gpuprops.measure("lds", KernelSpec("x.cu", "k"), divisor=1))

        @pytest.mark.gpu
        def test_broken(gpuprops):
            gpuprops.measure("x", KernelSpec("x.cu", "broken"), divisor=1)

        @pytest.mark.gpu
        def test_plots(gpuprops):
            gpuprops.plot_point("smem_bandwidth", label="STS", bytes_per_cycle=100.0)

        def test_static_pass(gpuprops_static):
            assert gpuprops_static.check("sm_90", "dep", 24, "nvrtc 13.5").status == "PASS"

        def test_static_fail(gpuprops_static):
            gpuprops_static.check("sm_90", "dep", 23, "nvrtc 13.5")

        def test_static_missing(gpuprops_static):
            gpuprops_static.check("sm_90", "not_there", 1, "nvrtc 13.5")

        @pytest.mark.gpu
        def test_ncu(ncu):
            assert ncu([KernelSpec("x.cu", "k"), KernelSpec("x.cu", "k2")], ["a"]) == [{"a": 1.0}, {"a": 2.0}]
            ncu([KernelSpec("x.cu", "gone")], ["a"])
    ''')
    from pytest_gpuprops import nsight

    def fake_ncu(runner, specs, metrics):
        """ncu_metrics takes a list of specs (one ncu process) and returns one dict per spec."""
        assert type(runner).__name__ == "FakeRunner" and metrics == ["a"]
        if any(s.kernel == "gone" for s in specs):
            raise nsight.NcuUnavailable("counters gone")
        return [{"a": float(n)} for n, _ in enumerate(specs, 1)]
    monkeypatch.setattr(nsight, "ncu_metrics", fake_ncu)
    monkeypatch.setenv("GPUPROPS_NCU", ncu_stand_in(pytester.path))
    r = pytester.runpytest_inprocess("--gpuprops-noise", "0.02", "--gpuprops-budget", "3", "--gpuprops-cache",
                                     "cachedir", "--gpuprops-facts", "facts.toml", "--gpuprops-plots", "plots",
                                     "--junitxml", "j.xml", "-rs", "--gpuprops-report", "r.json")
    r.assert_outcomes(passed=3, failed=2, skipped=2)
    # a plot point names the GPU it was measured on (a node's run keeps every GPU's points in one list)
    import json
    points = json.loads((pytester.path / "r.json").read_text())["plot_points"]["smem_bandwidth"]
    assert points == [{"label": "STS", "bytes_per_cycle": 100.0, "gpu": points[0]["gpu"]}] and points[0]["gpu"]
    out = r.stdout.str()
    assert "planted launch failure" in out and "fact dep on sm_90 does not hold" in out
    assert "no fact 'not_there' for sm_90" in out and "counters gone" in out
    assert "gpuprops plot: plots/smem_bandwidth.png" in out
    assert (pytester.path / "plots" / "smem_bandwidth.png").read_text() == "{'STS': 100.0}"
    junit = (pytester.path / "j.xml").read_text()
    assert 'name="gpuprops:dep" value="24 cycles PASS"' in junit
    assert 'name="gpuprops:lds_latency_cycles" value="23.0 cycles PASS"' in junit
    # without ncu the fixture skips with the reason
    monkeypatch.delenv("GPUPROPS_NCU")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("glob.glob", lambda p: [])
    r = pytester.runpytest_inprocess("-k", "test_ncu", "-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*Nsight Compute (ncu) is not on PATH*"])


def test_an_ncu_profile_started_ahead_is_the_one_its_test_gets_once(pytester, monkeypatch):
    """hwtests/conftest.py starts a selected test's ncu profile before the tests run
    (session_state(config).start_ncu); the ncu fixture hands that profile to the test that asks for
    those specs and metrics, once: asking again profiles again."""
    pytester.makeconftest(FAKE_RUNNER + """
import pytest
@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    from pytest_gpuprops import plugin
    from pytest_gpuprops.kernel_spec import KernelSpec
    assert plugin.session_state(session.config).start_ncu([KernelSpec("x.cu", "k")], ["a"])
""")
    pytester.makepyfile('''
        import pytest
        from pytest_gpuprops.kernel_spec import KernelSpec

        @pytest.mark.gpu
        def test_ncu(ncu):
            assert ncu([KernelSpec("x.cu", "k")], ["a"]) == [{"a": "ahead"}]
            assert ncu([KernelSpec("x.cu", "k")], ["a"]) == [{"a": "again"}]
            assert ncu([KernelSpec("x.cu", "k2")], ["a"]) == [{"a": "again"}]
    ''')
    from pytest_gpuprops import nsight
    monkeypatch.setattr(nsight, "_ncu_start", lambda runner, specs, metrics: ["ncu"])
    monkeypatch.setattr(nsight, "_ncu_finish", lambda cmd, metrics, n, timeout_s, lock_gpu=None: [{"a": "ahead"}] * n)
    monkeypatch.setattr(nsight, "ncu_metrics", lambda runner, specs, metrics: [{"a": "again"}] * len(specs))
    monkeypatch.setenv("GPUPROPS_NCU", ncu_stand_in(pytester.path))
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(pytester.path))
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_a_gpu_tests_kernel_time_and_launches_are_junit_properties(pytester):
    """The runner's timed launches during a test (their kernel seconds and count) become that test's
    gpu_busy_s and gpu_launches properties; a test that launches nothing gets neither."""
    pytester.makeconftest(FAKE_RUNNER.replace("""        m = measure.Measurement.given(name, [23.0] * 3)""",
                                              """        self.gpu_busy_s = getattr(self, "gpu_busy_s", 0.0) + 0.25
        self.launches = getattr(self, "launches", 0) + 6
        m = measure.Measurement.given(name, [23.0] * 3)"""))
    pytester.makepyfile('''
        import pytest
        from pytest_gpuprops.kernel_spec import KernelSpec

        @pytest.mark.gpu
        def test_twice(gpuprops):
            gpuprops.measure("a", KernelSpec("x.cu", "k"), divisor=1)
            gpuprops.measure("b", KernelSpec("x.cu", "k"), divisor=1)

        @pytest.mark.gpu
        def test_none(gpuprops):
            pass
    ''')
    pytester.runpytest_inprocess("--junitxml", "j.xml").assert_outcomes(passed=2)
    import xml.etree.ElementTree as ET
    props = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in ET.parse(pytester.path / "j.xml").getroot().iter("testcase")}
    assert props["test_twice"] == {"gpu_busy_s": "0.5", "gpu_launches": "12"}
    assert props["test_none"] == {}


def test_no_facts_for_the_arch(pytester):
    pytester.makeconftest(FAKE_GPU.replace('"sm_90"', '"sm_75"'))
    pytester.makepyfile('''
        import pytest
        @pytest.mark.gpu
        def test_fact(gpuprops):
            gpuprops.fact("x")
    ''')
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*no facts recorded for sm_75*"])
    rec = pytester.runpytest_inprocess("--gpuprops-record", "r.toml")  # record mode: no facts yet is fine
    rec.assert_outcomes(passed=1)


def test_a_gpu_that_fails_to_describe_itself_is_a_skip(pytester):
    # the fake GPU's conftest, with gpu_info replaced after it is set up (whatever its text looks like)
    conftest = FAKE_GPU.replace("def pytest_unconfigure", '''def _broken(index=0):
    raise devices.GpuUnavailable("properties unreadable")

_fake_configure = pytest_configure

def pytest_configure(config):
    _fake_configure(config)
    _mp.setattr(devices, "gpu_info", _broken)

def pytest_unconfigure''')
    assert conftest != FAKE_GPU
    pytester.makeconftest(conftest)
    pytester.makepyfile("import pytest\n@pytest.mark.gpu\ndef test_x():\n    pass\n")
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*needs a GPU: properties unreadable"])


def test_plots_without_matplotlib_is_a_usage_error(pytester, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = pytester.runpytest_inprocess("--gpuprops-plots", "p")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--gpuprops-plots needs matplotlib*"])


FAKE_GPUS = fake_gpu_conftest(count=2)

# the separators as pytest writes them 80 columns wide (the `columns80` fixture pins the width)
FACTS_SEP = "=" * 32 + " gpuprops facts " + "=" * 32
PER_GPU_SEP = "-" * 35 + " per GPU " + "-" * 36
FLEET_SEP = "=" * 11 + " gpuprops fleet: outliers, moved facts, units that differ " + "=" * 11


@pytest.fixture
def columns80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


# -- option values ---------------------------------------------------------------------------


@pytest.mark.parametrize("parse, text, value", [
    (plugin._gpu_index, "0", 0), (plugin._gpu_index, "3", 3),
    (plugin._noise, "0.05", 0.05), (plugin._noise, "0.999", 0.999),
    (plugin._budget, "2.5", 2.5), (plugin._budget, "600", 600.0),
])
def test_option_values_in_range_are_kept(parse, text, value):
    got = parse(text)
    assert got == value and type(got) is type(value)


GPU_INDEX = "takes a CUDA device index 0, 1, ... (as nvidia-smi numbers them), not "
NOISE = "takes the relative standard deviation that ends a measurement, a number between 0 and 1 (0.01 = 1 %), not "
BUDGET = "takes the seconds one measurement may keep repeating, a number > 0 (default 2), not "


@pytest.mark.parametrize("parse, text, message", [
    (plugin._gpu_index, "-1", GPU_INDEX + "'-1'"),
    (plugin._gpu_index, "gpu1", GPU_INDEX + "'gpu1'"),
    (plugin._gpu_index, "1.5", GPU_INDEX + "'1.5'"),
    (plugin._noise, "0", NOISE + "'0'"),
    (plugin._noise, "1", NOISE + "'1'"),
    (plugin._noise, "1%", NOISE + "'1%'"),
    (plugin._budget, "0", BUDGET + "'0'"),
    (plugin._budget, "inf", BUDGET + "'inf'"),
    (plugin._budget, "-2", BUDGET + "'-2'"),
    (plugin._budget, "two", BUDGET + "'two'"),
])
def test_option_values_out_of_range_or_unreadable_get_one_message(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        parse(text)
    assert str(exc.value) == message


# -- which GPU a test runs on --------------------------------------------------------------------


def test_item_gpu_is_the_gpu_parameter_of_the_test(pytester):
    items = pytester.getitems('''
        import pytest

        @pytest.mark.parametrize("gpuprops_gpu_index", [1, 0])
        def test_on_gpu(gpuprops_gpu_index):
            pass

        @pytest.mark.parametrize("n", [7])
        def test_other_parameter(n):
            pass

        def test_plain():
            pass
    ''')
    assert [(i.name, plugin._item_gpu(i)) for i in items] == [
        ("test_on_gpu[1]", 1), ("test_on_gpu[0]", 0), ("test_other_parameter[7]", None), ("test_plain", None)]


MIXED_ARCH_GPUS = FAKE_GPUS.replace('"sm_90", 132', '"sm_90" if index == 0 else "sm_80", 132')


def test_the_arch_marker_is_judged_on_the_gpu_the_test_runs_on(pytester):
    assert MIXED_ARCH_GPUS != FAKE_GPUS
    pytester.makeconftest(MIXED_ARCH_GPUS)  # GPU 0 is sm_90, GPU 1 is sm_80
    pytester.makepyfile('''
        import pytest

        @pytest.mark.gpu
        @pytest.mark.arch("sm_90")
        def test_hopper_only(gpu):
            assert gpu.arch == "sm_90"

        @pytest.mark.gpu
        @pytest.mark.arch(min="sm_86")
        def test_from_86(gpu):
            assert gpu.arch == "sm_90"
    ''')
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all")
    r.assert_outcomes(passed=2, skipped=2)  # each test passes on GPU 0 and is skipped on GPU 1, saying why
    lines = r.stdout.lines
    # the table counts the skipped tests per reason; -v lists each, with its GPU
    assert "  1 skipped: fact is defined for sm_90; this GPU is sm_80" in lines
    assert "  1 skipped: fact needs sm_86 or newer; this GPU is sm_80" in lines
    assert "gpuprops: 2 SKIPPED" in lines
    lines = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "-v").stdout.lines
    assert "test_hopper_only[gpu1]  -       -           fact is defined for sm_90; this GPU is sm_80  SKIPPED" in lines
    assert "test_from_86[gpu1]      -       -           fact needs sm_86 or newer; this GPU is sm_80  SKIPPED" in lines
    assert "gpuprops: 2 SKIPPED" in lines


# -- the end of the run: terminal sections -------------------------------------------------------


def test_one_gpu_gets_the_facts_table_and_the_fleet_note_but_no_per_gpu_table(pytester, columns80):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    r = pytester.runpytest_inprocess()
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([
        FACTS_SEP,
        "all facts for sm_90; -v shows noise, n, attempts, whole verdicts and each skipped test",
        "  fact                expected          measured  verdict",
        "  ------------------  ----------------  --------  -------",
        "one gpu gets the facts table and the fleet note but no per gpu table — 1: 1 PASS",
        "  lds_latency_cycles  23 ± 0.25 cycles  23.000    PASS",
        "gpuprops: 1 PASS",
        "gpuprops outlier check: not run (1 GPU measured; it needs two or more)",
    ], consecutive=True)
    assert "per GPU" not in r.stdout.str() and "gpuprops fleet" not in r.stdout.str()
    # -v: the whole table, the measurement's spread and n in its cell
    r = pytester.runpytest_inprocess("-v")
    r.stdout.fnmatch_lines([
        FACTS_SEP,
        "fact                arch    expected          measured              verdict",
        "------------------  ------  ----------------  --------------------  ---------",
        "lds_latency_cycles  sm_90   23 ± 0.25 cycles  23.000 (±0.00%, n=3)  PASS",
        "gpuprops: 1 PASS",
        "gpuprops outlier check: not run (1 GPU measured; it needs two or more)",
    ], consecutive=True)


def test_compile_time_facts_alone_print_no_fleet_note(pytester, columns80):
    pytester.makepyfile('''
        import pytest

        @pytest.mark.static
        def test_dependent_spacing(gpuprops_static):
            gpuprops_static.check("sm_90", "hmma_16816_f32_dependent_issue_cycles", 24, "nvrtc 13.5")
    ''')
    r = pytester.runpytest_inprocess()
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([FACTS_SEP, "*hmma_16816_f32_dependent_issue_cycles*PASS", "gpuprops: 1 PASS"])
    assert "outlier check" not in r.stdout.str() and "per GPU" not in r.stdout.str()


def test_two_gpus_list_per_gpu_then_outliers_and_moved_facts_both_in_the_fleet(pytester, columns80, monkeypatch):
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # the test file is rewritten between runs
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0))
    pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--gpuprops-report", "old.json").assert_outcomes(passed=2)
    # now GPU 1 reads 23.2: off GPU 0 (22.8) by 0.4 > 0.25, and moved by 0.4 since old.json
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0.4))
    # both hold the band and are 1.8 % apart: the units' own spread, not red; GPU 1 moved: red
    after_the_facts_table = [
        "gpuprops: 1 MOVED, 2 PASS, 2 UNITS DIFFER",
        PER_GPU_SEP,
        "fact                test      node1:gpu0 Fake GPU (GPU-00000000)    node1:gpu1 Fake GPU (GPU-00000001)",
        "------------------  --------  ------------------------------------  ------------------------------------*",
        "lds_latency_cycles  test_lds  22.800 PASS                           23.200 PASS (off its unit's baseline in 3 "
        "of 3 measurements (23.2, 23.2, 23.2 cycles): the median judged)",
        "gpuprops outlier check: 2 GPUs, 1 facts compared, 0 outlier(s), 2 fact(s) where units differ inside the "
        "SKU's band (not red)",
        "gpuprops baseline: compared with old.json",
        "gpuprops baseline: GPU-00000000: this run stored as *; accepted: finished with nothing red on this unit",
        "gpuprops baseline: GPU-00000001: this run stored as *; not accepted: 1 red verdict(s) on this unit "
        "(lds_latency_cycles MOVED), which keep their earlier baselines (its passing readings serve for the other "
        "facts); once understood, rerun with --gpuprops-baseline-accept to make the whole run the baseline",
        FLEET_SEP,
        "fact * expected * measured * verdict",
        "---*",
        "lds_latency_cycles  sm_90   peer median 23.200 ± 0.25 cycles * 22.800 cycles on node1:gpu0 Fake GPU "
        "(GPU-00000000) (1.8% off); peers: 23.200  UNITS DIFFER (2 GPUs compared) (inside the SKU's band, under 5% "
        "apart: the units' own spread)",
        "lds_latency_cycles  sm_90   peer median 22.800 ± 0.25 cycles * 23.200 cycles on node1:gpu1 Fake GPU "
        "(GPU-00000001) (1.8% off); peers: 22.800  UNITS DIFFER (2 GPUs compared) (inside the SKU's band, under 5% "
        "apart: the units' own spread)",
        "lds_latency_cycles  sm_90   baseline 22.800 ± 0.228 cycles (same-unit band 1.00%)"
        "  23.200 cycles on node1:gpu1 Fake GPU (GPU-00000001) (moved +0.400, +1.75%) * MOVED",
    ]
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--gpuprops-compare", "old.json")
    r.assert_outcomes(passed=2)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines([
        FACTS_SEP,
        "all facts for sm_90; -v shows noise, n, attempts, whole verdicts and each skipped test",
        "  fact                expected          measured  verdict",
        "  ------------------  ----------------  --------  -------*",
        "two gpus list per gpu then outliers and moved facts both in the fleet — 2: 2 PASS",
        "  lds_latency_cycles  23 ± 0.25 cycles  22.800    PASS",
        # GPU 1's reading moved off its baseline: measured twice more before the run's end judged the median
        "  lds_latency_cycles  23 ± 0.25 cycles  23.200    PASS (off its unit's baseline in 3 of 3 measurements*",
        *after_the_facts_table,
    ], consecutive=True)
    # -v: the whole facts table, the measurement's spread and n in its cell
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--gpuprops-compare", "old.json", "-v")
    r.stdout.fnmatch_lines([
        FACTS_SEP,
        "fact                arch    expected          measured                                  verdict",
        "------------------  ------  ----------------  ----------------------------------------  ---------*",
        "lds_latency_cycles  sm_90   23 ± 0.25 cycles  22.800 (±0.00%, n=3)                      PASS",
        "lds_latency_cycles  sm_90   23 ± 0.25 cycles  23.200 (±0.00%, n=3) then 23.200, 23.200  PASS (off its unit's "
        "baseline in 3 of 3 measurements (23.2, 23.2, 23.2 cycles): the median judged)",
        *after_the_facts_table,
    ], consecutive=True)


def test_the_fleet_separator_is_red(pytester, columns80, monkeypatch):
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # the test file is rewritten between runs
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0))
    assert pytester.runpytest_inprocess("--gpuprops-gpus", "all").ret == pytest.ExitCode.OK  # the units' baselines
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0.4))  # GPU 1 moved since its own last run
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--color=yes")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    assert "\x1b[31m" + FLEET_SEP + "\x1b[0m" in r.stdout.lines
    assert FACTS_SEP in r.stdout.lines  # the facts separator is plain


def test_a_compare_report_gone_by_the_end_of_the_run_is_a_usage_error(pytester):
    (pytester.path / "old.json").write_text('{"facts": []}')  # a valid (empty) report at start-up ...
    pytester.makepyfile('''
        import os

        def test_removes_the_baseline():
            os.remove("old.json")  # ... gone when the session finishes
    ''')
    r = pytester.runpytest_inprocess("--gpuprops-compare", "old.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["ERROR: --gpuprops-compare: cannot read report old.json: No such file or directory"])


def test_the_record_file_names_the_gpu_it_was_measured_on(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    r = pytester.runpytest_inprocess("--gpuprops-record", "rec.toml")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["gpuprops recorded 1 facts to rec.toml"])
    assert (pytester.path / "rec.toml").read_text().splitlines()[:5] == [
        'arch = "sm_90"', 'gpu = "Fake GPU"', "", "[lds_latency_cycles]", "value = 23.0"]


# -- xdist workers leave the end of the run to the controller -----------------------------------


def _state_with_two_gpus_off_each_other(pytester, *args):
    config = pytester.parseconfig(*args)
    state = config.stash[plugin._STATE] = gp_session.GpuPropsState(config)
    state.results.verdicts = [_on(0, 22.8), _on(1, 24.2)]  # outliers (6 % apart), were they judged
    return config, state


def test_an_xdist_worker_judges_no_fleet_and_reads_no_baseline(pytester):
    (pytester.path / "old.json").write_text('{"facts": []}')
    config, state = _state_with_two_gpus_off_each_other(pytester, "--gpuprops-compare", "old.json")
    (pytester.path / "old.json").unlink()  # a worker never reads it: no usage error from a worker
    state.worker_id = "gw0"
    session = types.SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)
    plugin.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == pytest.ExitCode.OK and state.fleet == [] and state.fleet_note == ""
    # the controller (no worker id) judges the same verdicts: two outliers, the run fails
    state.worker_id = None
    state.compare_path, state.baseline_choice = None, "last"
    plugin.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert [(v.status, v.gpu["index"]) for v in state.fleet] == [("OUTLIER", 0), ("OUTLIER", 1)]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED


def test_an_xdist_worker_writes_no_terminal_summary(pytester):
    config, state = _state_with_two_gpus_off_each_other(pytester)
    state.fleet_note = "outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)"
    state.worker_id = "gw1"
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert tr.written == []
    state.worker_id = None  # the controller writes the sections
    plugin.pytest_terminal_summary(tr, 0, config)
    assert [w for w in tr.written if isinstance(w, tuple)] == [("=", "gpuprops facts"), ("-", "per GPU")]
    assert "gpuprops outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)" in tr.written


# -- arch names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, number", [("sm_90a", 90), ("sm_100", 100), ("sm_120a", 120), ("compute_86", 86)])
def test_arch_number_reads_the_digits_after_the_underscore(arch, number):
    assert plugin._arch_number(arch) == number


# -- --gpuprops-gpus without xdist: one GPU after another ------------------------------------------

TWO_TESTS = '''
import pytest

@pytest.mark.gpu
def test_a(gpuprops):
    pass

@pytest.mark.gpu
def test_b(gpuprops):
    pass
'''


def test_without_xdist_every_gpu_test_runs_once_per_gpu_one_gpu_after_another(pytester):
    pytester.makeconftest(fake_gpu_conftest(count=2))
    pytester.makepyfile(test_order=TWO_TESTS)
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "-v", "-p", "no:randomly")
    r.assert_outcomes(passed=4)
    ran = [ln.split(" ")[0] for ln in r.outlines if ln.startswith("test_order.py::")]
    assert ran == ["test_order.py::test_a[gpu0]", "test_order.py::test_b[gpu0]",
                   "test_order.py::test_a[gpu1]", "test_order.py::test_b[gpu1]"]


def test_one_gpu_listed_leaves_the_test_ids_as_they_are(pytester):
    pytester.makeconftest(fake_gpu_conftest(count=2))
    pytester.makepyfile(test_order=TWO_TESTS)
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "1", "-v", "-p", "no:randomly")
    r.assert_outcomes(passed=2)
    assert [ln.split(" ")[0] for ln in r.outlines if ln.startswith("test_order.py::")] == [
        "test_order.py::test_a", "test_order.py::test_b"]


# -- record mode at the end of the run -------------------------------------------------------------

def _recording_state(pytester, path):
    """A session state as pytest_configure makes it, recording to ``path`` (set here: the option
    itself asks for a GPU at start-up)."""
    config = pytester.parseconfig()
    state = config.stash[plugin._STATE] = gp_session.GpuPropsState(config)
    state.record_path = str(path)
    return config, state


def test_record_mode_that_measured_nothing_says_so_in_yellow(pytester, tmp_path):
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert tr.lines == [("gpuprops record: nothing was measured, no file written", ["yellow"])]
    assert not (tmp_path / "r.toml").exists()


def test_a_record_that_cannot_be_written_is_said_in_red(pytester, tmp_path):
    (tmp_path / "r.toml").write_text("made during the run")
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    lds = facts.Fact(name="lds", arch="sm_90", unit="cycles", method="m", source="s", value=23.0)
    state.results.recorded["lds"] = lds
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert (f"gpuprops record: {tmp_path / 'r.toml'} exists; pass --force to overwrite it (or choose another path)",
            ["red"]) in tr.lines
    assert (tmp_path / "r.toml").read_text() == "made during the run"


def test_a_controller_that_measured_nothing_itself_names_the_gpu_of_the_workers_verdicts(pytester, tmp_path):
    """Under xdist the controller has no GPU of its own; the record's GPU is the one the verdicts came from."""
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    state.results.recorded["lds"] = facts.Fact(name="lds", arch="sm_90", unit="cycles", method="m", source="s",
                                               value=23.0)
    state.results.verdicts = [dataclasses.replace(_on(0, 23.0), gpu={**_on(0, 23.0).gpu, "name": "NVIDIA H200"})]
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert (f"gpuprops recorded 1 facts to {tmp_path / 'r.toml'}", []) in tr.lines
    assert (tmp_path / "r.toml").read_text().splitlines()[:2] == ['arch = "sm_90"', 'gpu = "NVIDIA H200"']


# -- option parsers, made afresh (the module's own are made at import) ------------------------------

def test_an_option_parser_keeps_accepted_values_and_refuses_the_rest_in_one_message():
    import argparse
    even = plugin._option_number(int, lambda v: v % 2 == 0, "an even number")
    assert even("4") == 4 and even("0") == 0
    for text in ("3", "four", ""):
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            even(text)
        assert str(exc.value) == f"takes an even number, not {text!r}"
    zero_ok = plugin._option_number(float, lambda v: v >= 0, "a number >= 0")
    assert zero_ok("0") == 0.0  # a value that is false is still a value


# -- which tests are parametrized per GPU --------------------------------------------------------------

class _Metafunc:
    def __init__(self, config, fixturenames):
        self.config, self.fixturenames, self.calls = config, fixturenames, []

    def parametrize(self, *args, **kw):
        self.calls.append((args, kw))


@pytest.mark.parametrize("worker, fixtures, parametrized", [
    (None, ["gpuprops_gpu_index"], True),
    ("gw0", ["gpuprops_gpu_index"], False),  # an xdist worker measures its own GPU: the tests stay as they are
    (None, ["tmp_path"], False),  # not a GPU test
])
def test_only_gpu_tests_outside_xdist_are_run_once_per_gpu(pytester, worker, fixtures, parametrized):
    config = pytester.parseconfig("--gpuprops-gpus", "0,1")
    state = config.stash[plugin._STATE] = gp_session.GpuPropsState(config)
    state.worker_id = worker
    mf = _Metafunc(config, fixtures)
    plugin.pytest_generate_tests(mf)
    assert bool(mf.calls) is parametrized
    if parametrized:
        assert mf.calls[0][0] == ("gpuprops_gpu_index", [0, 1]) and mf.calls[0][1]["ids"] == ["gpu0", "gpu1"]


def test_plot_points_without_a_plots_folder_write_nothing(pytester, tmp_path, monkeypatch):
    config = pytester.parseconfig()
    state = config.stash[plugin._STATE] = gp_session.GpuPropsState(config)
    state.results.plot_points = {"smem_bandwidth": [{"label": "LDS", "bytes_per_cycle": 128.0}]}
    monkeypatch.setattr(summary, "write_plots", lambda *a: pytest.fail("plots written without --gpuprops-plots"))
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert tr.lines == []


def test_a_record_with_no_gpu_known_anywhere_says_so_in_its_header(pytester, tmp_path):
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    state.results.recorded["lds"] = facts.Fact(name="lds", arch="sm_90", unit="cycles", method="m", source="s",
                                               value=23.0)
    plugin.pytest_terminal_summary(Terminal(), 0, config)
    assert (tmp_path / "r.toml").read_text().splitlines()[:2] == ['arch = "sm_90"', 'gpu = "?"']


def test_a_kernels_option_that_is_not_a_folder_is_a_usage_error(pytester):
    (pytester.path / "k.cu").write_text("")
    r = pytester.runpytest_inprocess("--gpuprops-kernels", "k.cu")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["ERROR: --gpuprops-kernels k.cu is not a folder; give the folder that holds the kernel "
                            "sources (the repository's kernels/)"])


@pytest.mark.parametrize("env, make, message", [
    ("GPUPROPS_LOCK_DIR", "file", "GPUPROPS_LOCK_DIR={p} is not a folder; point it at a folder every process "
     "measuring on this machine can write (default: the system temp folder)"),
    ("GPUPROPS_NVDISASM", "file", "GPUPROPS_NVDISASM={p} is not an executable file (no permission to execute it); "
     "point it at nvdisasm, or unset it to use the one from pip (nvidia-cuda-nvdisasm)"),
    ("GPUPROPS_NVDISASM", "folder", "GPUPROPS_NVDISASM={p} is not an executable file (a folder); point it at "
     "nvdisasm, or unset it to use the one from pip (nvidia-cuda-nvdisasm)"),
])
def test_an_environment_path_that_is_not_what_it_must_be_is_a_usage_error(pytester, monkeypatch, env, make, message):
    p = pytester.path / "thing"
    if make == "file":
        p.write_text("not a program")  # mode 0644: not executable, not a folder
    else:
        p.mkdir()
        p.chmod(0o755)  # executable, but a folder
    monkeypatch.setenv(env, str(p))
    r = pytester.runpytest_inprocess()
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message.format(p=p)}" in r.stderr.str()


def test_the_markdown_beside_the_report_is_checked_too(pytester):
    (pytester.path / "r.md").mkdir()
    r = pytester.runpytest_inprocess("--gpuprops-report", "r.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --gpuprops-report r.md is a folder; give a file name (e.g. r.md/gpuprops.json)" in r.stderr.str()


def test_a_compare_report_that_cannot_be_read_is_refused_at_start_up(pytester):
    r = pytester.runpytest_inprocess("--gpuprops-compare", "missing.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --gpuprops-compare: cannot read report missing.json: No such file or directory" in r.stderr.str()


def test_record_mode_asks_about_the_gpu_it_would_measure_and_refuses_without_it(pytester, monkeypatch):
    from pytest_gpuprops import devices
    monkeypatch.setattr(devices, "gpu_unavailable_reason", lambda index=0: f"GPU {index} is planted away")
    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 2)  # GPU 1 is visible, only not usable
    r = pytester.runpytest_inprocess("--gpu", "1", "--gpuprops-record", "r.toml")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --gpuprops-record measures facts on a GPU, and none can be used here: GPU 1 is planted away. "
            "Nothing would be recorded; run it on the GPU whose facts you want") in r.stderr.str()
    assert not (pytester.path / "r.toml").exists()


def test_the_options_are_listed_under_their_own_heading_in_help(pytester):
    r = pytester.runpytest_inprocess("--help")
    lines = r.stdout.lines
    head = lines.index("GPU micro-architecture facts:")
    assert lines[head + 1].lstrip().startswith("--gpu=INDEX")


GOLDEN_OPTIONS = Path(__file__).parent / "golden" / "plugin_help.txt"


def _options_help(pytester, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    lines = pytester.runpytest_inprocess("--help").stdout.lines
    head = lines.index("GPU micro-architecture facts:")
    end = next(i for i in range(head + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    return "\n".join(lines[head:end]).rstrip() + "\n"


def test_the_options_help_is_the_golden_text(pytester, monkeypatch):
    """Every option's help as `pytest --help` prints it, 100 columns wide. After changing an option on
    purpose, write the section again and review the diff:
    COLUMNS=100 pytest --help | sed -n '/^GPU micro-architecture facts:/,/^$/p' | sed '$d' > tests/golden/plugin_help.txt
    """
    if not (3, 11) <= sys.version_info[:2] <= (3, 12):
        pytest.skip("tests/golden/plugin_help.txt is argparse's layout of Python 3.11/3.12")
    assert _help_words(_options_help(pytester, monkeypatch)) == _help_words(GOLDEN_OPTIONS.read_text())


def _help_words(text: str) -> str:
    """The help's words in order, whatever the line breaks: pytest 9.0 breaks a long help line after a hyphen
    ("same-" / "unit band"), 9.2 before the hyphenated word, so the same help wraps two ways."""
    return " ".join(re.sub(r"(?<=\w)-\n\s*", "-", text).split())


def test_help_words_join_a_line_broken_after_a_hyphen_and_keep_every_word():
    assert _help_words("more than its same-\n      unit band is MOVED") == "more than its same-unit band is MOVED"
    assert _help_words("more than its\n      same-unit band is MOVED") == "more than its same-unit band is MOVED"
    assert _help_words("a band\n  is MOVED") != _help_words("a band is not MOVED")
