"""pytest_gpuprops/reserved.py: buffers a fact spec reserves are allocated as a GPU's runner starts, one a GPU
and name, and the L2 partition sweep takes every point from its one buffer; the plugin asks for the selected
tests' reservations only (a -k that deselects the sweep reserves nothing)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from gp_testing import DeviceWords

from pytest_gpuprops import factspec as fs
from pytest_gpuprops import reserved

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import specs_caches as sc  # noqa: E402
import specs_l2_partitions as l2p  # noqa: E402

L2 = 2 * 2**20  # a small l2CacheSize (the stand-in allocates what the sweep reserves: 5.12 x it)


class StandInCupy:
    """The few CuPy calls reserved.py and the sweep's arguments make, on one of several GPUs (``device``)."""

    def __init__(self, l2=L2):
        self.device, self.made = 0, []
        self.uint64, self.int32, self.asarray, self.zeros = np.uint64, np.int32, np.asarray, np.zeros
        self.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(id=self.device),
                                    runtime=SimpleNamespace(getDeviceProperties=lambda i: {"l2CacheSize": l2},
                                                            deviceSynchronize=lambda: None))

    def empty(self, n, dtype):
        self.made.append((self.device, n))
        return np.zeros(n, dtype=dtype).view(DeviceWords)


@pytest.fixture(autouse=True)
def fresh_registry():
    reserved.clear()
    yield
    reserved.clear()


def test_a_requested_buffer_is_allocated_once_a_gpu_when_its_runner_starts_and_reused_by_every_launch():
    cp = StandInCupy()
    reserved.request("sweep", lambda cp: 1000)
    reserved.request("sweep", lambda cp: 5)  # a second fact of the shared sweep: the first request stands
    assert reserved.allocate_requested(cp) == [("sweep", 1000)] and cp.made == [(0, 125)]
    assert reserved.allocate_requested(cp) == []  # held: a second runner start on the GPU allocates nothing
    first = reserved.buffer(cp, "sweep", 800)
    assert reserved.buffer(cp, "sweep", 1000) is first and cp.made == [(0, 125)]
    cp.device = 1  # the next GPU of a --gpuprops-gpus run: its own buffer
    assert reserved.allocate_requested(cp) == [("sweep", 1000)] and reserved.buffer(cp, "sweep", 8) is not first


def test_an_unreserved_buffer_is_allocated_where_first_asked_and_a_short_one_is_refused():
    cp = StandInCupy()
    made = reserved.buffer(cp, "lone", 17)  # rounded up to whole 8-byte words
    assert made.size == 3 and cp.made == [(0, 3)] and reserved.buffer(cp, "lone", 24) is made
    with pytest.raises(ValueError, match="'lone' holds 24 bytes; a launch asked for 32: the fact spec's reserve"):
        reserved.buffer(cp, "lone", 32)
    with pytest.raises(ValueError, match="of 0 bytes: expected a positive size"):
        reserved.buffer(cp, "empty", 0)
    with pytest.raises(ValueError, match="needs a name"):
        reserved.request("", lambda cp: 8)


def test_the_session_asks_for_the_reservations_of_the_sweeps_it_runs_and_forgets_the_last_sessions():
    reserved.request("from an earlier session", lambda cp: 8)
    names = fs.request_reservations([None, "a test's other parameter", *l2p.FACTS])
    assert names == [l2p.SWEEP]  # three facts, one shared sweep: one buffer
    assert fs.request_reservations([]) == [] and reserved.requested() == []


def test_the_l2_sweep_reserves_its_largest_point_and_takes_every_point_from_that_one_buffer():
    cp = StandInCupy()
    need = l2p.reserve_bytes(cp)
    assert need == max(l2p.placements(p) * l2p.footprint_bytes(L2, p) for p in l2p.SHARES_PCT)
    assert need == 8 * l2p.footprint_bytes(L2, 64)  # the near step's 8 slices of 64 %, more than 140 % once
    assert all(f.reserve is l2p.reserve_bytes for f in l2p.FACTS)
    fs.request_reservations(l2p.FACTS)
    reserved.allocate_requested(cp)
    held = reserved.buffer(cp, l2p.SWEEP, need)
    for pct in (30, 52, 64, 140):
        words, starts, _, hops = l2p.share_chase(pct).args(cp)
        assert words is held and int(hops) == l2p.footprint_bytes(L2, pct) // sc.LINE
        assert len(starts) == l2p.placements(pct)
    assert cp.made == [(0, need // 8)]  # one allocation, at the runner's start


def test_a_run_that_deselects_the_sweep_reserves_nothing(pytester):
    pytester.makepyfile(test_probe="""
        import sys
        sys.path.insert(0, %r)
        import pytest
        import specs_l2_partitions as l2p
        from pytest_gpuprops import reserved

        @pytest.mark.parametrize("fact", l2p.FACTS[:1], ids=lambda f: f.name)
        def test_l2(fact):
            assert reserved.requested() == [l2p.SWEEP]

        def test_plain():
            pass
    """ % str(Path(__file__).parent.parent / "hwtests"))
    pytester.runpytest_inprocess("-k", "test_l2", "-p", "no:cacheprovider").assert_outcomes(passed=1, deselected=1)
    assert reserved.requested() == [l2p.SWEEP]
    pytester.runpytest_inprocess("-k", "test_plain", "-p", "no:cacheprovider").assert_outcomes(passed=1, deselected=1)
    assert reserved.requested() == []
