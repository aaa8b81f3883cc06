"""pytest wiring: options, markers, fixtures and hooks. The work is done by the layer modules."""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
from pathlib import Path

import pytest

from . import baselines, devices, facts_record, inputs, measure, nsight, plots, report, report_files, results
from . import facts as gp_facts
from .fixture import (  # noqa: F401 (re-exported: the plugin's public names)
    _PART,
    FactChecker,
    StaticChecker,
    _pending,
    declared_facts,
    parse_plant_shift,
    planted_shift,
    reproduce_command,
    store_in_benchmark,
)
from .kernel_spec import KernelSpec
from .session import GpuPropsState, GpuSlot, _outside_verdict, parse_gpus  # noqa: F401

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
    if opt.gpuprops_kernels and not any(Path(opt.gpuprops_kernels).glob("*.cu")):
        raise pytest.UsageError(f"--gpuprops-kernels {opt.gpuprops_kernels} holds no kernel sources (no .cu file); "
                                "give the folder that holds them (the repository's kernels/)")
    try:
        gp_compile.check_cache_dir(opt.gpuprops_cache)
    except gp_compile.CacheError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.gpuprops_report:
        _writable_file("--gpuprops-report", opt.gpuprops_report)
        _writable_file("--gpuprops-report", str(Path(opt.gpuprops_report).with_suffix(".md")))
    try:
        _check_inputs(opt)
    except inputs.InputError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.gpuprops_plots:
        if Path(opt.gpuprops_plots).is_file():
            raise pytest.UsageError(f"--gpuprops-plots {opt.gpuprops_plots} is a file; give a folder for the PNGs")
        _writable_dir("--gpuprops-plots", opt.gpuprops_plots)
    _check_baseline_options(opt)
    parse_plant_shift(os.environ.get("GPUPROPS_PLANT_SHIFT"))
    _check_asked_gpus(opt)
    if opt.gpuprops_record:
        _writable_file("--gpuprops-record", opt.gpuprops_record, exists_ok=opt.gpuprops_force)
        reason = devices.gpu_unavailable_reason(opt.gpuprops_gpu or 0)
        if reason:
            raise pytest.UsageError(f"--gpuprops-record measures facts on a GPU, and none can be used here: {reason}. "
                                    "Nothing would be recorded; run it on the GPU whose facts you want")


def _check_inputs(opt) -> None:
    """The files the run writes and the environment variables (inputs.py): what no option type checks."""
    inputs.check_lock_dir()
    inputs.check_tool("GPUPROPS_NVDISASM", r"CUDA disassembler", "nvdisasm",
                      "unset it to use the one from pip (nvidia-cuda-nvdisasm)")
    inputs.check_tool("GPUPROPS_NCU", r"Nsight Compute", "Nsight Compute's ncu",
                      "unset it to find ncu on PATH (the tensor-pipe facts skip without one)")
    inputs.check_fresh_draws()
    inputs.check_plant_no_peer()
    if opt.gpuprops_report:
        inputs.check_report_target("--gpuprops-report", opt.gpuprops_report, opt.gpuprops_force)
        report_path = Path(opt.gpuprops_report)
        inputs.check_distinct_outputs([("--gpuprops-report", str(report_path)),
                                       ("--gpuprops-report", str(report_path.with_suffix(".md"))),
                                       *([("--gpuprops-record", opt.gpuprops_record)] if opt.gpuprops_record else [])])
    if not opt.gpuprops_record:
        text = os.environ.get("GPUPROPS_PLANT_SHIFT")
        inputs.check_plant_shift(parse_plant_shift(text), text, opt.gpuprops_facts)


def _check_facts_match(state: GpuPropsState, items: list[pytest.Item]) -> None:
    """--gpuprops-facts must hold facts for an arch the selected fact tests check: the compile-time
    tests' ``arch`` parameters, and the GPU's arch where a GPU can be used (inputs.check_facts_match)."""
    if not state.facts_path or state.record_path or not items:
        return
    static = {inputs.static_arch(dict(getattr(getattr(i, "callspec", None), "params", {}))) for i in items
              if "gpuprops_static" in getattr(i, "fixturenames", ())}
    gpu_archs: set[str] = set()
    note = ""
    if any(i.get_closest_marker("gpu") and {"gpuprops", "gpu_facts"} & set(getattr(i, "fixturenames", ()))
           for i in items):
        slots = [state.slot(index) for index in state.gpu_list()]
        gpu_archs = {s.info.arch for s in slots if s.info is not None}
        note = (f" (the GPU here is {', '.join(sorted(gpu_archs))})" if gpu_archs else
                f"; no GPU can be used here ({next((s.unavailable for s in slots if s.unavailable), 'none visible')})")
    try:
        inputs.check_facts_match(state.facts_path, static, gpu_archs, note)
    except inputs.InputError as exc:
        raise pytest.UsageError(str(exc)) from None


