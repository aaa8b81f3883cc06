"""The plugin through pytester, with the GPU layer replaced where a test needs one."""

import pytest
from gp_testing import FAKE_GPU  # noqa: F401 (test_oracle_plugin imports it from here)

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
    from pytest_gpuprops import measure
    monkeypatch.setattr(measure, "gpu_unavailable_reason", lambda index=0: "no CUDA driver or GPU (test)")
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
    r.stdout.fnmatch_lines(["*gpuprops facts*", "*lds_latency_cycles*sm_90*23 ± 0.25 cycles*PASS*"])
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
