"""pytest wiring: options, markers, fixtures and hooks. The work is done by the layer modules: the
options' start-up checks in startup.py, the session's state and its end in session.py, the test's
checkers in fixture.py, the end-of-run summary and files in summary.py."""

from __future__ import annotations

import argparse
import datetime as _dt
import math

import pytest

from . import devices, factspec, measure, nsight, plots, report_files, startup, summary
from . import facts as gp_facts
from .fixture import _PART, FactChecker, StaticChecker, declared_facts
from .kernel_spec import KernelSpec
from .session import GpuPropsState, compile_only, power_bound_first

_STATE = pytest.StashKey["GpuPropsState"]()


def _option_number(convert, accept, expected: str):
    """An argparse ``type=``: ``convert`` the text and keep it if ``accept`` says so, else one message."""
    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            v = None
        if v is None or not accept(v):
            raise argparse.ArgumentTypeError(f"takes {expected}, not {text!r}")
        return v
    return parse


_gpu_index = _option_number(int, lambda v: v >= 0, "a CUDA device index 0, 1, ... (as nvidia-smi numbers them)")
_noise = _option_number(float, lambda v: 0 < v < 1, "the relative standard deviation that ends a measurement, a "
                        "number between 0 and 1 (0.01 = 1 %)")
_budget = _option_number(float, lambda v: 0 < v < math.inf, "the seconds one measurement may keep repeating, a "
                         "number > 0 (default 2)")


def _given(expected: str):
    """An option naming a path or a list: an empty value is a mistake, never 'the default'."""
    return _option_number(lambda text: text if text.strip() else None, lambda v: True, expected)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("gpuprops", "GPU micro-architecture facts")
    g.addoption("--gpu", dest="gpuprops_gpu", type=_gpu_index, default=None, metavar="INDEX",
                help="CUDA device index to measure (default 0); a GPU asked for by index that is not visible "
                     "fails the run")
    g.addoption("--gpuprops-gpus", dest="gpuprops_gpus", default=None, metavar="all|LIST",
                type=_given("'all' or GPU indices like 0,1"),
                help="measure several GPUs: 'all' or indices like 0,1. With -n N (pytest-xdist) worker K measures "
                     "the K-th GPU in parallel; without it the GPU tests run once per GPU, one GPU after another")
    g.addoption("--gpuprops-baseline", dest="gpuprops_baseline", default="last", metavar="last|none|FILE",
                help="what each GPU unit is compared with: 'last' (default) its last accepted run in the baseline "
                     "store; a FILE (a --gpuprops-report JSON or a stored run); 'none' neither compares nor stores. "
                     "A fact that moved by more than its same-unit band is MOVED and fails the run")
    g.addoption("--gpuprops-compare", dest="gpuprops_compare", default=None, metavar="REPORT",
                help="the same as --gpuprops-baseline REPORT")
    g.addoption("--gpuprops-baselines", dest="gpuprops_baselines", default=None, metavar="DIR",
                help="the baseline store: one folder per GPU UUID, a JSON file per run (default "
                     "$GPUPROPS_BASELINE_DIR or ~/.local/share/gpuprops/baselines); share one folder across a fleet")
    g.addoption("--gpuprops-baseline-accept", dest="gpuprops_baseline_accept", action="store_true",
                help="make this run each measured unit's baseline even where something was red (after a planned "
                     "change, once it is understood)")
    g.addoption("--gpuprops-population", dest="gpuprops_population", default="reach", choices=("reach", "strict"),
                help="a reading outside the band of a fact that differs by unit: 'reach' (default) is a finding, "
                     "listed, not red, while within 10 %% of the units recorded; 'strict' fails it (to qualify a "
                     "unit before it joins a fleet)")
    g.addoption("--gpuprops-facts", dest="gpuprops_facts", default=None, metavar="PATH",
                type=_given("a facts .toml file or a folder of sm_XX.toml"),
                help="facts file (or folder of sm_XX.toml) to check against instead of the packaged ones")
    g.addoption("--gpuprops-record", dest="gpuprops_record", default=None, metavar="PATH",
                type=_given("the path of the facts file to write"),
                help="write a facts file for this GPU's arch from this run's measurements")
    g.addoption("--gpuprops-force", "--force", dest="gpuprops_force", action="store_true",
                help="let --gpuprops-record overwrite an existing file, and --gpuprops-report replace a file that "
                     "is not an earlier gpuprops report")
    g.addoption("--gpuprops-report", dest="gpuprops_report", default=None, metavar="PATH",
                type=_given("the path of the JSON report (the Markdown goes beside it)"),
                help="write the session's verdicts as JSON to PATH and Markdown beside it")
    g.addoption("--gpuprops-plots", dest="gpuprops_plots", default=None, metavar="DIR",
                type=_given("a folder for the PNG plots"), help="write PNG plots to DIR (needs matplotlib)")
    g.addoption("--gpuprops-noise", dest="gpuprops_noise", type=_noise, default=0.01, metavar="RSD",
                help="noise target: relative std-dev of per-launch values that ends a measurement (default 0.01)")
    g.addoption("--gpuprops-budget", dest="gpuprops_budget", type=_budget, default=2.0, metavar="SECONDS",
                help="seconds one measurement may repeat before it stops unsettled (default 2)")
    g.addoption("--gpuprops-kernels", dest="gpuprops_kernels", default=None, metavar="DIR",
                type=_given("the folder of the kernel sources"),
                help="folder of kernel sources (default: <rootdir>/kernels)")
    g.addoption("--gpuprops-cache", dest="gpuprops_cache", default=None, metavar="DIR",
                type=_given("a cubin cache folder"),
                help="cubin cache folder (default $GPUPROPS_CACHE_DIR or ~/.cache/gpuprops/cubins)")


