"""The SM clock over time (clocks.py) with given numbers: the clock from kernel stamps, clock series
and their summary (sustained, lowest point, ramp), and the NVML sampler with a given reader."""

import time

import pytest

from pytest_gpuprops import clocks

# ----------------------------------------------------------------------------------------------
# the clock from stamps


STAMPS = [  # two blocks, three (clock64, globaltimer) stamps each
    [(1000, 10_000), (1_981_000, 1_010_000), (3_961_000, 2_010_000)],  # 1980 MHz, then 1980 MHz
    [(0, 20_000), (1_500_000, 1_020_000), (1_500_000, 1_020_000)],     # 1500 MHz, then no time passed
]


def test_launch_totals_leave_out_intervals_without_elapsed_time():
    # block 0: two intervals of 1 ms at 1980 MHz; block 1: 1 ms at 1500 MHz, then one in which no time passed
    assert clocks.launch_totals(clocks.stamp_array([STAMPS])) == ([2 * 1_980_000 + 1_500_000], [3_000_000])


def test_stamps_out_of_order_are_an_error():
    with pytest.raises(ValueError, match=r"launch 0, block 0: stamp 1 \(4, 200\) is before stamp 0"):
        clocks.stamp_array([[[(5, 100), (4, 200)]]])
    with pytest.raises(ValueError, match="before stamp"):
        clocks.stamp_array([[[(5, 100), (6, 99)]]])
    with pytest.raises(ValueError, match=r"must be \(launches, blocks, stamps, 2\)"):
        clocks.stamp_array(STAMPS)


def test_a_clock_is_all_cycles_over_all_nanoseconds():
    assert clocks.launches_clock([STAMPS]) == pytest.approx((2 * 1_980_000 + 1_500_000) / 3_000_000 * 1e3)
    assert clocks.totals_mhz([1_755_000], [1_000_000]) == pytest.approx(1755.0)
    with pytest.raises(ValueError, match="unknown"):
        clocks.totals_mhz([], [])


def _intervals(spans):
    """One block of two stamps per (start ns, end ns, cycles) interval, in one launch."""
    return clocks.stamp_array([[[(0, a), (c, b)] for a, b, c in spans]])


def test_the_clock_series_bins_intervals_by_their_midpoint():
    stamps = _intervals([(0, 4_000_000, 4_000_000),             # mid 2 ms -> bin 0, 1000 MHz
                         (4_000_000, 8_000_000, 6_000_000),     # mid 6 ms -> bin 0, 1500 MHz
                         (10_000_000, 14_000_000, 8_000_000),   # mid 12 ms -> bin 1, 2000 MHz
                         (30_000_000, 31_000_000, 1_900_000),   # mid 30.5 ms -> bin 3, 1900 MHz
                         (40_000_000, 40_000_000, 5)])          # no time passed: in no bin
    series = clocks.stamps_series(stamps, t0_ns=0, bin_ns=10_000_000)
    assert series == [(0.005, pytest.approx(1250.0)), (0.015, pytest.approx(2000.0)), (0.035, pytest.approx(1900.0))]
    assert clocks.stamps_series(stamps, t0_ns=-5_000_000, bin_ns=10_000_000)[0] == (0.005, pytest.approx(1000.0))
    with pytest.raises(ValueError, match="bin_ns must be > 0"):
        clocks.stamps_series(stamps, t0_ns=0, bin_ns=0)
    assert clocks.stamps_series(_intervals([(5, 5, 1)]), t0_ns=0, bin_ns=10) == []


