"""hwtests: every file is a list of facts. The schedule helpers live beside them (schedule.py)."""

import re
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

KERNELS = Path(__file__).parent.parent / "kernels"


def _fits(source: str, arch: str) -> bool:
    from pytest_gpuprops.compile import SUPPORTED_ARCHES
    return arch in SUPPORTED_ARCHES and not (source == "hmma_16816.cu" and arch == "sm_75")  # mma needs sm_80


def _fact_of(item):
    """The FactSpec or SweepSpec a test takes as its ``fact`` parameter (pytest_gpuprops.factspec), or None."""
    from pytest_gpuprops.factspec import FactSpec, SweepSpec
    fact = getattr(getattr(item, "callspec", None), "params", {}).get("fact")
    return fact if isinstance(fact, (FactSpec, SweepSpec)) else None


def _launches_of(fact) -> list:
    """The KernelSpecs a fact's test launches: a fact spec's one build, a sweep's every distinct build."""
    from pytest_gpuprops.factspec import SweepSpec
    return fact.builds() if isinstance(fact, SweepSpec) else [fact.build()]


def _static_builds(item, specs, launched):
    """What one static test compiles: [(Build, KernelSpec to patch for timing, or None)]. A test of a
    fact spec (its ``fact`` parameter): the fact's build for its arch, as launched. Else what its
    file says (a module function ``_builds_of(item)``: test_static_throughput.py), else a copy of
    what the other test_static*.py do (a test this does not foresee compiles and reads its builds
    itself, as before, only not in the batch; the prefetch line counts it)."""
    from pytest_gpuprops.prefetch import Build
    fact = _fact_of(item)
    if fact is not None:
        return [(Build.of(KERNELS / spec.source, f.compile_arch(), spec.defines), spec)
                for f in fact.on_each_arch() for spec in _launches_of(f)]
    own = getattr(getattr(item, "module", None), "_builds_of", None)  # a file that says what it compiles
    if own is not None:
        return [(Build.of(KERNELS / src, a, d), None) for src, a, d in own(item) if _fits(src, a)]
    params = getattr(getattr(item, "callspec", None), "params", {})
    arch, name = params.get("arch"), item.originalname
    if arch is None:
        return []
    if name == "test_every_kernel_control_code_round_trips":
        return [(Build.of(src, arch), None) for src in sorted(KERNELS.glob("*.cu")) if _fits(src.name, arch)]
    if name == "test_launched_region_is_clean_and_as_intended" and params.get("spec_id") in launched:
        spec = launched[params["spec_id"]]
        return [(Build.of(KERNELS / spec.source, arch, spec.defines), spec)]
    plain = {
        "test_lds_chase_each_address_is_the_previous_result":
            lambda: ("smem_latency_ld.cu", {"UNROLL": params["unroll"]}),
        "test_ffma_chain_reads_one_register": lambda: ("ffma.cu", {"ILP": 1, "UNROLL": 256}),
        "test_hmma_dependent_chain_issue_spacing": lambda: ("hmma_16816.cu", {"ILP": 1, "UNROLL": 64}),
        "test_hmma_independent_min_issue_spacing": lambda: ("hmma_16816.cu", {"ILP": 3, "UNROLL": 64}),
        "test_alu_chain_reads_only_the_previous_result":
            lambda: ("alu_chain.cu", {"OP": specs.ALU_OPS[params["op"]][0], "ILP": 1, "UNROLL": 16}),
        "test_mma_chain_accumulates_into_the_previous_result":
            lambda: ("mma_sync.cu", {"DTYPE": specs.MMA_DTYPES[params["dtype"]][0], "ILP": 1, "UNROLL": 16}),
        "test_chase_each_address_is_the_previous_result":
            lambda: ("global_chase.cu", {"CACHE": specs.CHASE_CACHE[params["cache"]][0], "UNROLL": 64}),
        "test_conflict_loads_all_read_one_address_register":
            lambda: ("smem_conflict.cu", {"VEC": params["vec"], "UNROLL": 32}),
    }
    try:
        source, defines = plain[name]()
    except (KeyError, AttributeError):
        return []
    return [(Build.of(KERNELS / source, arch, defines), None)] if _fits(source, arch) else []


def _slowest_first(builds, specs):
    """``[(Build, spec or None)]`` with the slowest compiles first (the sm_90a wgmma chains, up to 16 s
    each for N x UNROLL = 256 x 256), so they overlap the rest; otherwise in the given order."""
    def cost(b):
        d = dict(b[0].defines)
        return int(d.get("N", 0)) * int(d.get("UNROLL", 0)) if b[0].arch == specs.WGMMA_ARCH else 0
    return sorted(builds, key=cost, reverse=True)