class _EndOfRunNotes:
    """Says at the end of the run what an option asked for but the run could not give."""

    def __init__(self, state: GpuPropsState):
        self.state = state

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        note = None if self.state.worker_id else summary.plots_note(self.state)
        if note:
            terminalreporter.write_line(note, yellow=True)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with the reason where there is none")
    config.addinivalue_line("markers", "static: compile-only fact (SASS schedule, encoding); runs without a GPU")
    config.addinivalue_line("markers", "arch(*archs, min=None): run only on these archs (sm_90, ...) or from min up")
    config.addinivalue_line("markers", "fact(*names): the facts a test checks, as names, templates of its parameters "
                            "('{op}_latency_cycles') or functions of them; `-k <fact name>` selects the test")
    config.addinivalue_line("markers", "node: the links of the node: NVLink and peer-to-peer per GPU pair, host links per "
                            "GPU; `pytest hwtests -m node`")
    config.addinivalue_line("markers", "validation: the quick post-update check of a GPU and its node (health, "
                            "sustained clocks, throughput in time units); `pytest hwtests -m validation`")
    startup.check_options(config.option)  # before matplotlib's import below: a wrong path is refused at once
    if config.option.gpuprops_plots:
        try:
            plots._plt()
        except plots.PlotsUnavailable as exc:
            raise pytest.UsageError(str(exc)) from exc
    state = GpuPropsState(config)
    config.stash[_STATE] = state
    config.add_cleanup(state.close)  # every process's runners, xdist workers' too
    if not state.worker_id:
        config.pluginmanager.register(_Ingest(state), "gpuprops-ingest")
        _interrupt_on_sigterm(config)
        if state.report_path:
            try:
                report_files.write_running(state.report_path, {"date": _dt.datetime.now().isoformat(timespec="seconds")})
            except OSError as exc:
                raise pytest.UsageError(f"--gpuprops-report {state.report_path} cannot be written: "
                                        f"{exc.strerror or exc}; choose a path you can write") from None
    config.pluginmanager.register(_EndOfRunNotes(state), "gpuprops-end-of-run-notes")


