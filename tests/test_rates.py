"""Rate arithmetic (rates.py), every number worked out by hand: work over time in a unit, the L2 read's
value from its windows and their spread, and a stress's own rate over its sustained part."""

import numpy as np
import pytest

from pytest_gpuprops import rates, workloads


def test_per_second_units():
    assert rates.per_second(1e12, 0.5, "TFLOP/s") == 2.0
    assert rates.per_second(3.35e9, 1.0, "GB/s") == pytest.approx(3.35)
    with pytest.raises(ValueError):
        rates.per_second(1.0, 0.0, "GB/s")


def test_a_placed_rate_is_the_mean_of_its_windows_and_the_summary_their_spread():
    assert rates.placement_value([7000.0, 7200.0, 7400.0, 7800.0]) == pytest.approx(7350.0)
    with pytest.raises(ValueError):
        rates.placement_value([])
    # three repeats of four windows: each window steady to 0.1 %, the windows 4.3 % apart
    by_repeat = [[7300.0, 7000.0, 7150.0, 7200.0],
                 [7310.0, 7007.0, 7150.0, 7190.0],
                 [7305.0, 7001.0, 7143.0, 7205.0]]
    s = rates.placement_summary(by_repeat)
    assert s["per_window"] == [7305.0, 7001.0, 7150.0, 7200.0]  # each window's median over the repeats
    assert s["mean"] == pytest.approx(7164.0)
    assert (s["lowest"], s["highest"]) == (7001.0, 7305.0)
    assert s["spread"] == pytest.approx(304.0 / 7164.0)
    assert s["noise"] == pytest.approx(np.std([7305.0, 7001.0, 7150.0, 7200.0], ddof=1) / 7164.0)
    # the repeats' values: one mean each, and these are what the stop rule and the median see
    assert [rates.placement_value(r) for r in by_repeat] == pytest.approx([7162.5, 7164.25, 7163.5])
    with pytest.raises(ValueError, match="all 4 windows"):
        rates.placement_summary([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0]])
    with pytest.raises(ValueError):
        rates.placement_summary([])


def test_one_unlucky_placement_moves_the_mean_by_its_share_only():
    # what the 64 windows are for: one buffer that reads 6 % low moves a single-buffer fact by 6 %, and
    # the mean of 64 windows by 6 % / 64
    lucky = [7400.0] * workloads.L2_PLACEMENTS
    unlucky = [7400.0 * 0.94] + [7400.0] * (workloads.L2_PLACEMENTS - 1)
    moved = rates.placement_value(unlucky) / rates.placement_value(lucky) - 1
    assert moved == pytest.approx(-0.06 / workloads.L2_PLACEMENTS)
    assert abs(moved) < 0.001


def test_sustained_rate_takes_the_launches_that_started_in_the_sustained_part():
    # four launches of 1 s of work each: 0-1, 1-2, 2-3 and 3-5 s (the last one slower)
    spans = [(0, 10**9), (10**9, 2 * 10**9), (2 * 10**9, 3 * 10**9), (3 * 10**9, 5 * 10**9)]
    # the second half starts at 2.5 s: only the last launch, 1e12 FLOP over 2 s
    assert rates.sustained_rate(spans, 1e12, "TFLOP/s") == pytest.approx(0.5)
    assert rates.sustained_rate(spans[:3], 1e12, "TFLOP/s") == pytest.approx(1.0)  # from 1.5 s: the third
    # from 1 s on: three launches over 1-5 s
    assert rates.sustained_rate(spans, 1e12, "TFLOP/s", from_s=1.0) == pytest.approx(0.75)
    assert rates.sustained_rate(spans[:1], 1e12, "TFLOP/s") is None
    assert rates.sustained_rate([(0, 0), (0, 0)], 1e12, "TFLOP/s") is None


