"""hwtests: every file is a list of facts. The schedule helpers live beside them (schedule.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

KERNELS = Path(__file__).parent.parent / "kernels"
#: Below this many selected static tests, each test compiles and reads what it needs itself.
_PREFETCH_MIN_STATIC = 8
_ROUND_TRIP = "test_every_kernel_control_code_round_trips"


def _fits(source: str, arch: str) -> bool:
    from pytest_gpuprops.compile import SUPPORTED_ARCHES
    return arch in SUPPORTED_ARCHES and not (source == "hmma_16816.cu" and arch == "sm_75")  # mma needs sm_80


def _gpu_arch(request):
    """The arch of the GPU under test, or None (no GPU, or the plugin is off). Asks only what the
    plugin asks anyway before the first GPU test, and skips nothing."""
    try:
        state = request.getfixturevalue("gpuprops_state")
    except pytest.FixtureLookupError:
        return None
    if state.gpu_reason() is not None:
        return None
    return state.info.arch, state.kernels_dir, state.config.option.gpuprops_cache


@pytest.fixture(scope="session", autouse=True)
def _prefetch(request):
    """Before the first hwtests test: compile, in parallel, every build the selected tests will
    launch or read, read their SASS in one nvdisasm batch per arch, and the launched builds as patched
    for timing in one more (pytest_gpuprops.prefetch). Static tests: for the arches they are
    parametrized with; GPU tests: for the GPU's arch. The tests then find all of it in the caches;
    what they check, and how they measure, is unchanged. Warm, this is file reads."""
    import specs

    from pytest_gpuprops import prefetch
    items = request.session.items
    static = [i for i in items if i.get_closest_marker("static")]
    launched = list(specs.launched().values())
    jobs = []  # (kernels folder, cache folder, builds, [(build, spec) to patch for timing])

    if len(static) >= _PREFETCH_MIN_STATIC:
        def arches(pick):
            return sorted({i.callspec.params["arch"] for i in static
                           if pick(i.originalname) and hasattr(i, "callspec") and "arch" in i.callspec.params})

        # test_static.py: the control-code round trip reads every kernel with its default defines;
        # the other static tests read the launched builds (which include the schedule tests' builds).
        round_trip = arches(lambda name: name == _ROUND_TRIP)
        launch = arches(lambda name: name != _ROUND_TRIP)
        plain = [prefetch.Build.of(src, arch) for arch in round_trip for src in sorted(KERNELS.glob("*.cu"))
                 if _fits(src.name, arch)]
        timed = [(prefetch.Build.of(KERNELS / s.source, arch, s.defines), s) for arch in launch for s in launched
                 if _fits(s.source, arch)]
        jobs.append((None, plain + [b for b, _ in timed], timed))

    if any(i.get_closest_marker("gpu") for i in items):
        gpu = _gpu_arch(request)
        if gpu is not None:
            arch, kernels, cache = gpu
            # what the Runner launches: every launched build (the hypothesis examples draw from the
            # same HMMA builds), the clock-read overhead kernel and the SM clock kernel
            timed = [(prefetch.Build.of(Path(kernels) / s.source, arch, s.defines), s) for s in launched
                     if _fits(s.source, arch)]
            jobs.append((cache, [prefetch.Build.of(Path(kernels) / "sm_clock_rate.cu", arch)]
                         + [b for b, _ in timed], timed))

    for cache, builds, timed in jobs:
        cubins = prefetch.builds(builds, cache_dir=cache)
        prefetch.timing_patches((cubins[b], s) for b, s in timed if b in cubins)
