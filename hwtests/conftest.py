"""hwtests: every file is a list of facts. The schedule helpers live beside them (schedule.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

KERNELS = Path(__file__).parent.parent / "kernels"
#: Below this many selected static tests, each test compiles and reads what it needs itself.
_PREFETCH_MIN_TESTS = 8


@pytest.fixture(scope="session", autouse=True)
def _static_prefetch(request):
    """Before the first hwtests test: compile, in parallel, every build the selected static tests
    read, for the arches they are parametrized with, read their SASS in one nvdisasm batch per arch,
    and the launched builds as patched for timing in one more (pytest_gpuprops.prefetch). The tests
    then find all of it in the caches; what they check is unchanged. Warm, this is file reads."""
    static = [i for i in request.session.items if i.get_closest_marker("static")]
    if len(static) < _PREFETCH_MIN_TESTS:
        return

    def arches(pick):
        return sorted({i.callspec.params["arch"] for i in static
                       if pick(i.originalname) and hasattr(i, "callspec") and "arch" in i.callspec.params})

    # test_static.py: the control-code round trip reads every kernel with its default defines; the
    # other static tests read the launched builds (which include the schedule tests' builds).
    round_trip = arches(lambda name: name == "test_every_kernel_control_code_round_trips")
    launch = arches(lambda name: name != "test_every_kernel_control_code_round_trips")
    if not round_trip and not launch:
        return
    import specs

    from pytest_gpuprops import prefetch
    from pytest_gpuprops.compile import SUPPORTED_ARCHES

    def fits(source, arch):
        return arch in SUPPORTED_ARCHES and not (source == "hmma_16816.cu" and arch == "sm_75")  # mma needs sm_80

    launched = list(specs.launched().values())
    wanted = [prefetch.Build.of(src, arch) for arch in round_trip for src in sorted(KERNELS.glob("*.cu"))
              if fits(src.name, arch)]
    timed = [(prefetch.Build.of(KERNELS / s.source, arch, s.defines), s) for arch in launch for s in launched
             if fits(s.source, arch)]
    cubins = prefetch.builds(wanted + [b for b, _ in timed])
    prefetch.timing_patches((cubins[b], s) for b, s in timed if b in cubins)
