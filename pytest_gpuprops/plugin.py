"""pytest wiring: options, markers, fixtures and hooks. The work is done by the layer modules."""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import shlex
from pathlib import Path

import pytest

from . import assertions, measure, report
from . import facts as gp_facts

_STATE = pytest.StashKey["GpuPropsState"]()


class GpuPropsState:
    """Per-session state: options, the GPU (lazily), verdicts, recorded facts, plot points."""

    def __init__(self, config: pytest.Config):
        self.config = config
        opt = config.option
        self.gpu_index: int = opt.gpuprops_gpu
        self.facts_path = opt.gpuprops_facts
        self.record_path = opt.gpuprops_record
        self.force = opt.gpuprops_force
        self.report_path = opt.gpuprops_report
        self.plots_dir = opt.gpuprops_plots
        root = Path(str(config.rootpath))
        self.kernels_dir = Path(opt.gpuprops_kernels) if opt.gpuprops_kernels else root / "kernels"
        self.stop = measure.StopRule(noise_target=opt.gpuprops_noise, time_budget_s=opt.gpuprops_budget)
        self.verdicts: list[assertions.Verdict] = []
        self.recorded: dict[str, gp_facts.Fact] = {}
        self.plot_points: dict[str, list] = {}
        self._info: measure.GpuInfo | None = None
        self._unavailable: str | None = None
        self._runner: measure.Runner | None = None

    def gpu_reason(self) -> str | None:
        if self._info is None and self._unavailable is None:
            self._unavailable = measure.gpu_unavailable_reason(self.gpu_index)
            if self._unavailable is None:
                try:
                    self._info = measure.gpu_info(self.gpu_index)
                except measure.GpuUnavailable as exc:
                    self._unavailable = str(exc)
        return self._unavailable

    @property
    def info(self) -> measure.GpuInfo:
        reason = self.gpu_reason()
        if reason:
            pytest.skip(f"needs a GPU: {reason}")
        return self._info  # type: ignore[return-value]

    def runner(self) -> measure.Runner:
        if self._runner is None:
            self._runner = measure.Runner(self.info, self.kernels_dir, stop=self.stop,
                                          cache_dir=self.config.option.gpuprops_cache)
        return self._runner

    def meta(self) -> dict:
        from . import compile as gp_compile
        from . import sass
        meta = {"date": _dt.datetime.now().isoformat(timespec="seconds")}
        try:
            meta["compiler"] = gp_compile.compiler_version()
        except Exception as exc:  # no NVRTC: the report still says so
            meta["compiler"] = f"unavailable ({exc})"
        try:
            meta["nvdisasm"] = sass.nvdisasm_version()
        except Exception as exc:
            meta["nvdisasm"] = f"unavailable ({exc})"
        if self._info is not None:
            meta["gpu"] = self._info.as_dict()
            meta["arch"] = self._info.arch
        return meta


def _gpu_index(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"takes a CUDA device index 0, 1, ... (as nvidia-smi numbers them), not {text!r}")
    return v


def _noise(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"takes the relative standard deviation that ends a measurement, a number "
                                         f"between 0 and 1 (0.01 = 1 %), not {text!r}")
    return v