def _gpu_builds(gpu_items, arch: str, *, per_test_only: bool = False) -> list[tuple[str, str, dict, object]]:
    """What the selected GPU tests launch on a GPU of ``arch``: [(arch, source, defines, KernelSpec to
    patch for timing, or None)]. Always the clock-read overhead and SM clock kernels; per test, its
    fact's build where it takes a fact spec (its ``fact`` parameter), on the fact's arch (any, for a
    fact of any arch), compiled for its build_arch where it has one (a per-test build: the wgmma
    facts); where its module says (a module function ``_specs_of(item)`` and its ``BUILD_ARCH``: the
    wgmma dtype file); per file for the stresses and the files whose tests share
    builds (specs.launched_by_file: the hypothesis examples draw from them); every build of
    specs.launched() for a file none of these name. A selection (``-k``, ``-m``) compiles only the
    files and tests it keeps.
    ``per_test_only``: only the per-test builds (those of the wgmma facts and files)."""
    import specs
    overhead = specs.clock_overhead()
    out = [] if per_test_only else [(arch, "sm_clock_rate.cu", {}, None), (arch, overhead.source, overhead.defines, overhead)]
    shared_by_file = specs.launched_by_file()
    done, shared = set(), False
    for item in gpu_items:
        name = item.path.name
        per_item = getattr(getattr(item, "module", None), "_specs_of", None)
        fact = _fact_of(item)
        if fact is not None:
            # a fact built for another arch than the GPU's (wgmma: sm_90a) is a per-test build, made
            # beside the tests as the wgmma files' own builds are
            build_arch = getattr(fact, "build_arch", None)
            if fact.arch in (None, arch) and (not per_test_only or build_arch is not None):
                out += [(build_arch or arch, spec.source, spec.defines, spec) for spec in _launches_of(fact)]
            continue
        if per_item is not None:
            if arch == "sm_90":
                build_arch = getattr(item.module, "BUILD_ARCH", arch)
                out += [(build_arch, s.source, s.defines, s) for s in per_item(item)]
        elif per_test_only:
            continue
        elif name == "test_throughput_and_clocks.py":
            if name not in done:
                from pytest_gpuprops import workloads
                out += [(arch, "stress_ffma.cu", workloads.FFMA_DEFINES, None), (arch, "stream_bandwidth.cu", workloads.L2_DEFINES, None),
                        (arch, "stream_bandwidth.cu", workloads.DRAM_DEFINES, None)]
                if arch == "sm_90":
                    out += [(specs.WGMMA_ARCH, "stress_ffma.cu", workloads.wgmma_defines(dt), None) for dt in workloads.WGMMA_DTYPES]
        elif name in shared_by_file:
            if name not in done:
                out += [(arch, s.source, s.defines, s) for s in shared_by_file[name].values()]
        else:
            shared = True
        done.add(name)
    if shared:
        out += [(arch, s.source, s.defines, s) for s in specs.launched().values()]
    return out


def _start_ncu_profiles(config, gpu_items) -> None:
    """Start, in the background, the ncu profiles the selected tests ask for (a module function
    ``ncu_profiles(item)``: test_tensorcore.py), so ncu's start-up overlaps the compiles and reads
    below and the first tests; the profiled process takes the GPU's lock around its launches, so
    nothing is measured beside them (pytest_gpuprops.launch). Not under pytest-xdist
    (a worker may never run the test), unless each worker runs every test on a GPU of its own."""
    from pytest_gpuprops import plugin
    state = plugin.session_state(config)
    if state.worker_id and not state.gpus_option:
        return
    started = set()
    for item in gpu_items:
        for specs_, metrics in getattr(getattr(item, "module", None), "ncu_profiles", lambda _: [])(item):
            key = (tuple(s.label() for s in specs_), tuple(metrics))
            if key not in started:
                started.add(key)
                try:
                    state.start_ncu(specs_, metrics)
                except Exception:  # the test profiles for itself, and reports what went wrong
                    return


def _gpu(config):
    """(arch, kernels folder, cubin cache) of the GPU under test, or None where there is none.
    Asks what the plugin asks anyway before the first GPU test (through the same functions)."""
    from pytest_gpuprops import devices
    index = getattr(config.option, "gpuprops_gpu", 0) or 0
    if devices.gpu_unavailable_reason(index) is not None:
        return None
    try:
        arch = devices.gpu_info(index).arch
    except devices.GpuUnavailable:
        return None
    kernels = getattr(config.option, "gpuprops_kernels", None) or Path(str(config.rootpath)) / "kernels"
    return arch, Path(kernels), getattr(config.option, "gpuprops_cache", None)