def test_window_rates_split_the_second_half_into_equal_windows():
    # twenty launches of 1 s of work each, back to back over 0-20 s; the ones from 15 s on take 2 s
    spans = [(k * 10**9, (k + 1) * 10**9) for k in range(15)] + [(15 * 10**9 + 2 * k * 10**9, 17 * 10**9 + 2 * k * 10**9)
                                                                  for k in range(5)]
    # 0-25 s: the second half is 12.5-25 s, five windows of 2.5 s: launches started at 13, 14 | 15, 17 | 19 | 21 | 23
    assert rates.window_rates(spans, 1e12, "TFLOP/s") == pytest.approx([1.0, 0.5, 0.5, 0.5, 0.5])
    assert rates.window_rates(spans, 1e12, "TFLOP/s", windows=1) == pytest.approx([7 / 12])  # 7 launches, 13-25 s
    assert rates.window_rates(spans[:1], 1e12, "TFLOP/s") == []
    # from 10 s on: 10-25 s in windows of 3 s: 10, 11, 12 | 13, 14, 15 | 17 | 19, 21 | 23
    assert rates.window_rates(spans, 1e12, "TFLOP/s", from_s=10.0) == pytest.approx([1.0, 3 / 4, 1 / 2, 2 / 4, 1 / 2])
    # a window no launch started in: no rates at all, rather than a median over fewer windows
    assert rates.window_rates([(0, 10**9), (10**9, 10 * 10**9)], 1e12, "TFLOP/s") == []


def test_window_launches_are_the_launches_each_rate_window_counts():
    spans = [(k * 10**9, (k + 1) * 10**9) for k in range(15)] + [(15 * 10**9 + 2 * k * 10**9, 17 * 10**9 + 2 * k * 10**9)
                                                                  for k in range(5)]
    # as in the test above: launches started at 13, 14 | 15, 17 | 19 | 21 | 23 s (indices 13, 14 | 15, 16 | ...)
    assert rates.window_launches(spans) == [[13, 14], [15, 16], [17], [18], [19]]
    assert rates.window_launches(spans, windows=1) == [[13, 14, 15, 16, 17, 18, 19]]
    assert rates.window_launches(spans[:1]) == []
    assert rates.window_launches([(0, 10**9), (10**9, 10 * 10**9)]) == []  # a window no launch started in
    assert rates.launches_rate(spans, [15, 16], 1e12, "TFLOP/s") == pytest.approx(0.5)  # 2 launches over 15-19 s


def test_window_pairs_read_each_windows_clock_over_its_own_launches():
    # four launches of 1 s of work: the first two at 1500 MHz, the last two at 1900 (their clocks given per launch)
    spans = [(k * 10**9, (k + 1) * 10**9) for k in range(4)]
    launch_mhz = [1500.0, 1500.0, 1900.0, 1900.0]
    asked = []

    def launches_clock(launches):
        asked.append(list(launches))
        return sum(launch_mhz[i] for i in launches) / len(launches)  # equal-length launches: the plain mean

    pairs = rates.window_pairs(spans, launches_clock, 1e12, "TFLOP/s", windows=2, from_s=0.0)
    assert asked == [[0, 1], [2, 3]]  # the clock is asked of exactly the launches the rate counts
    assert pairs == [(pytest.approx(1.0), 1500.0), (pytest.approx(1.0), 1900.0)]
    assert rates.window_pairs(spans[:1], launches_clock, 1e12, "TFLOP/s") == []


def test_median_pair_keeps_the_median_rate_with_its_own_clock():
    # the median rate (860) ran at 1600 MHz; the median clock (1620) is another window's
    pairs = [(860.0, 1600.0), (870.0, 1640.0), (850.0, 1620.0), (880.0, 1650.0), (840.0, 1617.0)]
    assert rates.median_pair(pairs) == (860.0, 1600.0)
    # an even count: the two middle rates' mean, at their clocks' mean
    assert rates.median_pair([(10.0, 1000.0), (30.0, 1600.0), (20.0, 1400.0), (40.0, 1900.0)]) == (25.0, 1500.0)
    with pytest.raises(ValueError):
        rates.median_pair([])