def _check_baseline_options(opt) -> None:
    """--gpuprops-baseline / --gpuprops-compare name a readable report, and the store a folder we can
    write; the two options cannot both name a file."""
    chosen = opt.gpuprops_baseline
    if not chosen or not chosen.strip():
        raise pytest.UsageError("--gpuprops-baseline '': expected 'last' (the unit's last accepted run), 'none' or "
                                "a report file")
    if opt.gpuprops_compare is not None and not opt.gpuprops_compare.strip():
        raise pytest.UsageError("--gpuprops-compare '': expected a report file written by --gpuprops-report")
    if opt.gpuprops_compare and chosen not in (baselines.LAST, opt.gpuprops_compare):
        raise pytest.UsageError(f"--gpuprops-compare {opt.gpuprops_compare} and --gpuprops-baseline {chosen} "
                                "name two baselines; give one")
    option, path = (("--gpuprops-compare", opt.gpuprops_compare) if opt.gpuprops_compare else
                    ("--gpuprops-baseline", chosen if chosen not in (baselines.LAST, baselines.NONE) else None))
    if path:
        try:
            baselines.from_report(path)
        except baselines.BaselineError as exc:
            raise pytest.UsageError(f"{option}: {exc}") from None
    if opt.gpuprops_baselines is not None and not opt.gpuprops_baselines.strip():
        raise pytest.UsageError("--gpuprops-baselines '': expected a folder for the baseline store")
    if opt.gpuprops_baseline_accept and chosen == baselines.NONE:
        raise pytest.UsageError("--gpuprops-baseline-accept with --gpuprops-baseline none: a run that is not stored "
                                "cannot become a baseline; drop one of the two")
    # a store the user named must be usable; the default one (a read-only home on a CI machine) is
    # only said to be unusable at the end, when a GPU run had something to keep
    if chosen != baselines.NONE and opt.gpuprops_baselines:
        _writable_dir("--gpuprops-baselines", opt.gpuprops_baselines)
    elif chosen != baselines.NONE and os.environ.get(baselines.STORE_ENV):
        _writable_dir(baselines.STORE_ENV, os.environ[baselines.STORE_ENV])


