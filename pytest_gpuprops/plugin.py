"""pytest wiring: options, markers, fixtures and hooks. The work is done by the layer modules."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import math
import os
import shlex
from pathlib import Path

import pytest

from . import assertions, measure, report, results
from . import facts as gp_facts

_STATE = pytest.StashKey["GpuPropsState"]()


class GpuSlot:
    """One GPU of the session: its info (or why it cannot be used) and its runner, made lazily."""

    def __init__(self, index: int):
        self.index = index
        self.info: measure.GpuInfo | None = None
        self.unavailable: str | None = None
        self.runner: measure.Runner | None = None


class GpuPropsState:
    """Per-session state: options, the GPUs (lazily), and the session's results."""

    def __init__(self, config: pytest.Config):
        self.config = config
        opt = config.option
        self.gpu_index: int = opt.gpuprops_gpu
        self.gpus_option: str | None = getattr(opt, "gpuprops_gpus", None)
        self.facts_path = opt.gpuprops_facts
        self.record_path = opt.gpuprops_record
        self.force = opt.gpuprops_force
        self.report_path = opt.gpuprops_report
        self.compare_path = getattr(opt, "gpuprops_compare", None)
        self.plots_dir = opt.gpuprops_plots
        root = Path(str(config.rootpath))
        self.kernels_dir = Path(opt.gpuprops_kernels) if opt.gpuprops_kernels else root / "kernels"
        self.stop = measure.StopRule(noise_target=opt.gpuprops_noise, time_budget_s=opt.gpuprops_budget)
        self.results = results.SessionResults()
        self.fleet: list[assertions.Verdict] = []
        self.fleet_note = ""
        self.worker_id: str | None = getattr(config, "workerinput", {}).get("workerid")
        self._slots: dict[int, GpuSlot] = {}
        self._gpu_list: list[int] | None = None

    # -- which GPUs ----------------------------------------------------------------------------
    def gpu_list(self) -> list[int]:
        """The GPUs to measure: --gpuprops-gpus (all, or a list), else the one of --gpu."""
        if self._gpu_list is None:
            self._gpu_list = parse_gpus(self.gpus_option, measure.visible_gpu_count) if self.gpus_option \
                else [self.gpu_index]
        return self._gpu_list

    def default_index(self) -> int:
        """This process's GPU: under xdist with --gpuprops-gpus, worker gwK measures the K-th GPU."""
        gpus = self.gpu_list()
        if self.worker_id and self.gpus_option:
            k = int(self.worker_id.lstrip("gw") or 0)
            return gpus[k] if k < len(gpus) else -1
        return gpus[0] if gpus else self.gpu_index

    def slot(self, index: int | None = None) -> GpuSlot:
        index = self.default_index() if index is None else index
        if index not in self._slots:
            s = GpuSlot(index)
            if index < 0:
                s.unavailable = (f"xdist worker {self.worker_id} has no GPU of its own: --gpuprops-gpus lists "
                                 f"{len(self.gpu_list())}; run with -n {len(self.gpu_list())}")
            else:
                s.unavailable = measure.gpu_unavailable_reason(index)
            if s.unavailable is None:
                try:
                    s.info = measure.gpu_info(index)
                except measure.GpuUnavailable as exc:
                    s.unavailable = str(exc)
            self._slots[index] = s
        return self._slots[index]

    def gpu_reason(self, index: int | None = None) -> str | None:
        return self.slot(index).unavailable

    def info(self, index: int | None = None) -> measure.GpuInfo:
        s = self.slot(index)
        if s.unavailable:
            pytest.skip(f"needs a GPU: {s.unavailable}")
        return s.info  # type: ignore[return-value]

    def runner(self, index: int | None = None) -> measure.Runner:
        s = self.slot(index)
        if s.runner is None:
            s.runner = measure.Runner(self.info(index), self.kernels_dir, stop=self.stop,
                                      cache_dir=self.config.option.gpuprops_cache)
        return s.runner

    @property
    def _info(self) -> measure.GpuInfo | None:
        """The first GPU measured in this process (for the report's header and record mode)."""
        return next((s.info for s in self._slots.values() if s.info is not None), None)

    def meta(self) -> dict:
        import socket

        from . import compile as gp_compile
        from . import sass
        meta = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "host": socket.gethostname()}
        try:
            meta["compiler"] = gp_compile.compiler_version()
        except Exception as exc:  # no NVRTC: the report still says so
            meta["compiler"] = f"unavailable ({exc})"
        try:
            meta["nvdisasm"] = sass.nvdisasm_version()
        except Exception as exc:
            meta["nvdisasm"] = f"unavailable ({exc})"
        gpus = {json.dumps(v.gpu, sort_keys=True) for v in self.results.verdicts if v.gpu}
        if self._info is not None:
            meta["gpu"] = self._info.as_dict()
            meta["arch"] = self._info.arch
        elif gpus:
            first = json.loads(sorted(gpus)[0])
            meta["gpu"] = first
            meta["arch"] = next((v.arch for v in self.results.verdicts if v.gpu), "?")
        meta["gpus"] = [json.loads(g) for g in sorted(gpus)]
        return meta

    # -- results -------------------------------------------------------------------------------
    def ingest(self, report: pytest.TestReport) -> None:
        """Take a test's verdicts from its report (this process's, or an xdist worker's), and make
        sure a failing or skipped fact test shows in the table even without a verdict of its own."""
        part = getattr(report, "gpuprops_part", None)
        if part:
            self.results.add(part)
        mine = [v for v in self.results.verdicts if v.nodeid == report.nodeid]
        if report.failed and not any(v.status in assertions.NOT_OK for v in mine):
            self.results.verdicts.append(_outside_verdict(report, assertions.ERROR))
        elif report.skipped and not mine and ("gpu" in report.keywords or "static" in report.keywords):
            self.results.verdicts.append(_outside_verdict(report, assertions.SKIPPED))


