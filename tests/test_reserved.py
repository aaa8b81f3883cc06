"""pytest_gpuprops/reserved.py: buffers a fact spec reserves are allocated as a GPU's runner starts, one a GPU
and name, and the L2 partition sweep takes every point from its one buffer; the plugin asks for the reservations of
every collected test, whatever -k selects (the buffers before a reserved one decide where it lies)."""

import sys
from pathlib import Path

import pytest
from gp_testing import StandInCupy

from pytest_gpuprops import factspec as fs
from pytest_gpuprops import reserved

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import specs_caches as sc  # noqa: E402
import specs_l2_partitions as l2p  # noqa: E402

L2 = 2 * 2**20  # a small l2CacheSize (the stand-in allocates what the sweep reserves: 5.12 x it)


@pytest.fixture(autouse=True)
def fresh_registry():
    reserved.clear()
    yield
    reserved.clear()


def test_a_requested_buffer_is_allocated_once_a_gpu_when_its_runner_starts_and_reused_by_every_launch():
    cp = StandInCupy(L2)
    reserved.request("sweep", lambda cp: 1000)
    reserved.request("sweep", lambda cp: 5)  # a second fact of the shared sweep: the first request stands
    assert reserved.allocate_requested(cp) == [("sweep", 1000)] and cp.made == [(0, 125)]
    assert reserved.allocate_requested(cp) == []  # held: a second runner start on the GPU allocates nothing
    first = reserved.buffer(cp, "sweep", 800)
    assert reserved.buffer(cp, "sweep", 1000) is first and cp.made == [(0, 125)]
    cp.device = 1  # the next GPU of a --gpuprops-gpus run: its own buffer
    assert reserved.allocate_requested(cp) == [("sweep", 1000)] and reserved.buffer(cp, "sweep", 8) is not first


def test_an_unreserved_buffer_is_allocated_where_first_asked_and_a_short_one_is_refused():
    cp = StandInCupy(L2)
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
    cp = StandInCupy(L2)
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


def test_a_run_reserves_the_buffers_of_every_collected_fact_spec_whatever_k_selects(pytester):
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
    assert reserved.requested() == [l2p.SWEEP]  # deselected, still reserved: the buffers before a reserved one
    # decide where it lies, so every run that collects a fact spec reserves its buffer
    pytester.makepyfile(test_probe="def test_plain():\n    pass\n")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert reserved.requested() == []  # no fact spec collected: nothing reserved


def _l2_line_facts():
    import specs_async
    import specs_sync_units
    return [f for m in (specs_async, specs_sync_units) for f in m.FACTS if f.statistic.lines is not None]


def test_every_line_by_line_l2_fact_takes_its_lines_from_one_buffer_reserved_as_the_runner_starts():
    """The copies, TMA loads and atomics read line by line (memory_levels.line_by_line) lie in one reserved
    buffer, zeroed for each line's launch; a re-measurement on other memory takes a fresh one."""
    import memory_levels as ml
    from gp_testing import DeviceWords
    facts = _l2_line_facts()
    assert len(facts) == 7 and all(f.reserve == ml.L2_LINES_RESERVE for f in facts)
    assert fs.request_reservations(facts) == [ml.L2_LINES_BUFFER]
    cp = StandInCupy(L2)
    reserved.allocate_requested(cp)
    assert cp.made == [(0, ml.L2_SPREAD_BYTES // 8)]
    for k in (0, 1, ml.L2_LINES - 1):
        words = ml.line_by_line(cp, k)
        assert words.data.ptr - DeviceWords.BASE == ml.l2_line_offsets()[k] and not words.base.any()  # all zeroed
        words[:8] = 9  # a launch's writes: the next line's launch gets the buffer zeroed again
    fresh = ml.on_other_memory(lambda: ml.line_by_line(cp, 0))
    assert len(cp.made) == 1 and fresh.base.nbytes == ml.L2_SPREAD_BYTES and not fresh.any()
    assert ml.line_by_line(cp, 0).base is not fresh.base  # after it, the reserved buffer again


def test_a_fact_spec_reserve_is_a_name_and_a_size_function():
    import memory_levels as ml
    fact = _l2_line_facts()[0]
    for bad in (("", ml.L2_LINES_RESERVE[1]), ("l2_lines", 32), ("l2_lines",)):
        with pytest.raises(ValueError, match="expected \\(buffer name, bytes\\(cp\\)\\)"):
            fs.FactSpec(fact.name, fact.launch, fact.region, fact.method, reserve=bad)


def test_the_buffers_are_allocated_largest_first_whatever_order_they_were_asked_in():
    cp = StandInCupy(L2)
    for key, size in (("b_small", 8), ("a_large", 800), ("c_middle", 80), ("d_middle", 80)):
        reserved.request(key, lambda cp, size=size: size)
    assert reserved.allocate_requested(cp) == [("a_large", 800), ("c_middle", 80), ("d_middle", 80), ("b_small", 8)]
    assert reserved.allocate_requested(cp) == []  # held: not again