def _prefetch(session) -> None:
    """Compile, in parallel, every build the selected tests will read or launch, read their SASS in
    nvdisasm batches over the cores, and the launched builds as patched for timing in more
    (pytest_gpuprops.prefetch). Static tests: what each selected one compiles; GPU tests: the
    launched builds for the GPU's arch. The tests then find all of it in the caches; what they
    check, and how they measure, is unchanged. Warm, this is file reads."""
    import specs

    from pytest_gpuprops import prefetch
    items = session.items
    launched = specs.launched()
    jobs = []  # (cubin cache folder, [(Build, spec or None)])
    static = [b for i in items if i.get_closest_marker("static") for b in _static_builds(i, specs, launched)]
    if static:
        jobs.append((None, _slowest_first(static, specs)))
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if gpu_items:
        gpu = _gpu(session.config)
        if gpu is not None:
            _start_ncu_profiles(session.config, gpu_items)
            arch, kernels, cache = gpu
            wanted = {}
            for a, src, d, s in _gpu_builds(gpu_items, arch):
                if _fits(src, a):
                    wanted.setdefault(prefetch.Build.of(kernels / src, a, d), s)
            # the wgmma files' own builds (190 of a first run's 220 s of compiling on an H100's host) are
            # made beside the tests before them; not under pytest-xdist, whose workers share one prefetch
            late = set() if hasattr(session.config, "workerinput") else \
                {prefetch.Build.of(kernels / src, a, d) for a, src, d, _ in _gpu_builds(gpu_items, arch, per_test_only=True)}
            beside = [(b, s) for b, s in wanted.items() if b in late]
            if beside and len(beside) < len(wanted):
                prefetch.in_background(_slowest_first(beside, specs), cache_dir=cache)
                wanted = {b: s for b, s in wanted.items() if b not in late}
            jobs.append((cache, _slowest_first(list(wanted.items()), specs)))
    if not jobs:
        return
    from filelock import FileLock

    from pytest_gpuprops import cache as gp_cache
    lock = gp_cache.root() / "prefetch.lock"  # pytest-xdist workers: one compiles, the others read its cache
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock), timeout=1800), prefetch.long_lived():
        for cache, wanted in jobs:
            cubins = prefetch.builds([b for b, _ in wanted], cache_dir=cache)
            prefetch.timing_patches((cubins[b], s) for b, s in wanted if s is not None and b in cubins)


#: the markers a test of a test_static*.py file can carry: a -m expression that names no other marker
#: and is false for them selects none of those tests
_STATIC_FILE_MARKERS = {"static"}
_MARKERS_THEY_LACK = {"gpu", "validation", "arch"}


def pytest_ignore_collect(collection_path, config):
    """``-m "not static"`` (the GPU facts) does not collect the static files' 736 tests only to
    deselect them (about 1.5 s of a warm GPU run). Any other expression collects them as usual."""
    if not (collection_path.name.startswith("test_static") and collection_path.suffix == ".py"):
        return None
    expr = config.getoption("markexpr", "") or ""
    names = set(re.findall(r"[A-Za-z_][\w.]*", expr)) - {"and", "or", "not"}
    if not expr or not names <= _STATIC_FILE_MARKERS | _MARKERS_THEY_LACK:
        return None
    try:
        from _pytest.mark.expression import Expression
        selected = Expression.compile(expr).evaluate(lambda name, **kw: name in _STATIC_FILE_MARKERS)
    except Exception:  # pytest's expression API moved: collect as usual
        return None
    return True if not selected else None


def pytest_terminal_summary(terminalreporter, config):
    """One line: what the prefetch compiled and read, and how long each part took (a first run's
    time is mostly here)."""
    from pytest_gpuprops import prefetch
    if prefetch.timings.builds:
        terminalreporter.write_line(f"gpuprops prefetch: {prefetch.timings.line()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Count the compiles a test makes on its own thread (the builds the prefetch did not foresee:
    specs.launched_by_file or a module's ``_specs_of`` leaves them out); the summary line names them."""
    from pytest_gpuprops import compile as gp_compile
    from pytest_gpuprops import prefetch
    before = len(gp_compile.compiled_here)
    yield
    me = threading.current_thread().name
    prefetch.timings.by_tests += [c for c in gp_compile.compiled_here[before:] if c[3] == me]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session):
    """The prefetch runs once the tests are selected and before the first one, so its time is the
    session's, not the first test's (per-test times stay what each test costs). Under pytest-xdist
    it runs in the workers (the first to take the lock compiles), not in the controller."""
    config = session.config
    xdist_controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if not config.option.collectonly and not xdist_controller:
        try:
            _prefetch(session)
        except OSError:
            pass  # an unwritable cache: the tests compile and read what they need themselves
    yield
