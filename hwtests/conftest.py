"""hwtests: every file is a list of facts. The schedule helpers live beside them (schedule.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

KERNELS = Path(__file__).parent.parent / "kernels"
#: Below this many selected GPU tests (``-k lds_latency``), each test compiles and reads only what it
#: launches; a batch of every launched build would cost more than it saves.
_GPU_PREFETCH_MIN_TESTS = 20


def _fits(source: str, arch: str) -> bool:
    from pytest_gpuprops.compile import SUPPORTED_ARCHES
    return arch in SUPPORTED_ARCHES and not (source == "hmma_16816.cu" and arch == "sm_75")  # mma needs sm_80


def _static_builds(item, specs, launched):
    """What one static test compiles: [(Build, KernelSpec to patch for timing, or None)]. A copy of
    what test_static*.py do (a test this does not foresee compiles and reads its builds itself, as
    before, only not in the batch)."""
    from pytest_gpuprops.prefetch import Build
    params = getattr(getattr(item, "callspec", None), "params", {})
    arch, name = params.get("arch"), item.originalname
    if arch is None:
        return []
    if name == "test_every_kernel_control_code_round_trips":
        return [(Build.of(src, arch), None) for src in sorted(KERNELS.glob("*.cu")) if _fits(src.name, arch)]
    if name == "test_launched_region_is_clean_and_as_intended" and params.get("spec_id") in launched:
        spec = launched[params["spec_id"]]
        return [(Build.of(KERNELS / spec.source, arch, spec.defines), spec)]
    if name == "test_wgmma_region_holds_the_intended_hgmma" and arch == specs.WGMMA_ARCH:
        spec = specs.wgmma_builds().get(params.get("build_id"))
        return [(Build.of(KERNELS / spec.source, arch, spec.defines), spec)] if spec else []
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


def _gpu(config):
    """(arch, kernels folder, cubin cache) of the GPU under test, or None where there is none.
    Asks what the plugin asks anyway before the first GPU test (through the same functions)."""
    from pytest_gpuprops import measure
    index = getattr(config.option, "gpuprops_gpu", 0) or 0
    if measure.gpu_unavailable_reason(index) is not None:
        return None
    try:
        arch = measure.gpu_info(index).arch
    except measure.GpuUnavailable:
        return None
    kernels = getattr(config.option, "gpuprops_kernels", None) or Path(str(config.rootpath)) / "kernels"
    return arch, Path(kernels), getattr(config.option, "gpuprops_cache", None)


def _prefetch(session) -> None:
    """Compile, in parallel, every build the selected tests will read or launch, read their SASS in
    one nvdisasm batch per arch, and the launched builds as patched for timing in one more
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
    if len(gpu_items) >= _GPU_PREFETCH_MIN_TESTS:
        gpu = _gpu(session.config)
        if gpu is not None:
            arch, kernels, cache = gpu
            # what the Runner launches: every launched build (the hypothesis examples draw from the
            # same builds), the clock-read overhead kernel and the SM clock kernel; and the wgmma
            # builds, compiled for sm_90a
            wanted = [(prefetch.Build.of(kernels / "sm_clock_rate.cu", arch), None)]
            wanted += [(prefetch.Build.of(kernels / s.source, arch, s.defines), s) for s in launched.values()
                       if _fits(s.source, arch)]
            if arch == "sm_90" and any(i.path.name == "test_wgmma.py" for i in gpu_items):
                wanted += [(prefetch.Build.of(kernels / s.source, specs.WGMMA_ARCH, s.defines), s)
                           for s in specs.wgmma_builds().values()]
            jobs.append((cache, _slowest_first(wanted, specs)))
    if not jobs:
        return
    from filelock import FileLock

    from pytest_gpuprops import cache as gp_cache
    lock = gp_cache.root() / "prefetch.lock"  # pytest-xdist workers: one compiles, the others read its cache
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock), timeout=1800):
        for cache, wanted in jobs:
            cubins = prefetch.builds([b for b, _ in wanted], cache_dir=cache)
            prefetch.timing_patches((cubins[b], s) for b, s in wanted if s is not None and b in cubins)


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
