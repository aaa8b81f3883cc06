"""The measure layer (measure.py) without a GPU: what a Measurement reports (its statistics, whether
it settled, its summary and dict), with given numbers. Runner itself needs a GPU (hwtests/); its
arithmetic is stats.py's (tests/test_stats.py); the order of its steps is checked on stand-ins."""

import pytest

from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.stats import relative_noise

# ----------------------------------------------------------------------------------------------
# Measurement


def _m(values, **kw):
    return Measurement.given("x", values, **kw)


def test_measurement_statistics():
    m = _m([3.0, 1.0, 2.0, 10.0])
    assert (m.n, m.median, m.min, m.max) == (4, 2.5, 1.0, 10.0)
    assert m.noise == pytest.approx(relative_noise([3.0, 1.0, 2.0, 10.0]))


def test_settled_is_noise_at_or_under_the_target():
    values = [9.0, 11.0, 9.0, 11.0, 10.0]
    assert _m(values, noise_target=0.1).settled
    assert not _m(values, noise_target=0.0999).settled
    assert _m([5.0], noise_target=0.0).settled


def test_given_defaults():
    m = Measurement.given("lds", [1.0])
    assert (m.name, m.unit, m.stop_reason, m.noise_target, m.overhead_cycles) == ("lds", "cycles", "converged", 0.01, 0.0)
    assert (m.sm_clock_mhz, m.throttle, m.kernel, m.launch, m.per_warp) == (None, [], "(given)", {}, [])
    assert Measurement.given("bw", [1.0], unit="B/clk", stop_reason="sample cap").unit == "B/clk"


def test_as_dict_carries_the_statistics_and_copies_the_lists():
    m = _m([9.0, 11.0, 9.0, 11.0, 10.0], per_warp=[1.0, 2.0], launch={"grid": 1}, throttle=["hw_slowdown"])
    m.remeasure = lambda: m
    d = m.as_dict()
    assert "remeasure" not in d
    assert (d["median"], d["min"], d["max"], d["n"]) == (10.0, 9.0, 11.0, 5)
    assert d["noise"] == pytest.approx(0.1)
    assert d["values"] == m.values and d["values"] is not m.values
    assert d["per_warp"] == [1.0, 2.0] and d["per_warp"] is not m.per_warp
    assert d["launch"] == {"grid": 1} and d["launch"] is not m.launch
    assert d["throttle"] == ["hw_slowdown"] and d["name"] == "x" and d["stop_reason"] == "converged"


def test_measurement_summary():
    m = _m([9.0, 11.0, 9.0, 11.0, 10.0], stop_reason="time budget", unit="B/clk")
    assert m.summary() == "10.000 B/clk (min 9.000, max 11.000, noise 10.00%, n=5, time budget)"


def test_the_session_clock_is_the_extra_cycles_of_the_longer_spin_over_its_extra_host_time():
    # H100 GPU-da4c75fd, 2026-11-26 (a stand-alone probe): a 20 ms spin counted 39.6 M cycles in 20.055 ms
    # (1974.6 MHz: the launch's and the wait's ~55 us are in that time), a 40 ms spin 79.2 M in 40.055 ms
    from pytest_gpuprops.measure import clock_from_spins
    spins = [(39_600_000, 20.055), (79_200_000, 40.055)]
    assert clock_from_spins(spins) == pytest.approx(1980.0)
    assert clock_from_spins(spins[::-1]) == pytest.approx(1980.0)  # in either order
    assert 39_600_000 / 20.055 / 1000 < 1975.0  # one spin over its time reads the launch's cost as time
    nan = clock_from_spins([(1, 5.0), (2, 5.0)])
    assert nan != nan