def test_midpoints_of_stamps_near_2_to_the_60_land_in_their_bins():
    """%globaltimer reads ~1.76e18 ns: two stamps summed as floats lose their last bits; from t0 in
    integers they do not (an interval ending 1 ns before a bin's edge stays in the bin before)."""
    t0 = 1_764_000_000_123_456_789 + 71_271
    a, b = t0 + 9_990, t0 + 10_009  # midpoint 9_999.5 ns from t0: bin 0 of 10 us
    assert int(((a + b) / 2 - t0) // 10_000) == 1  # as floats it lands in bin 1
    stamps = clocks.stamp_array([[[(0, t0), (1980, t0 + 1_000)], [(0, a), (38, b)]]])
    series = clocks.stamps_series(stamps, t0_ns=t0, bin_ns=10_000)
    assert series == [(5e-06, pytest.approx((1980 + 38) / (1_000 + 19) * 1e3))]


def test_second_half_and_window_means():
    series = [(t / 10, 1000 + t) for t in range(11)]  # 0 .. 1 s
    assert [t for t, _ in clocks.second_half(series)] == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert clocks.second_half([]) == []
    assert clocks.window_means([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 5) == [1.5, 3.5, 5.5, 7.5, 9.5]
    assert clocks.window_means([3, 1], 5) == [3.0, 1.0]
    assert clocks.window_means([], 5) == []
    assert clocks.window_means([5, 1, 9, 7, 3, 8, 3], 2) == [5.5, pytest.approx(14 / 3)]  # [5, 1, 9, 7], [3, 8, 3]
    # a plateau with a dip: the mean counts the dip's time, a median would not
    assert clocks.window_means([1650, 1650, 1650, 1400, 1400], 1) == [1550.0]


def test_the_sustained_clock_from_a_given_time_on():
    # 0-6 s: 1000 MHz for the first second (the cap settling), then 1600 MHz
    series = [(t / 100, 1000.0 if t < 100 else 1600.0) for t in range(601)]
    assert clocks.summarize_clock(series, from_s=1.0).windows_mhz == [1600.0] * 5
    assert clocks.summarize_clock(series).sustained_mhz == 1600.0  # the second half, 3-6 s
    assert clocks.summarize_clock(series, from_s=0.0).windows_mhz[0] < 1600.0  # the first window takes in the settling
    with pytest.raises(ValueError, match="before its sustained part"):
        clocks.summarize_clock(series, from_s=7.0)


def test_ramp_time_is_the_first_point_at_95_percent():
    series = [(0.005, 1000.0), (0.015, 1500.0), (0.025, 1880.0), (0.035, 1890.0), (0.045, 1700.0)]
    assert clocks.ramp_time_s(series, 1980.0) == 0.035  # 0.95 x 1980 = 1881
    assert clocks.ramp_time_s(series, 1980.0, frac=0.75) == 0.015
    assert clocks.ramp_time_s(series, 3000.0) is None


def test_summarize_clock_ramp_then_a_dip_under_load():
    # 0.2 s: 1000 MHz ramping over the first 30 ms, then 1980 with one 1800 dip at 150 ms
    series = [(t / 1000, 1000.0 + 980 * min(1.0, t / 30)) for t in range(5, 200, 10)]
    series = [(t, 1800.0 if abs(t - 0.155) < 1e-9 else mhz) for t, mhz in series]
    s = clocks.summarize_clock(series)
    assert s.sustained_mhz == 1980.0
    assert s.ramp_s == 0.035  # the first bin at >= 1881 MHz (25 ms: 1816.7, 35 ms: 1980)
    assert s.min_mhz == 1800.0  # the dip, after the ramp
    assert s.start_mhz == pytest.approx(1000 + 980 * 5 / 30)
    assert len(s.windows_mhz) == 5 and s.points == 20
    assert s.as_dict()["ramp_s"] == 0.035


def test_summarize_clock_that_never_ramps_takes_its_minimum_from_the_second_half():
    s = clocks.summarize_clock([(0.0, 100.0), (1.0, 1000.0), (2.0, 900.0), (3.0, 1100.0)])
    assert s.sustained_mhz == 1000.0 and s.ramp_s == 1.0 and s.min_mhz == 900.0
    with pytest.raises(ValueError):
        clocks.summarize_clock([])


def test_early_sustained_is_the_same_statistic_from_one_second_to_half_the_stress_on():
    # a 10-s stress: 1650 MHz from 1 s to 6 s, 1600 MHz after (a slower thermal drift)
    series = [(t / 100, 1980.0 if t < 10 else 1650.0 if t < 600 else 1600.0) for t in range(1000)]
    assert clocks.early_sustained(series, 10.0) == pytest.approx(1650.0)
    assert clocks.summarize_clock(series).sustained_mhz == pytest.approx(1600.0)
    assert clocks.early_sustained(series[:500], 10.0) is None  # the series ends before 6 s
    # a 2-s stress: 1 s to 2 s, the second half itself
    short = [(t / 100, 1980.0) for t in range(201)]
    assert clocks.early_sustained(short, 2.0) == pytest.approx(1980.0)


# ----------------------------------------------------------------------------------------------
# the NVML sampler


def test_clock_sampler_reads_in_a_thread_and_counts_time_from_the_mark():
    reads = iter([([], 345), (["sw_power_cap"], 1755), (["sw_power_cap", "hw_slowdown"], 1650)] + [([], 1980)] * 10_000)
    with clocks.ClockSampler(lambda: next(reads), period_s=0.002) as s:
        time.sleep(0.03)
        t0 = s.mark()
        time.sleep(0.03)
    assert len(s.samples) >= 5
    assert s.reasons() == ["hw_slowdown", "sw_power_cap"]
    assert s.reasons(0.0) == []  # the throttled samples came before the mark
    assert [m for _, m in s.series()][:3] == [345.0, 1755.0, 1650.0]
    late = s.series(0.0)
    assert late and all(t >= 0 and m == 1980.0 for t, m in late)
    assert s.t0 == t0


def test_clock_sampler_survives_a_reader_that_fails():
    def broken():
        raise RuntimeError("NVML gone")
    with clocks.ClockSampler(broken, period_s=0.001) as s:
        time.sleep(0.01)
    assert s.samples == [] and s.series() == [] and s.reasons() == []


def test_clock_sampler_keeps_samples_without_a_clock_for_their_reasons():
    with clocks.ClockSampler(lambda: (["sw_thermal_slowdown"], None), period_s=0.001) as s:
        time.sleep(0.005)
    assert s.series() == [] and s.reasons() == ["sw_thermal_slowdown"]


def test_launches_clock_weights_each_launch_by_its_time():
    # one launch of 1 ms at 1980 MHz and one of 3 ms at 1500 MHz: (1.98M + 4.5M) cycles over 4 ms
    fast = [[(0, 0), (1_980_000, 1_000_000)]]
    slow = [[(10_000_000, 2_000_000), (14_500_000, 5_000_000)]]
    assert clocks.launches_clock([fast, slow]) == pytest.approx(1620.0)
    assert clocks.launches_clock([fast]) == pytest.approx(1980.0)
    with pytest.raises(ValueError, match="must be .launches, blocks, stamps, 2."):
        clocks.launches_clock(fast)


def test_launches_clock_is_the_clock_of_every_launch_s_intervals():
    # STAMPS as two launches (the second one 5 ms later, at 1755 MHz), an interval without time left out
    later = [[(c + 9_000_000 + (g - 10_000) * 1755 // 1000, g + 5_000_000) for c, g in block] for block in STAMPS]
    totals = clocks.launch_totals(clocks.stamp_array([STAMPS, later]))
    assert totals[1] == [3_000_000, 3_000_000]
    assert clocks.launches_clock([STAMPS, later]) == pytest.approx(sum(totals[0]) / 6_000_000 * 1e3, rel=1e-12)
    with pytest.raises(ValueError, match=r"launch 1, block 0: stamp 1 \(4, 200\) is before stamp 0 \(5, 100\)"):
        clocks.launches_clock([[[(0, 0), (1, 1)]], [[(5, 100), (4, 200)]]])
    with pytest.raises(ValueError, match="unknown"):
        clocks.launches_clock([[[(0, 100), (1000, 100)]]])  # %globaltimer never moved