def parse_gpus(text: str, count) -> list[int]:
    """``all`` or ``0,2,3`` -> GPU indices; ``count()`` is how many are visible."""
    if text.strip() == "all":
        n = count()
        return list(range(n))
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise pytest.UsageError(f"--gpuprops-gpus {text!r}: expected 'all' or GPU indices like 0,1,3") from None
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise pytest.UsageError(f"--gpuprops-gpus {text!r}: expected 'all' or distinct indices >= 0, like 0,1,3")
    return gpus


def _outside_verdict(report: pytest.TestReport, status: str) -> assertions.Verdict:
    """A verdict for a test that failed, errored or skipped outside the verdict layer."""
    if status == assertions.SKIPPED:
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        text = text.removeprefix("Skipped: ")
    else:
        crash = getattr(report.longrepr, "reprcrash", None)
        lines = [ln for ln in (crash.message if crash is not None else str(report.longrepr)).splitlines() if ln.strip()]
        text = f"{report.when} failed: {lines[0] if lines else report.outcome}"
    name = report.nodeid.split("::")[-1]
    return assertions.Verdict(fact=name, arch="-", status=status, expected="-", measured=None, measured_text=text,
                              unit="", method="", source="", kind="test",
                              reproduce=f"pytest {shlex.quote(report.nodeid)}", nodeid=report.nodeid)


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
    g.addoption("--gpuprops-gpus", dest="gpuprops_gpus", default=None,
                help="measure several GPUs: 'all' or indices like 0,1. With -n N (pytest-xdist) worker K measures "
                     "the K-th GPU in parallel; without it the GPU tests run once per GPU, one GPU after another")
    g.addoption("--gpuprops-compare", dest="gpuprops_compare", default=None,
                help="a report JSON from an earlier run (--gpuprops-report): fail naming each GPU (by UUID) and "
                     "fact that moved by more than the fact's tolerance")
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
    if opt.gpuprops_compare:
        try:
            results.load(opt.gpuprops_compare)
        except results.ResultsError as exc:
            raise pytest.UsageError(f"--gpuprops-compare: {exc}") from None
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
        if st.worker_id:
            return
        if st.plots_dir and not st.results.plot_points:
            unavailable = next((s.unavailable for s in st._slots.values() if s.unavailable), None)
            why = f"; GPU facts were skipped: {unavailable}" if unavailable else ""
            terminalreporter.write_line(
                f"gpuprops plots: nothing to plot, no PNG written to {st.plots_dir}: plots come from the HMMA, "
                "register-bank and shared-memory bandwidth GPU facts, and none "
                f"ran{why}", yellow=True)


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
    state = GpuPropsState(config)
    config.stash[_STATE] = state
    if not state.worker_id:
        config.pluginmanager.register(_Ingest(state), "gpuprops-ingest")
    config.pluginmanager.register(_EndOfRunNotes(state), "gpuprops-end-of-run-notes")