def _budget(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not 0 < v < math.inf:
        raise argparse.ArgumentTypeError(f"takes the seconds one measurement may keep repeating, a number > 0 "
                                         f"(default 2), not {text!r}")
    return v


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("gpuprops", "GPU micro-architecture facts")
    g.addoption("--gpu", dest="gpuprops_gpu", type=_gpu_index, default=0,
                help="CUDA device index to measure (default 0)")
    g.addoption("--gpuprops-facts", dest="gpuprops_facts", default=None,
                help="facts file (or folder of sm_XX.toml) to check against instead of the packaged ones")
    g.addoption("--gpuprops-record", dest="gpuprops_record", default=None,
                help="write a facts file for this GPU's arch from this run's measurements")
    g.addoption("--gpuprops-force", "--force", dest="gpuprops_force", action="store_true",
                help="let --gpuprops-record overwrite an existing file")
    g.addoption("--gpuprops-report", dest="gpuprops_report", default=None,
                help="write the session's verdicts as JSON to PATH and Markdown beside it")
    g.addoption("--gpuprops-plots", dest="gpuprops_plots", default=None, help="write PNG plots to DIR (needs matplotlib)")
    g.addoption("--gpuprops-noise", dest="gpuprops_noise", type=_noise, default=0.01,
                help="noise target: relative std-dev of per-launch values that ends a measurement (default 0.01)")
    g.addoption("--gpuprops-budget", dest="gpuprops_budget", type=_budget, default=2.0,
                help="seconds one measurement may repeat before it stops unsettled (default 2)")
    g.addoption("--gpuprops-kernels", dest="gpuprops_kernels", default=None,
                help="folder of kernel sources (default: <rootdir>/kernels)")
    g.addoption("--gpuprops-cache", dest="gpuprops_cache", default=None,
                help="cubin cache folder (default $GPUPROPS_CACHE_DIR or ~/.cache/gpuprops/cubins)")


def _writable_file(option: str, path: str, *, exists_ok: bool = True) -> None:
    """A file ``option`` will write at the end of the run: refuse now what would fail then."""
    p = Path(path)
    if p.is_dir():
        raise pytest.UsageError(f"{option} {path} is a folder; give a file name (e.g. {p / 'gpuprops.json'})")
    if p.exists() and not exists_ok:
        raise pytest.UsageError(f"{option} {path} exists; pass --force to overwrite it, or choose another path")
    _writable_dir(option, str(p.parent), path)


def _writable_dir(option: str, path: str, shown: str | None = None) -> None:
    """A folder that exists or can be created, and can be written."""
    p = Path(path) if path else Path(".")
    existing = p
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise pytest.UsageError(f"{option} {shown or path}: {existing} is a file, not a folder; choose a path "
                                "in a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"{option} {shown or path}: folder {existing} is not writable; choose a "
                                "path you can write")


def _check_options(config: pytest.Config) -> None:
    """Everything the options name, checked once before any test runs: a typo is one usage error at
    start-up, not a green run of skips or a traceback after the whole run."""
    from . import compile as gp_compile
    opt = config.option
    if opt.gpuprops_facts:
        try:
            gp_facts.check_facts_path(opt.gpuprops_facts)
        except gp_facts.FactsError as exc:
            raise pytest.UsageError(f"--gpuprops-facts: {exc}") from None
    if opt.gpuprops_kernels and not Path(opt.gpuprops_kernels).is_dir():
        raise pytest.UsageError(f"--gpuprops-kernels {opt.gpuprops_kernels} is not a folder; give the folder "
                                "that holds the kernel sources (the repository's kernels/)")
    try:
        gp_compile.check_cache_dir(opt.gpuprops_cache)
    except gp_compile.CacheError as exc:
        raise pytest.UsageError(str(exc)) from None
    lock = os.environ.get("GPUPROPS_LOCK_DIR")
    if lock and not Path(lock).is_dir():
        raise pytest.UsageError(f"GPUPROPS_LOCK_DIR={lock} is not a folder; point it at a folder every process "
                                "measuring on this machine can write (default: the system temp folder)")
    tool = os.environ.get("GPUPROPS_NVDISASM")
    if tool and not (Path(tool).is_file() and os.access(tool, os.X_OK)):
        raise pytest.UsageError(f"GPUPROPS_NVDISASM={tool} is not an executable file; point it at nvdisasm, or "
                                "unset it to use the one from pip (nvidia-cuda-nvdisasm)")
    if opt.gpuprops_report:
        _writable_file("--gpuprops-report", opt.gpuprops_report)
        _writable_file("--gpuprops-report", str(Path(opt.gpuprops_report).with_suffix(".md")))
    if opt.gpuprops_plots:
        if Path(opt.gpuprops_plots).is_file():
            raise pytest.UsageError(f"--gpuprops-plots {opt.gpuprops_plots} is a file; give a folder for the PNGs")
        _writable_dir("--gpuprops-plots", opt.gpuprops_plots)
    if opt.gpuprops_record:
        _writable_file("--gpuprops-record", opt.gpuprops_record, exists_ok=opt.gpuprops_force)
        reason = measure.gpu_unavailable_reason(opt.gpuprops_gpu)
        if reason:
            raise pytest.UsageError(f"--gpuprops-record measures facts on a GPU, and none can be used here: {reason}. "
                                    "Nothing would be recorded; run it on the GPU whose facts you want")


class _EndOfRunNotes:
    """Says at the end of the run what an option asked for but the run could not give."""

    def __init__(self, state: GpuPropsState):
        self.state = state

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        st = self.state
        if st.plots_dir and not st.plot_points:
            why = f"; GPU facts were skipped: {st._unavailable}" if st._unavailable else ""
            terminalreporter.write_line(
                f"gpuprops plots: nothing to plot, no PNG written to {st.plots_dir}: plots come from the HMMA, "
                "register-bank and shared-memory bandwidth GPU facts (run without pytest-xdist's -n), and none "
                f"ran in this process{why}", yellow=True)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with the reason where there is none")
    config.addinivalue_line("markers", "static: compile-only fact (SASS schedule, encoding); runs without a GPU")
    config.addinivalue_line("markers", "arch(*archs, min=None): run only on these archs (sm_90, ...) or from min up")
    if config.option.gpuprops_plots:
        try:
            report._plt()
        except report.PlotsUnavailable as exc:
            raise pytest.UsageError(str(exc)) from exc
    _check_options(config)
    config.stash[_STATE] = GpuPropsState(config)
    config.pluginmanager.register(_EndOfRunNotes(config.stash[_STATE]), "gpuprops-end-of-run-notes")


def _arch_number(arch: str) -> int:
    return int("".join(ch for ch in arch.split("_")[-1] if ch.isdigit()))


def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[_STATE]
    if item.get_closest_marker("gpu") is None:
        return
    reason = state.gpu_reason()
    if reason:
        pytest.skip(f"needs a GPU: {reason}")
    marker = item.get_closest_marker("arch")
    if marker is not None:
        arch = state.info.arch
        only = marker.args
        low = marker.kwargs.get("min")
        if only and arch not in only:
            pytest.skip(f"fact is defined for {', '.join(only)}; this GPU is {arch}")
        if low and _arch_number(arch) < _arch_number(low):
            pytest.skip(f"fact needs {low} or newer; this GPU is {arch}")


# ----------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def gpuprops_state(pytestconfig: pytest.Config) -> GpuPropsState:
    return pytestconfig.stash[_STATE]


@pytest.fixture(scope="session")
def gpu(gpuprops_state: GpuPropsState) -> measure.GpuInfo:
    """The GPU under test (index from --gpu): name, arch, SM count, clocks, driver and CUDA versions."""
    return gpuprops_state.info


@pytest.fixture(scope="session")
def gpu_runner(gpuprops_state: GpuPropsState, gpu) -> measure.Runner:
    """Compiles, patches, loads and times kernels on the GPU under test."""
    return gpuprops_state.runner()


@pytest.fixture(scope="session")
def gpu_facts(gpuprops_state: GpuPropsState, gpu) -> gp_facts.Facts | None:
    """The facts for this GPU's arch; None in record mode when none exist yet."""
    try:
        return gp_facts.load_facts(gpu.arch, gpuprops_state.facts_path)
    except gp_facts.MissingFacts as exc:
        if gpuprops_state.record_path:
            return None
        pytest.skip(str(exc))


def reproduce_command(config: pytest.Config, nodeid: str, *, gpu: bool = False) -> str:
    """The command that runs one fact again as this session ran it: the facts it was checked
    against and, for GPU facts, the device, kernels and stop rule when they are not the defaults."""
    opt = config.option
    args = ["pytest", nodeid]
    if gpu and opt.gpuprops_gpu:
        args += ["--gpu", str(opt.gpuprops_gpu)]
    if opt.gpuprops_facts:
        args += ["--gpuprops-facts", str(opt.gpuprops_facts)]
    if gpu:
        if opt.gpuprops_kernels:
            args += ["--gpuprops-kernels", str(opt.gpuprops_kernels)]
        if opt.gpuprops_noise != 0.01:
            args += ["--gpuprops-noise", f"{opt.gpuprops_noise:g}"]
        if opt.gpuprops_budget != 2.0:
            args += ["--gpuprops-budget", f"{opt.gpuprops_budget:g}"]
    return " ".join(shlex.quote(a) for a in args)


class FactChecker:
    """The per-test handle: measure, then check against this arch's fact, recording the verdict."""

    def __init__(self, request: pytest.FixtureRequest, state: GpuPropsState):
        self._request = request
        self._state = state
        self.verdicts: list[assertions.Verdict] = []

    # -- measuring -------------------------------------------------------------------------------
    @property
    def gpu(self) -> measure.GpuInfo:
        return self._state.info

    @property
    def runner(self) -> measure.Runner:
        return self._state.runner()

    def measure(self, name: str, spec: measure.KernelSpec, **kw) -> measure.Measurement:
        try:
            return self.runner.measure(name, spec, **kw)
        except measure.KernelLaunchError as exc:
            pytest.fail(str(exc), pytrace=False)

    # -- checking --------------------------------------------------------------------------------
    def reproduce(self) -> str:
        return reproduce_command(self._request.config, self._request.node.nodeid, gpu=True)

    def fact(self, name: str) -> gp_facts.Fact | None:
        facts = self._request.getfixturevalue("gpu_facts")
        if facts is None or name not in facts:
            if self._state.record_path:
                return None
            if facts is None:
                pytest.skip(f"no facts for {self.gpu.arch}: record them with --gpuprops-record {self.gpu.arch}.toml")
            facts.need(name)  # raises MissingFacts with how to record it
        return facts[name]

    def expected(self, name: str) -> float:
        """A fact's value for model tests: from the facts file, or (record mode) from this session."""
        fact = self.fact(name)
        if name in self._state.recorded and (fact is None or self._state.record_path):
            return float(self._state.recorded[name].value)
        if fact is None:
            pytest.skip(f"needs fact {name}: record it first (its own test runs earlier in this session)")
        return float(fact.value)

    def _finish(self, v: assertions.Verdict) -> assertions.Verdict:
        v.nodeid = self._request.node.nodeid
        self.verdicts.append(v)
        self._state.verdicts.append(v)
        self._request.node.user_properties.append((f"gpuprops:{v.fact}", f"{v.measured} {v.unit} {v.verdict_text}"))
        assertions.raise_for(v)
        return v

    def check(self, name: str, m: measure.Measurement, *, method: str = "", unit: str | None = None,
              benchmark=None) -> assertions.Verdict:
        """Assert measurement ``m`` against fact ``name`` of this arch (or record it in record mode).

        Pass pytest-benchmark's ``benchmark`` fixture to store the per-launch values (in cycles) for
        --benchmark-save / --benchmark-compare.
        """
        if benchmark is not None:
            store_in_benchmark(benchmark, m, self.gpu)
        fact = self.fact(name)
        if fact is None or self._state.record_path:
            return self._finish(self._record(name, m, method, unit or m.unit, fact))
        return self._finish(assertions.evaluate(fact, m, reproduce=self.reproduce()))

    def _record(self, name, m, method, unit, old):
        tol_abs, tol_rel = gp_facts.default_tolerance(unit, m.median, m.noise)
        if old is not None:  # keep the reviewed tolerance and method of an existing fact
            tol_abs, tol_rel, method = old.tolerance_abs, old.tolerance_rel, old.method
        info = self.gpu
        fact = gp_facts.Fact(name=name, arch=info.arch, unit=unit, method=method or f"{m.kernel} {m.launch}",
                             source=gp_facts.provenance(info.name, info.driver_version, info.cuda_driver_version),
                             value=round(m.median, 3), tolerance_abs=tol_abs, tolerance_rel=tol_rel)
        self._state.recorded[name] = fact
        v = assertions.evaluate(fact, m)
        v.status = assertions.RECORDED if v.status != assertions.NOISY else v.status
        return v

    def check_model(self, name: str, cases, *, tolerance_rel: float, unit: str, method: str, source: str):
        v = assertions.evaluate_model(name, self.gpu.arch, cases, tolerance_rel=tolerance_rel, unit=unit,
                                      method=method, source=source, reproduce=self.reproduce())
        return self._finish(v)

    def plot_point(self, plot: str, **point) -> None:
        self._state.plot_points.setdefault(plot, []).append(point)


class StaticChecker:
    """Checks compile-time facts (no GPU) against an arch's facts file, per compiler version."""

    def __init__(self, request: pytest.FixtureRequest, state: GpuPropsState):
        self._request = request
        self._state = state

    def check(self, arch: str, name: str, value: float, compiler: str) -> assertions.Verdict:
        try:
            fact = gp_facts.load_facts(arch, self._state.facts_path).need(name)
        except gp_facts.MissingFacts as exc:
            pytest.skip(str(exc))
        v = assertions.evaluate_static(fact, value, compiler,
                                       reproduce=reproduce_command(self._request.config, self._request.node.nodeid))
        v.nodeid = self._request.node.nodeid
        self._state.verdicts.append(v)
        self._request.node.user_properties.append((f"gpuprops:{name}", f"{value} {fact.unit} {v.verdict_text}"))
        assertions.raise_for(v)
        return v


@pytest.fixture
def gpuprops(request: pytest.FixtureRequest, gpuprops_state: GpuPropsState) -> FactChecker:
    """Measure kernels and check them against this GPU's facts (skips without a GPU)."""
    _ = gpuprops_state.info  # skip early, with the reason, where there is no GPU
    return FactChecker(request, gpuprops_state)


@pytest.fixture
def gpuprops_static(request: pytest.FixtureRequest, gpuprops_state: GpuPropsState) -> StaticChecker:
    """Check compile-time schedule facts; needs NVRTC and nvdisasm, not a GPU."""
    return StaticChecker(request, gpuprops_state)


@pytest.fixture
def ncu(gpuprops_state: GpuPropsState, gpu):
    """Run a kernel under Nsight Compute and return chosen metrics (skips where ncu cannot profile)."""
    reason = measure.ncu_unavailable_reason()
    if reason:
        pytest.skip(reason)

    def run(spec: measure.KernelSpec, metrics: list[str]) -> dict[str, float]:
        try:
            return measure.ncu_metrics(gpuprops_state.runner(), spec, metrics)
        except measure.NcuUnavailable as exc:
            pytest.skip(str(exc))

    return run


# ----------------------------------------------------------------------------------------------
# pytest-benchmark


def store_in_benchmark(benchmark, m: measure.Measurement, info: measure.GpuInfo) -> None:
    """Store ``m``'s per-launch values (cycles, not seconds) as this test's benchmark stats.

    pytest-benchmark times callables with its timer; here the "timer" is a cycle counter that a
    replay of the recorded values advances, so its statistics, --benchmark-save and
    --benchmark-compare-fail work on cycles. Disabled under xdist, like pytest-benchmark itself.
    """
    values = iter(m.values)
    clock = [0.0]

    def replay():
        clock[0] += next(values)

    benchmark._timer = lambda: clock[0]
    benchmark.extra_info.update(unit=m.unit, gpu=info.name, arch=info.arch, stop_reason=m.stop_reason,
                                noise=m.noise, sm_clock_mhz=m.sm_clock_mhz)
    benchmark.pedantic(replay, rounds=len(m.values), iterations=1, warmup_rounds=0)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    state = config.stash[_STATE]
    state.gpu_reason()  # load the GPU now: compare runs load baselines before any test has
    meta = state.meta()
    meta.pop("date", None)
    gpu = meta.get("gpu") or {}
    machine_info["gpuprops"] = {"gpu": gpu.get("name"), "arch": gpu.get("arch"),
                                "driver": gpu.get("driver_version"), "cuda_driver": gpu.get("cuda_driver_version"),
                                "cuda_runtime": gpu.get("cuda_runtime_version"), "compiler": meta.get("compiler"),
                                "nvdisasm": meta.get("nvdisasm")}


# ----------------------------------------------------------------------------------------------
# end of session


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    tr = terminalreporter
    if state.verdicts:
        tr.write_sep("=", "gpuprops facts")
        tr.write_line(report.table(state.verdicts))
    meta = state.meta()
    if state.report_path:
        for p in report.write_reports(state.report_path, state.verdicts, meta):
            tr.write_line(f"gpuprops report: {p}")
    if state.record_path and state._info is not None:
        if state.recorded:
            try:
                p = gp_facts.write_facts(state.record_path, state._info.arch, list(state.recorded.values()),
                                         force=state.force, meta={"gpu": state._info.name})
                tr.write_line(f"gpuprops recorded {len(state.recorded)} facts to {p}")
            except gp_facts.FactsError as exc:
                tr.write_line(f"gpuprops record: {exc}", red=True)
        else:
            tr.write_line("gpuprops record: nothing was measured, no file written", yellow=True)
    if state.plots_dir and state.plot_points:
        for p in write_plots(state, meta):
            tr.write_line(f"gpuprops plot: {p}")


def write_plots(state: GpuPropsState, meta: dict) -> list[Path]:
    out = Path(state.plots_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{meta.get('gpu', {}).get('name', '?')} ({meta.get('arch', '?')})"
    made = []
    pts = state.plot_points
    if pts.get("hmma"):
        floor = next((p.get("floor") for p in pts["hmma"] if p.get("floor")), None)
        made.append(report.plot_hmma(pts["hmma"], floor, out / "hmma_cycles_vs_ilp.png", title))
    if pts.get("regbank"):
        by_rc: dict[int, dict] = {}
        for p in pts["regbank"]:
            by_rc.setdefault(p["rc"], {})[(p["ra"], p["rb"])] = p["cycles"]
        rc, cells = max(by_rc.items(), key=lambda kv: len(kv[1]))
        made.append(report.plot_regbank(cells, rc, out / "regbank_heatmap.png", title))
    if pts.get("smem_bandwidth"):
        vals = {p["label"]: p["bytes_per_cycle"] for p in pts["smem_bandwidth"]}
        made.append(report.plot_bandwidth(vals, 128.0, out / "smem_bandwidth.png", title))
    return made