def test_a_gated_clock_reading_is_refused_where_the_host_queued_slower_than_the_gate_ran():
    # the spins and their events are queued behind a 20 ms gate: queued within it, the GPU ran them back to
    # back; queued slower (a host busy compiling), the events may hold the host's wait
    from pytest_gpuprops.measure import gated_clock
    spins = [(99_000_000, 50.0), (198_000_000, 100.0)]
    assert gated_clock(spins, queued_ms=0.4, gate_ms=20.0) == pytest.approx(1980.0)
    assert gated_clock(spins, queued_ms=20.0, gate_ms=20.0) is None
    assert gated_clock(spins, queued_ms=35.0, gate_ms=20.0) is None


def test_a_measurement_whose_spread_is_interquartile_settles_where_one_slow_repeat_is_all_that_moved():
    one_slow = [51.91, 52.09, 52.12, 27.66, 50.32, 51.98, 51.45, 51.98, 52.11, 52.05, 51.99, 52.15]
    std = _m(one_slow, noise_target=0.02)
    iqr = _m(one_slow, noise_target=0.02, spread="iqr")
    assert not std.settled and iqr.settled and iqr.reading == std.reading
    assert "(interquartile)" in iqr.summary() and "(interquartile)" not in std.summary()
    assert iqr.as_dict()["spread"] == "iqr" and iqr.as_dict()["noise"] == iqr.noise
    with pytest.raises(ValueError, match="spread 'mad'"):
        _m([1.0, 2.0], spread="mad").summary()


# ----------------------------------------------------------------------------------------------
# Runner.measure's order, on stand-ins for the GPU


def _stand_in_runner(monkeypatch, launch_pairs, *, index=0, session_clock=1980.0, lock=None):
    """A measure.Runner whose GPU calls are stand-ins: ``launch_pairs(spec, args)`` returns a launch's stamps
    (a numpy array a warp), ``lock(index)`` is the GPU's lock (none held by default)."""
    import contextlib
    from types import SimpleNamespace

    from pytest_gpuprops import devices, gpulock, measure
    from pytest_gpuprops.stats import StopRule

    monkeypatch.setattr(gpulock, "gpu_lock", lock or (lambda index: contextlib.nullcontext()))
    monkeypatch.setattr(devices, "throttle_reasons", lambda info: ([], None))
    r = object.__new__(measure.Runner)
    r.info, r.cp, r.stop, r.refused_session_clock_mhz = SimpleNamespace(index=index), None, StopRule(), None
    r.clock_overhead = lambda: 2.0
    r.build = lambda spec: (b"cubin", [])
    r.load = lambda cubin, kernel: "fn"
    r.session_sm_clock_mhz = lambda: session_clock
    r.launch_pairs = lambda fn, spec, args: launch_pairs(spec, args)
    return r


def test_a_measurement_builds_its_arguments_inside_the_gpu_s_lock(monkeypatch):
    """A spec's arguments may warm a footprint into L2 (specs.global_chase warm="l2"); built before the lock,
    another process's pair test could stream a peer copy through the GPU's L2 in between (an L2 hit's p10
    read DRAM's 541 cycles on H100 GPU-97530287, 2026-11-26). So they are built with the lock held."""
    import contextlib

    import numpy as np

    from pytest_gpuprops.kernel_spec import KernelSpec
    from pytest_gpuprops.stats import StopRule

    held, events = [], []

    @contextlib.contextmanager
    def lock(index):
        held.append(index)
        events.append("locked")
        yield
        events.append("released")
        held.pop()
    r = _stand_in_runner(monkeypatch, lambda spec, args: (events.append(("launch", args)), np.array([[0, 102]]))[1],
                         index=3, lock=lock)

    def args(cp):
        events.append(("args", list(held)))
        return ("warmed",)
    spec = KernelSpec("global_chase.cu", "global_chase", {}, args=args)
    m = r.measure("l2 per hop", spec, divisor=1, stop=StopRule(noise_target=1.0, min_samples=2, max_samples=2))
    assert m.values == [100.0, 100.0]
    assert events[:3] == ["locked", ("args", [3]), ("launch", ("warmed",))] and events[-1] == "released"


