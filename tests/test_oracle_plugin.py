"""The plugin's wiring that the older plugin tests leave unchecked: --force, record mode's expected
values, model checks, the benchmark store, plots and the session metadata."""

import json
import types

import pytest
from test_plugin import FACT_TEST, FAKE_GPU

from pytest_gpuprops import plugin, report, results
from pytest_gpuprops.measure import Measurement


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
    plugin.store_in_benchmark(b, m, info)
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


def test_write_plots_picks_the_points(tmp_path, monkeypatch):
    calls = {}
    monkeypatch.setattr(report, "plot_hmma", lambda pts, path, title: calls.setdefault("hmma", (pts, path, title)))
    monkeypatch.setattr(report, "plot_regbank", lambda cells, rc, path, title: calls.setdefault("rb", (cells, rc, path)))
    monkeypatch.setattr(report, "plot_bandwidth", lambda vals, peak, path, title: calls.setdefault("bw", (vals, peak,
                                                                                                         path)))
    hmma = [{"ilp": 1, "warps": 1, "cycles": 24.0, "model": 24.0}, {"ilp": 2, "warps": 1, "cycles": 12.0, "model": 12.0}]
    regbank = [{"ra": 8, "rb": 10, "rc": 16, "cycles": 3.0}, {"ra": 8, "rb": 10, "rc": 17, "cycles": 2.0},
               {"ra": 9, "rb": 10, "rc": 17, "cycles": 1.0}]
    bw = [{"label": "STS float", "bytes_per_cycle": 127.0}, {"label": "STS float2", "bytes_per_cycle": 120.0}]
    state = types.SimpleNamespace(plots_dir=str(tmp_path / "plots"), results=results.SessionResults(
        plot_points={"hmma": hmma, "regbank": regbank, "smem_bandwidth": bw}))
    made = plugin.write_plots(state, {"gpu": {"name": "G"}, "arch": "sm_90"})
    assert (tmp_path / "plots").is_dir()
    assert calls["hmma"] == (hmma, tmp_path / "plots" / "hmma_cycles_vs_ilp.png", "G (sm_90)")
    assert calls["rb"] == ({(8, 10): 2.0, (9, 10): 1.0}, 17, tmp_path / "plots" / "regbank_heatmap.png")
    assert calls["bw"] == ({"STS float": 127.0, "STS float2": 120.0}, 128.0, tmp_path / "plots" / "smem_bandwidth.png")
    assert len(made) == 3
    calls.clear()
    only = types.SimpleNamespace(plots_dir=str(tmp_path / "p2"), results=results.SessionResults(
        plot_points={"hmma": hmma[:1]}))
    assert plugin.write_plots(only, {}) == [(hmma[:1], tmp_path / "p2" / "hmma_cycles_vs_ilp.png", "? (?)")]


def test_session_meta_says_what_is_unavailable(pytester, monkeypatch):
    from pytest_gpuprops import compile as gp_compile
    from pytest_gpuprops import sass
    state = plugin.GpuPropsState(pytester.parseconfig())  # as pytest_configure makes it; a configured
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
    state = plugin.GpuPropsState(config)
    assert state.gpu_index == 2 and state.facts_path == "f.toml" and state.kernels_dir == tmp_path
    assert state.gpu_list() == [2] and state.default_index() == 2  # one GPU, the one --gpu names
    assert state.stop.noise_target == 0.05 and state.stop.time_budget_s == 7.0
    assert state.stop.min_samples == 5 and state.stop.max_samples == 100
    dflt = plugin.GpuPropsState(pytester.parseconfig())
    assert dflt.kernels_dir == pytester.path / "kernels" and dflt.gpu_index == 0 and dflt.stop.noise_target == 0.01


FAKE_RUNNER = FAKE_GPU + '''
from pathlib import Path
from pytest_gpuprops import report

class FakeRunner:
    def __init__(self, info, kernels_dir, *, stop, cache_dir=None):
        self.info, self.kernels_dir, self.stop, self.cache_dir = info, kernels_dir, stop, cache_dir

    def measure(self, name, spec, **kw):
        if spec.kernel == "broken":
            raise measure.KernelLaunchError("planted launch failure")
        m = measure.Measurement.given(name, [23.0] * 3)
        m.remeasure = lambda: self.measure(name, spec, **kw)  # as the real Runner: fresh launches
        return m

def pytest_sessionstart(session):
    _mp.setattr(measure, "Runner", FakeRunner)
    _mp.setattr(report, "plot_bandwidth", lambda vals, peak, path, title: (Path(path).write_text(repr(vals)), path)[1])
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
        from pytest_gpuprops import measure
        from pytest_gpuprops.measure import KernelSpec

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
    from pytest_gpuprops import measure

    def fake_ncu(runner, specs, metrics):
        """ncu_metrics takes a list of specs (one ncu process) and returns one dict per spec."""
        assert type(runner).__name__ == "FakeRunner" and metrics == ["a"]
        if any(s.kernel == "gone" for s in specs):
            raise measure.NcuUnavailable("counters gone")
        return [{"a": float(n)} for n, _ in enumerate(specs, 1)]
    monkeypatch.setattr(measure, "ncu_metrics", fake_ncu)
    monkeypatch.setenv("GPUPROPS_NCU", "/opt/ncu")
    r = pytester.runpytest_inprocess("--gpuprops-noise", "0.02", "--gpuprops-budget", "3", "--gpuprops-cache",
                                     "cachedir", "--gpuprops-facts", "facts.toml", "--gpuprops-plots", "plots",
                                     "--junitxml", "j.xml", "-rs")
    r.assert_outcomes(passed=3, failed=2, skipped=2)
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
    raise measure.GpuUnavailable("properties unreadable")

_fake_configure = pytest_configure

def pytest_configure(config):
    _fake_configure(config)
    _mp.setattr(measure, "gpu_info", _broken)

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