def _interrupt_on_sigterm(config: pytest.Config) -> None:
    """SIGTERM (what a CI timeout or a job scheduler sends) ends the run as Ctrl-C does, so the report
    is written and says the run was interrupted. Only where nobody else handles SIGTERM."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")

    signal.signal(signal.SIGTERM, interrupt)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))



@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`-k l1_hit_latency_cycles` selects the test that checks it: each fact a test declares is one of
    its keywords (pytest applies -k after this hook); the power-bound tests first (session.power_bound_first);
    the buffers the collected fact specs reserve, allocated as each GPU's runner starts (reserved.py)."""
    for item in items:
        for name in declared_facts(item):
            item.extra_keyword_matches.add(name)
    power_bound_first(items)
    # every collected fact spec's buffers, whatever -k and -m then select: where a reserved buffer lies
    # follows the reservations before it, so a -k run reserves as the whole suite does (reserved.py)
    factspec.request_reservations(getattr(getattr(i, "callspec", None), "params", {}).get("fact") for i in items)


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
    """--gpuprops-gpus with -n: every worker runs the GPU facts on its own GPU (xdist's 'each'), and the
    compile-time facts run once, on the first worker: they do not depend on the GPU."""
    if config.option.gpuprops_gpus:
        from xdist.scheduler import EachScheduling

        class EachGpuOnceStatic(EachScheduling):
            def schedule(self) -> None:
                assert self.collection_is_completed
                for n, (node, pending) in enumerate(self.node2pending.items()):
                    if node in self._started:
                        continue
                    if not pending:  # a new node (a filled list replaces a dead node's remaining tests)
                        ids = self.node2collection[node]
                        pending[:] = [i for i, nid in enumerate(ids) if n == 0 or not compile_only(nid)]
                    if pending:
                        node.send_runtest_some(pending)
                    else:
                        node.shutdown()
                    self._started.append(node)

        return EachGpuOnceStatic(config, log)
    return None




# ----------------------------------------------------------------------------------------------
# fixtures


def session_state(config: pytest.Config) -> GpuPropsState:
    """The plugin's state for this run (hwtests/conftest.py starts ncu profiles ahead through it)."""
    return config.stash[_STATE]


@pytest.fixture(scope="session")
def gpuprops_state(pytestconfig: pytest.Config) -> GpuPropsState:
    return pytestconfig.stash[_STATE]


@pytest.fixture(scope="session")
def gpuprops_gpu_index(request: pytest.FixtureRequest, gpuprops_state: GpuPropsState) -> int:
    """The CUDA index of the GPU under test (--gpu, this worker's GPU, or the --gpuprops-gpus parameter)."""
    return request.param if hasattr(request, "param") else gpuprops_state.default_index()


@pytest.fixture(scope="session")
def gpu(gpuprops_state: GpuPropsState, gpuprops_gpu_index: int) -> devices.GpuInfo:
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
    reason = nsight.ncu_unavailable_reason()
    if reason:
        pytest.skip(reason)

    def run(specs: list[KernelSpec], metrics: list[str]) -> list[dict[str, float]]:
        try:
            return gpuprops_state.ncu_profile(specs, metrics, gpuprops_gpu_index)
        except nsight.NcuUnavailable as exc:
            pytest.skip(str(exc))

    return run


# ----------------------------------------------------------------------------------------------
# pytest-benchmark


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
def pytest_runtest_call(item: pytest.Item):
    """A GPU test's kernel time beside its wall time: its timed launches' seconds and count, as the
    test's ``gpu_busy_s`` and ``gpu_launches`` properties (JUnit XML's <properties>)."""
    state = item.config.stash.get(_STATE, None)
    before = state.gpu_busy() if state is not None else (0.0, 0)
    yield
    if state is not None:
        busy, launches = state.gpu_busy()
        if launches > before[1]:
            item.user_properties.append(("gpu_busy_s", round(busy - before[0], 6)))
            item.user_properties.append(("gpu_launches", launches - before[1]))


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
        if report.when == "teardown":
            self.state.finished += 1

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.state.selected = len(session.items)
        startup.check_selected_facts(self.state, session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        """Under xdist: with --gpuprops-gpus every worker runs every test ('each'), else they share them."""
        if self.state.gpus_option:  # compile-time facts run on one worker only (EachGpuOnceStatic)
            self.state.selected += len(ids) if not self.state.selected else sum(not compile_only(i) for i in ids)
        else:
            self.state.selected = max(self.state.selected, len(ids))



# ----------------------------------------------------------------------------------------------
# end of session


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None or state.worker_id:
        return
    session.exitstatus = state.finish(exitstatus, collect_only=session.config.option.collectonly)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or state.worker_id:
        return
    summary.write_summary(terminalreporter, state, config.getoption("verbose", 0) or 0)