def test_a_build_with_lengths_is_measured_as_the_slope_between_its_two_chain_lengths(monkeypatch):
    """KernelSpec.lengths: every launch of the measurement is a pair, the chain's count appended to the
    arguments (the short count for the warm-up), and a value is the difference of the two spans over the
    instructions between them, so an edge that moves from launch to launch (here 0 or 90 cycles, in both
    launches of a pair alike) does not reach it; the launch info says the counts."""
    import numpy as np

    from pytest_gpuprops.kernel_spec import KernelSpec
    from pytest_gpuprops.stats import StopRule

    calls = []
    edges = iter([0, 0, 0, 90, 90, 0, 0, 90, 90])  # the warm-up, then (long, short) pairs

    def launch(spec, args):
        calls.append(args[1:])
        count = int(args[-1])
        return np.array([[1000, 1000 + next(edges) + count * 128 * 100]])  # 100 instructions a pass
    r = _stand_in_runner(monkeypatch, launch)
    spec = KernelSpec("wgmma_dtypes.cu", "wgmma_dtypes", {}, args=lambda cp: ("out",), lengths=(1, 5))
    m = r.measure("wgmma", spec, divisor=100, mode="span", stop=StopRule(noise_target=1.0, min_samples=4, max_samples=4))
    assert m.values == [128.0] * 4  # (5 - 1) x 100 instructions apart, 128 cycles each, edges cancelled
    assert [int(c[0]) for c in calls] == [1, 5, 1, 5, 1, 5, 1, 5, 1]
    assert m.launch["lengths"] == [1, 5]
    with pytest.raises(ValueError, match="mode must be 'span'"):
        r.measure("wgmma", spec, divisor=100, mode="warp")


def test_lengths_must_be_two_increasing_repeat_counts():
    from pytest_gpuprops.kernel_spec import KernelSpec
    for bad in [(0, 2), (3, 3), (5, 1), (1, 2, 3)]:
        with pytest.raises(ValueError, match="1 <= short < long"):
            KernelSpec("k.cu", "k", lengths=bad)
    assert KernelSpec("k.cu", "k", lengths=(1, 5)).lengths == (1, 5)


def test_a_timer_build_reports_the_clock_its_launches_ran_at_and_other_builds_do_not(monkeypatch):
    """A TIMER=1 build's launches (clock and %globaltimer pairs a warp) say the SM clock they ran at: the
    launch info's region_clock_mhz (the median over launches) and its range, beside the cycles, never in them."""
    import numpy as np

    from pytest_gpuprops.kernel_spec import KernelSpec
    from pytest_gpuprops.stats import StopRule

    launches = iter([[[0, 199_002, 0, 100_000]], [[0, 198_002, 0, 100_000]], [[0, 199_502, 0, 100_000]],
                     [[0, 198_002, 0, 100_000]]] + [[[0, 102]]] * 4)
    r = _stand_in_runner(monkeypatch, lambda spec, args: np.array(next(launches)), session_clock=1921.7)
    stop = StopRule(noise_target=1.0, min_samples=3, max_samples=3)
    timed = r.measure("dram", KernelSpec("global_chase.cu", "global_chase", {"TIMER": 1}), divisor=100, stop=stop)
    assert timed.values == [1980.0, 1995.0, 1980.0]  # the cycles as ever (the first launch is the warm-up)
    assert timed.launch["region_clock_mhz"] == 1980.0 and timed.launch["region_clock_range_mhz"] == [1980.0, 1995.0]
    assert timed.sm_clock_mhz == 1921.7  # the session's reading stays what the verdicts file states by
    plain = r.measure("l1", KernelSpec("global_chase.cu", "global_chase", {}), divisor=1, stop=stop)
    assert "region_clock_mhz" not in plain.launch