def _arch_number(arch: str) -> int:
    return int("".join(ch for ch in arch.split("_")[-1] if ch.isdigit()))


def _item_gpu(item: pytest.Item) -> int | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("gpuprops_gpu_index") if callspec is not None else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[_STATE]
    if item.get_closest_marker("gpu") is None:
        return
    index = _item_gpu(item)
    reason = state.gpu_reason(index)
    if reason:
        pytest.skip(f"needs a GPU: {reason}")
    marker = item.get_closest_marker("arch")
    if marker is not None:
        arch = state.info(index).arch
        only = marker.args
        low = marker.kwargs.get("min")
        if only and arch not in only:
            pytest.skip(f"fact is defined for {', '.join(only)}; this GPU is {arch}")
        if low and _arch_number(arch) < _arch_number(low):
            pytest.skip(f"fact needs {low} or newer; this GPU is {arch}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """--gpuprops-gpus without xdist: every GPU test once per GPU, one GPU after another."""
    state = metafunc.config.stash[_STATE]
    if state.gpus_option and not state.worker_id and "gpuprops_gpu_index" in metafunc.fixturenames:
        gpus = state.gpu_list()
        if len(gpus) > 1:
            metafunc.parametrize("gpuprops_gpu_index", gpus, ids=[f"gpu{g}" for g in gpus], indirect=True,
                                 scope="session")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """--gpuprops-gpus with -n: every worker runs the whole suite on its own GPU (xdist's 'each')."""
    if config.option.gpuprops_gpus:
        from xdist.scheduler import EachScheduling
        return EachScheduling(config, log)
    return None


# ----------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def gpuprops_state(pytestconfig: pytest.Config) -> GpuPropsState:
    return pytestconfig.stash[_STATE]


@pytest.fixture(scope="session")
def gpuprops_gpu_index(request: pytest.FixtureRequest, gpuprops_state: GpuPropsState) -> int:
    """The CUDA index of the GPU under test (--gpu, this worker's GPU, or the --gpuprops-gpus parameter)."""
    return request.param if hasattr(request, "param") else gpuprops_state.default_index()


@pytest.fixture(scope="session")
def gpu(gpuprops_state: GpuPropsState, gpuprops_gpu_index: int) -> measure.GpuInfo:
    """The GPU under test: name, arch, SM count, clocks, driver and CUDA versions."""
    return gpuprops_state.info(gpuprops_gpu_index)


@pytest.fixture(scope="session")
def gpu_runner(gpuprops_state: GpuPropsState, gpu, gpuprops_gpu_index: int) -> measure.Runner:
    """Compiles, patches, loads and times kernels on the GPU under test."""
    return gpuprops_state.runner(gpuprops_gpu_index)


@pytest.fixture(scope="session")
def gpu_facts(gpuprops_state: GpuPropsState, gpu) -> gp_facts.Facts | None:
    """The facts for this GPU's arch; None in record mode when none exist yet."""
    try:
        return gp_facts.load_facts(gpu.arch, gpuprops_state.facts_path, gpu_name=gpu.name)
    except gp_facts.MissingFacts as exc:
        if gpuprops_state.record_path:
            return None
        pytest.skip(str(exc))


_PART = pytest.StashKey[dict]()


def _pending(item: pytest.Item) -> dict:
    """What a test found and has not yet handed to its report: verdicts, recorded facts, plot points."""
    if _PART not in item.stash:
        item.stash[_PART] = {"verdicts": [], "recorded": [], "plot_points": {}}
    return item.stash[_PART]


def reproduce_command(config: pytest.Config, nodeid: str, *, gpu: bool = False, index: int | None = None) -> str:
    """The command that runs one fact again as this session ran it: the facts it was checked
    against and, for GPU facts, the device, kernels and stop rule when they are not the defaults."""
    opt = config.option
    args = ["pytest", nodeid]
    index = opt.gpuprops_gpu if index is None else index
    if gpu and index:
        args += ["--gpu", str(index)]
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

    def __init__(self, request: pytest.FixtureRequest, state: GpuPropsState, index: int):
        self._request = request
        self._state = state
        self._index = index
        self.verdicts: list[assertions.Verdict] = []

    # -- measuring -------------------------------------------------------------------------------
    @property
    def gpu(self) -> measure.GpuInfo:
        return self._state.info(self._index)

    @property
    def runner(self) -> measure.Runner:
        return self._state.runner(self._index)

    def measure(self, name: str, spec: measure.KernelSpec, **kw) -> measure.Measurement:
        try:
            return self.runner.measure(name, spec, **kw)
        except measure.UncleanRegion as exc:
            if self._known_arch():
                pytest.fail(str(exc), pytrace=False)
            # a new arch: the compiler emits something else in the region, so this fact's method does
            # not hold there as it is; say so instead of measuring the wrong thing
            pytest.skip(f"the method of this fact does not hold on {self.gpu.arch} yet: {exc}")
        except measure.KernelLaunchError as exc:
            pytest.fail(str(exc), pytrace=False)

    def _known_arch(self) -> bool:
        try:
            gp_facts.load_facts(self.gpu.arch, self._state.facts_path)
        except gp_facts.MissingFacts:
            return False
        return True

    # -- checking --------------------------------------------------------------------------------
    def reproduce(self) -> str:
        return reproduce_command(self._request.config, self._request.node.nodeid, gpu=True, index=self._index)

    def fact(self, name: str) -> gp_facts.Fact | None:
        facts = self._request.getfixturevalue("gpu_facts")
        if facts is None or name not in facts:
            if self._state.record_path:
                return None
            if facts is None:
                pytest.skip(f"no facts for {self.gpu.arch}: record them with --gpuprops-record {self.gpu.arch}.toml")
            try:
                facts.need(name)
            except gp_facts.MissingFacts as exc:  # not yet recorded for this arch or GPU: say how
                pytest.skip(str(exc))
        return facts[name]

    def expected(self, name: str) -> float:
        """A fact's value for model tests: from the facts file, or (record mode) from this session."""
        fact = self.fact(name)
        if name in self._state.results.recorded and (fact is None or self._state.record_path):
            return float(self._state.results.recorded[name].value)
        if fact is None:
            pytest.skip(f"needs fact {name}: record it first (its own test runs earlier in this session)")
        return float(fact.value)

    def _finish(self, v: assertions.Verdict) -> assertions.Verdict:
        v.nodeid = self._request.node.nodeid
        v.gpu = self.gpu.identity()
        self.verdicts.append(v)
        _pending(self._request.node)["verdicts"].append(v.as_dict())
        self._request.node.user_properties.append((f"gpuprops:{v.fact}", f"{v.measured} {v.unit} {v.verdict_text}"))
        assertions.raise_for(v)
        return v

    def check(self, name: str, m: measure.Measurement, *, method: str = "", unit: str | None = None,
              benchmark=None, remeasure=None) -> assertions.Verdict:
        """Assert measurement ``m`` against fact ``name`` of this arch (or record it in record mode).

        A measurement outside its tolerance is measured again (``remeasure``, default: the
        measurement's own fresh-launch repeat) before the verdict: FAIL only if it fails every time,
        UNSTABLE if it does not. Pass pytest-benchmark's ``benchmark`` fixture to store the per-launch
        values (in cycles) for --benchmark-save / --benchmark-compare.
        """
        m = planted_shift(m, name, self._index)
        if benchmark is not None:
            store_in_benchmark(benchmark, m, self.gpu)
        fact = self.fact(name)
        if fact is None or self._state.record_path:
            return self._finish(self._record(name, m, method, unit or m.unit, fact))
        again = remeasure or m.remeasure
        first = assertions.evaluate(fact, m, reproduce=self.reproduce())
        return self._finish(assertions.confirm(
            first, (lambda: assertions.evaluate(fact, again(), reproduce=self.reproduce())) if again else None))

    def _record(self, name, m, method, unit, old):
        tol_abs, tol_rel = gp_facts.default_tolerance(unit, m.median, m.noise)
        if old is not None:  # keep the reviewed tolerance and method of an existing fact
            tol_abs, tol_rel, method = old.tolerance_abs, old.tolerance_rel, old.method
        info = self.gpu
        fact = gp_facts.Fact(name=name, arch=info.arch, unit=unit, method=method or f"{m.kernel} {m.launch}",
                             source=gp_facts.provenance(info.name, info.driver_version, info.cuda_driver_version),
                             value=round(m.median, 3), tolerance_abs=tol_abs, tolerance_rel=tol_rel)
        self._state.results.recorded[name] = fact
        _pending(self._request.node)["recorded"].append(dataclasses.asdict(fact))
        v = assertions.evaluate(fact, m)
        v.status = assertions.RECORDED if v.status != assertions.NOISY else v.status
        return v

    def check_model(self, name: str, cases, *, tolerance_rel: float, unit: str, method: str, source: str,
                    remeasure=None):
        """Assert that every (label, predicted, measured) case is within ``tolerance_rel`` of the
        model. A failure is measured again with ``remeasure() -> cases`` before it is reported."""
        def evaluate(cs):
            return assertions.evaluate_model(name, self.gpu.arch, cs, tolerance_rel=tolerance_rel, unit=unit,
                                             method=method, source=source, reproduce=self.reproduce())
        v = assertions.confirm(evaluate(cases), (lambda: evaluate(remeasure())) if remeasure else None)
        return self._finish(v)

    def plot_point(self, plot: str, **point) -> None:
        _pending(self._request.node)["plot_points"].setdefault(plot, []).append(point)


def planted_shift(m: measure.Measurement, fact: str, gpu_index: int) -> measure.Measurement:
    """Test-only: ``GPUPROPS_PLANT_SHIFT="<gpu index>:<fact>:<delta>"`` adds delta to one GPU's
    measurement of one fact (and to its re-measurements), to check on real hardware that an
    outlier or a moved fact is flagged. The verdict says it was planted."""
    plant = os.environ.get("GPUPROPS_PLANT_SHIFT")
    if not plant:
        return m
    try:
        index, name, delta = plant.split(":")
        index, delta = int(index), float(delta)
    except ValueError:
        raise pytest.UsageError(f"GPUPROPS_PLANT_SHIFT={plant!r}: expected <gpu index>:<fact>:<delta>") from None
    if index != gpu_index or name != fact:
        return m
    again = m.remeasure
    shifted = dataclasses.replace(m, values=[v + delta for v in m.values], kernel=f"{m.kernel} (planted {delta:+g})")
    shifted.remeasure = (lambda: planted_shift(again(), fact, gpu_index)) if again else None
    return shifted


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
        _pending(self._request.node)["verdicts"].append(v.as_dict())
        self._request.node.user_properties.append((f"gpuprops:{name}", f"{value} {fact.unit} {v.verdict_text}"))
        assertions.raise_for(v)
        return v


@pytest.fixture
def gpuprops(request: pytest.FixtureRequest, gpuprops_state: GpuPropsState, gpuprops_gpu_index: int) -> FactChecker:
    """Measure kernels and check them against this GPU's facts (skips without a GPU)."""
    gpuprops_state.info(gpuprops_gpu_index)  # skip early, with the reason, where there is no GPU
    return FactChecker(request, gpuprops_state, gpuprops_gpu_index)


@pytest.fixture
def gpuprops_static(request: pytest.FixtureRequest, gpuprops_state: GpuPropsState) -> StaticChecker:
    """Check compile-time schedule facts; needs NVRTC and nvdisasm, not a GPU."""
    return StaticChecker(request, gpuprops_state)


@pytest.fixture(scope="session")
def ncu(gpuprops_state: GpuPropsState, gpu, gpuprops_gpu_index: int):
    """Profile kernels under Nsight Compute: ``ncu(specs, metrics) -> [{metric: value}]``, one ncu
    process for all the launches (skips where ncu cannot profile)."""
    reason = measure.ncu_unavailable_reason()
    if reason:
        pytest.skip(reason)

    def run(specs: list[measure.KernelSpec], metrics: list[str]) -> list[dict[str, float]]:
        try:
            return measure.ncu_metrics(gpuprops_state.runner(gpuprops_gpu_index), specs, metrics)
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
# collecting verdicts: every test's part rides on its report (so xdist workers send theirs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    rep = outcome.get_result()
    part = item.stash.get(_PART, None)
    if part and (part["verdicts"] or part["recorded"] or part["plot_points"]):
        rep.gpuprops_part = part
        item.stash[_PART] = {"verdicts": [], "recorded": [], "plot_points": {}}


class _Ingest:
    """Registered on the controller (or a lone process): hands each report to the session state."""

    def __init__(self, state: GpuPropsState):
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.state.ingest(report)


# ----------------------------------------------------------------------------------------------
# end of session


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None or state.worker_id:
        return
    verdicts = state.results.verdicts
    state.fleet, state.fleet_note = results.outliers(verdicts)
    if state.compare_path:
        try:
            baseline, _ = results.load(state.compare_path)
        except results.ResultsError as exc:
            raise pytest.UsageError(f"--gpuprops-compare: {exc}") from exc
        state.fleet += results.compare(baseline.verdicts, verdicts)
    if state.fleet and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or state.worker_id:
        return
    tr = terminalreporter
    verdicts = state.results.verdicts
    if verdicts:
        tr.write_sep("=", "gpuprops facts")
        tr.write_line(report.table(verdicts))
        tr.write_line(report.summary_line(verdicts + state.fleet))
        if len({results.gpu_key(v) for v in verdicts if v.gpu}) > 1:
            tr.write_sep("-", "per GPU")
            tr.write_line(report.gpu_table(verdicts))
    if state.fleet_note and any(v.gpu for v in verdicts):
        tr.write_line(f"gpuprops {state.fleet_note}")
    if state.fleet:
        tr.write_sep("=", "gpuprops fleet: outliers and moved facts", red=True)
        tr.write_line(report.table(state.fleet))
    meta = state.meta()
    if state.report_path:
        for p in report.write_reports(state.report_path, state.results, state.fleet, meta):
            tr.write_line(f"gpuprops report: {p}")
    if state.record_path:
        info = state._info
        if state.results.recorded:
            arch = next(iter(state.results.recorded.values())).arch
            try:
                p = gp_facts.write_facts(state.record_path, arch, list(state.results.recorded.values()),
                                         force=state.force, meta={"gpu": info.name if info else meta.get("gpu", {}).get("name", "?")})
                tr.write_line(f"gpuprops recorded {len(state.results.recorded)} facts to {p}")
            except gp_facts.FactsError as exc:
                tr.write_line(f"gpuprops record: {exc}", red=True)
        else:
            tr.write_line("gpuprops record: nothing was measured, no file written", yellow=True)
    if state.plots_dir and state.results.plot_points:
        for p in write_plots(state, meta):
            tr.write_line(f"gpuprops plot: {p}")


def write_plots(state: GpuPropsState, meta: dict) -> list[Path]:
    out = Path(state.plots_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{meta.get('gpu', {}).get('name', '?')} ({meta.get('arch', '?')})"
    made = []
    pts = state.results.plot_points
    if pts.get("hmma"):
        made.append(report.plot_hmma(pts["hmma"], out / "hmma_cycles_vs_ilp.png", title))
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