def _check_asked_gpus(opt) -> None:
    """A GPU asked for by index (--gpu N, --gpuprops-gpus LIST or all) that is not visible fails the
    run at start-up: a GPU that fell off the bus must not read as a green run of skipped facts. With
    no GPU asked for, a machine without one still skips every GPU fact with the reason (CPU CI)."""
    asked: list[tuple[str, int]] = []
    if opt.gpuprops_gpu is not None:
        asked.append((f"--gpu {opt.gpuprops_gpu}", opt.gpuprops_gpu))
    gpus = getattr(opt, "gpuprops_gpus", None)
    if gpus and gpus.strip() != "all":
        asked += [(f"--gpuprops-gpus {gpus}", i) for i in parse_gpus(gpus, devices.visible_gpu_count)]
    if not asked and not (gpus and gpus.strip() == "all"):
        return
    visible = devices.visible_gpu_count()
    if visible == 0:
        why = devices.gpu_unavailable_reason(0) or "no CUDA GPU visible"
        what = asked[0][0] if asked else f"--gpuprops-gpus {gpus}"
        raise pytest.UsageError(f"{what} asks for a GPU, and none is visible here: {why}. Check the GPU with "
                                "nvidia-smi (a GPU that fell off the bus is missing there too) and "
                                "CUDA_VISIBLE_DEVICES; without --gpu the GPU facts skip with that reason")
    missing = [(what, i) for what, i in asked if i >= visible]
    if missing:
        what, i = missing[0]
        raise pytest.UsageError(f"{what} asks for GPU {i}, and only {visible} GPU(s) are visible (indices 0.."
                                f"{visible - 1}). Check the GPU with nvidia-smi (a GPU that fell off the bus is "
                                "missing there too) and CUDA_VISIBLE_DEVICES")


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
    config.addinivalue_line("markers", "fact(*names): the facts a test checks, as names, templates of its parameters "
                            "('{op}_latency_cycles') or functions of them; `-k <fact name>` selects the test")
    config.addinivalue_line("markers", "node: the links of the node: NVLink and peer-to-peer per GPU pair, host links per "
                            "GPU; `pytest hwtests -m node`")
    config.addinivalue_line("markers", "validation: the quick post-update check of a GPU and its node (health, "
                            "sustained clocks, throughput in time units); `pytest hwtests -m validation`")
    if config.option.gpuprops_plots:
        try:
            plots._plt()
        except plots.PlotsUnavailable as exc:
            raise pytest.UsageError(str(exc)) from exc
    _check_options(config)
    state = GpuPropsState(config)
    config.stash[_STATE] = state
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
    its keywords (pytest applies -k after this hook)."""
    for item in items:
        for name in declared_facts(item):
            item.extra_keyword_matches.add(name)


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


def compile_only(nodeid: str) -> bool:
    """A compile-time fact's test: they live in ``test_static*.py`` files (a convention the plugin's
    own tests check), so the controller can tell them from a node id alone."""
    return nodeid.partition("::")[0].rsplit("/", 1)[-1].startswith("test_static")


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
        _check_facts_match(self.state, session.items)

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
    verdicts = state.results.verdicts
    if state.facts_path and not state.record_path:  # what the collection check cannot see under xdist
        state.facts_note = inputs.facts_matched_nothing(state.facts_path, verdicts)
        if state.facts_note:
            session.exitstatus = exitstatus = pytest.ExitCode.USAGE_ERROR
    if not session.config.option.collectonly:  # --co runs nothing, so nothing is missing
        state.run = results.run_status(int(exitstatus), state.selected, state.finished)
        if not state.run["complete"] and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # selected tests did not run: not a green run
    meta = {**state.meta(), "run": state.run}
    state.fleet, state.fleet_note = results.outliers(verdicts)
    state.fleet += compare_with_baselines(state, verdicts, meta)
    if results.red(state.fleet) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if state.run is not None and not state.record_path and state.baseline_choice != baselines.NONE:
        try:
            state.stored = state.store.save(verdicts + state.fleet, meta, accept=state.baseline_accept)
        except OSError as exc:
            state.baseline_notes.append(f"could not store this run in {state.store.root}: {exc}")


def compare_with_baselines(state: GpuPropsState, verdicts: list, meta: dict) -> list:
    """MOVED verdicts against each unit's baseline (baselines.compare_units); what each unit was
    compared with is kept for the summary and the report."""
    try:
        moved, notes, state.baseline_of = baselines.compare_units(state.store, state.baseline_choice, verdicts,
                                                                   meta)
    except baselines.BaselineError as exc:
        raise pytest.UsageError(f"{state.baseline_option}: {exc}") from exc
    state.baseline_notes += notes
    return moved


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or state.worker_id:
        return
    tr = terminalreporter
    verdicts = state.results.verdicts
    verbose = config.getoption("verbose", 0) or 0  # -v: every row and cell whole
    if verdicts:
        tr.write_sep("=", "gpuprops facts")
        tr.write_line(report.terminal_table(verdicts, verbose))
        tr.write_line(report.summary_line(verdicts + state.fleet, state.run))
        if len({results.gpu_key(v) for v in verdicts if v.gpu}) > 1:
            tr.write_sep("-", "per GPU")
            tr.write_line(report.gpu_table(verdicts))
        matrices = report.link_matrices(verdicts)
        if matrices:
            tr.write_sep("-", "node links: GPU x GPU")
            tr.write_line(report.link_tables(matrices))
    elif state.run and results.incomplete_reason(state.run) and state.report_path:
        tr.write_line(report.summary_line([], state.run), red=True)
    if state.facts_note:
        tr.write_line(f"gpuprops: usage error: {state.facts_note}", red=True)
    if state.fleet_note and any(v.gpu for v in verdicts):
        tr.write_line(f"gpuprops {state.fleet_note}")
    for note in state.baseline_notes:
        tr.write_line(f"gpuprops baseline: {note}")
    for uuid, path, accepted, why in state.stored:
        tr.write_line(f"gpuprops baseline: {uuid[:12]}: this run stored as {path}; {why}",
                      **({} if accepted else {"yellow": True}))
    if state.fleet:
        red = bool(results.red(state.fleet))
        tr.write_sep("=", "gpuprops fleet: outliers, moved facts, units that differ", **({"red": True} if red else {}))
        tr.write_line(report.table(state.fleet))
    meta = state.meta()
    if state.run is not None:
        meta["run"] = state.run
    meta["baselines"] = {"store": str(state.store.root), "choice": state.baseline_choice,
                         "notes": state.baseline_notes,
                         "compared_with": {u: [str(r.path) for r in b.runs] for u, b in state.baseline_of.items()},
                         "stored": [{"uuid": u, "path": str(p), "accepted": a, "why": w} for u, p, a, w in state.stored]}
    if state.report_path:
        try:
            for p in report_files.write_reports(state.report_path, state.results, state.fleet, meta):
                tr.write_line(f"gpuprops report: {p}")
        except OSError as exc:
            tr.write_line(f"gpuprops report: could not write {state.report_path} ({exc.strerror or exc}); this run's "
                          "verdicts are in the table above only", red=True)
    if state.record_path:
        info = state._info
        if state.results.recorded:
            arch = next(iter(state.results.recorded.values())).arch
            try:
                p = facts_record.write_facts(state.record_path, arch, list(state.results.recorded.values()),
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
    return plots.write_plots(state.results.plot_points, state.plots_dir, meta)