def test_a_clock_beside_build_reads_the_clock_before_its_first_timed_launch_and_after_its_last(monkeypatch):
    """A latency whose path leaves the SM (KernelSpec.clock_beside) says the clock state its launches met: the
    clock read after the warm-up launch and after the last timed one, their mean and range in the launch info;
    other builds read no clock."""
    import numpy as np

    from pytest_gpuprops.kernel_spec import KernelSpec
    from pytest_gpuprops.stats import StopRule

    events = []
    r = _stand_in_runner(monkeypatch, lambda spec, args: (events.append("launch"), np.array([[0, 702]]))[1])
    clocks = iter([1994.3, 1979.9])
    r.clock_beside_mhz = lambda: (events.append("clock"), next(clocks))[1]
    stop = StopRule(noise_target=1.0, min_samples=2, max_samples=2)
    m = r.measure("dram", KernelSpec("global_chase.cu", "global_chase", {}, clock_beside=True), divisor=1, stop=stop)
    assert events == ["launch", "clock", "launch", "launch", "clock"]  # warm-up, clock, timed x 2, clock
    assert m.launch["clock_beside_mhz"] == 1987.1 and m.launch["clock_beside_range_mhz"] == [1979.9, 1994.3]
    assert m.sm_clock_mhz == 1980.0 and m.values == [700.0, 700.0]
    events.clear()
    plain = r.measure("lds", KernelSpec("global_chase.cu", "global_chase", {}), divisor=1, stop=stop)
    assert "clock" not in events and "clock_beside_mhz" not in plain.launch


def test_the_clock_beside_is_the_median_of_its_spins_by_the_global_timer(monkeypatch):
    """Runner.clock_beside_mhz: CLOCK_BESIDE_SPINS spins, each its cycles over its %globaltimer nanoseconds; the
    median keeps one spin that met a jump of the timer out."""
    from gp_testing import StandInCupy

    from pytest_gpuprops import measure

    r = object.__new__(measure.Runner)
    r.cp = StandInCupy()
    r.compile = lambda source: type("Built", (), {"cubin": b""})
    spins = iter([(99_000, 50_016), (99_750, 50_016), (104_000, 50_016)])  # 1979.4, 1994.4, 2079.4 MHz

    def spin(grid, block, args):
        out, spin_ns = args
        assert spin_ns == measure.CLOCK_BESIDE_SPIN_NS
        out[0], out[1] = next(spins)
    loads = []
    r.load = lambda cubin, kernel: (loads.append(kernel), spin)[1]
    assert measure.CLOCK_BESIDE_SPINS == 3 and r.clock_beside_mhz() == 1994.4
    spins = iter([(99_000, 50_016)] * 3)
    assert r.clock_beside_mhz() == 1979.4 and loads == ["sm_clock_rate"]  # the spin kernel loaded once


def test_a_settled_spread_says_how_many_copies_ran_at_the_settled_rate_and_the_dict_keeps_the_reading():
    # six of twelve copies at the settled rate is half: settled (fewer is not)
    half = Measurement.given("h2d", [55.0] * 6 + [50.0] * 6, unit="GB/s", noise_target=0.02, center="settled",
                             spread="settled")
    assert half.settled_share == 0.5 and half.settled and half.unsettled_reason() == ""
    fewer = Measurement.given("h2d", [55.0] * 5 + [50.0] * 7, unit="GB/s", noise_target=0.02, center="settled",
                              spread="settled")
    assert not fewer.settled and fewer.unsettled_reason().startswith("5 of 12 copies at the settled rate, under 50%")
    assert " (interquartile, settled copies), 6 of 12 copies at the settled rate, n=12" in half.summary()
    iqr = Measurement.given("x", [1.0, 2.0, 3.0, 4.0], spread="iqr")
    assert " (interquartile), n=4" in iqr.summary() and "settled" not in iqr.summary()
    # the report keeps the reading the fact was judged by: the settled copies' median, not every copy's
    d = half.as_dict()
    assert d["reading"] == 55.0 and d["median"] == 52.5 and half.reading == 55.0
