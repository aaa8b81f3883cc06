"""Timing statistics (stats.py), every expected number worked out by hand in the comment beside it:
one launch's value from its clock pairs (per warp, whole span, per block), the noise, the stop rule
and the lowest tier of a latency."""

import math

import pytest

from pytest_gpuprops import stats
from pytest_gpuprops.stats import StopRule, launch_value, lowest_tier, relative_noise, stop_reason

# ----------------------------------------------------------------------------------------------
# launch_value


# three warps; stop - start = 200, 220, 240 cycles; 20 cycles of clock-read overhead; 10 per item
PAIRS = [(100, 300), (110, 330), (120, 360)]


def test_warp_mode_is_the_median_of_per_warp_values():
    value, per_warp = launch_value(PAIRS, 20.0, 10.0, "warp")
    assert per_warp == [18.0, 20.0, 22.0]  # (200-20)/10, (220-20)/10, (240-20)/10
    assert value == 20.0


def test_warp_mode_median_of_an_even_count_is_the_mean_of_the_middle_two():
    value, per_warp = launch_value([(0, 100), (0, 140), (0, 400), (0, 60)], 0.0, 2.0, "warp")
    assert per_warp == [50.0, 70.0, 200.0, 30.0]
    assert value == 60.0  # (50 + 70) / 2, neither median_low nor median_high


def test_span_mode_runs_from_the_first_start_to_the_last_stop():
    # the earliest start (100) is not the first warp's, the latest stop (420) not the last warp's
    pairs = [(130, 300), (100, 420), (120, 360)]
    value, per_warp = launch_value(pairs, 20.0, 10.0, "span")
    assert value == 30.0  # (420 - 100 - 20) / 10
    assert per_warp == [15.0, 30.0, 22.0]  # (170-20)/10, (320-20)/10, (240-20)/10


def test_a_slope_is_the_difference_of_two_spans_over_the_instructions_between_them():
    # the long launch ran the chain 4 more times: span 9100 - 100 = 9000, the short one 2120 - 120 = 2000, each
    # holding the same edges; (9000 - 2000) / (4 x 7) = 250 a chain instruction, whatever the edge
    short = [(120, 2100), (130, 2120)]
    long = [(100, 9050), (140, 9100)]
    value, per_warp = stats.slope_value(short, long, 7.0, 4)
    assert value == 250.0
    assert per_warp == [(8950 - 1980) / 28, (8960 - 1990) / 28]  # each warp's own stop - start, the same difference
    # an edge moved between the two launches moves the slope by its share: 280 cycles more in the long one
    assert stats.slope_value(short, [(100, 9330), (140, 9380)], 7.0, 4)[0] == 260.0
    # one repeat apart and a divisor under 1 are both a slope: (9000 - 2000) / (1 x 0.5)
    assert stats.slope_value(short, long, 0.5, 1)[0] == 14000.0


@pytest.mark.parametrize("short, long, divisor, apart, message", [
    ([], [], 1.0, 1, "same warps"),
    ([(0, 10)], [(0, 20), (0, 30)], 1.0, 1, "same warps"),
    ([(0, 10)], [(0, 20)], 1.0, 0, "repeats_apart"),
    ([(0, 10)], [(0, 20)], 0.0, 1, "divisor"),
])
def test_a_slope_refuses_launches_it_cannot_pair(short, long, divisor, apart, message):
    with pytest.raises(ValueError, match=message):
        stats.slope_value(short, long, divisor, apart)


def test_values_are_floats_and_the_overhead_is_subtracted_before_dividing():
    value, per_warp = launch_value([(0, 10)], 0.5, 4.0, "warp")
    assert value == 2.375 and isinstance(value, float)  # (10 - 0.5) / 4
    value, _ = launch_value([(7, 17)], 0.5, 4.0, "span")
    assert value == 2.375


def test_warp_min_mode_is_the_lowest_per_warp_value():
    """One warp an SM: the nearest SM's latency, not the median SM's (the per-warp values kept for the report)."""
    value, per_warp = launch_value([(0, 230), (5, 205), (9, 269)], 20.0, 10.0, "warp_min")
    assert per_warp == [21.0, 18.0, 24.0] and value == 18.0
    assert launch_value(PAIRS, 20.0, 10.0, "warp_min")[0] < launch_value(PAIRS, 20.0, 10.0, "warp")[0]


def test_warp_mean_mode_is_the_mean_per_warp_value_and_moves_less_than_the_median_between_mixtures():
    """CTAs on every SM, one SM pair each: pairs on discrete levels. Two launches whose mixtures differ by one
    pair: the median jumps half a level gap, the mean moves by the pair's share."""
    value, per_warp = launch_value([(0, 230), (5, 205), (9, 269)], 20.0, 10.0, "warp_mean")
    assert per_warp == [21.0, 18.0, 24.0] and value == 21.0
    a = [176] * 3 + [186] * 3 + [195] * 1 + [205] * 3  # median 186
    b = [176] * 3 + [186] * 2 + [195] * 2 + [205] * 3  # one pair moved a level: median 190.5
    pairs = lambda levels: [(0, x) for x in levels]  # noqa: E731
    med_a, med_b = (launch_value(pairs(x), 0.0, 1.0, "warp")[0] for x in (a, b))
    mean_a, mean_b = (launch_value(pairs(x), 0.0, 1.0, "warp_mean")[0] for x in (a, b))
    assert (med_a, med_b) == (186.0, 190.5) and mean_b - mean_a == pytest.approx(0.9)


def test_a_single_warp_gives_the_same_value_in_both_modes():
    assert launch_value([(1000, 1480)], 30.0, 3.0, "warp")[0] == 150.0
    assert launch_value([(1000, 1480)], 30.0, 3.0, "span")[0] == 150.0


def test_exact_messages():
    with pytest.raises(ValueError, match="^no clock pairs: the launch had no warps$"):
        launch_value([], 0.0, 1.0, "warp")


# ----------------------------------------------------------------------------------------------
# one value per launch: the per-block span (a launch of one cluster, each block on its own SM clock)


def test_block_span_is_the_median_of_each_block_s_own_span():
    # three blocks of two warps, each on its own SM clock (far apart)
    pairs = [(1000, 1500), (1010, 1600), (9_000_000, 9_000_400), (9_000_050, 9_000_420), (5, 905), (0, 800)]
    value, per_warp = launch_value(pairs, 10.0, 2.0, "block_span", warps_per_block=2)
    assert value == (600 - 10) / 2  # spans 600, 420, 905: median 600
    assert per_warp == [(b - a - 10.0) / 2 for a, b in pairs]


def test_block_span_of_one_warp_blocks_is_the_warp_median():
    pairs = [(0, 100), (0, 300), (0, 200)]
    assert launch_value(pairs, 0.0, 1.0, "block_span", warps_per_block=1)[0] == launch_value(pairs, 0.0, 1.0, "warp")[0]


def test_block_span_needs_whole_blocks_and_its_block_size():
    with pytest.raises(ValueError, match="3 clock pairs are not whole blocks of 2 warps"):
        launch_value([(0, 1)] * 3, 0.0, 1.0, "block_span", warps_per_block=2)
    with pytest.raises(ValueError, match="'block_span_ns' with warps_per_block .*, not 'block_span'"):
        launch_value([(0, 1)], 0.0, 1.0, "block_span")


def test_block_span_ns_is_each_block_s_timer_span_and_ignores_the_clock():
    """Two blocks of two warps: each warp's clock pair, then its %globaltimer pair. A block's span in time is
    its warps' first timer start to last timer stop, the clocks and the clock-read overhead aside; the
    median over blocks (of two: their mean)."""
    pairs = [(0, 500, 1000, 1900), (10, 480, 1032, 2000),     # block 0: 1000 .. 2000 ns
             (0, 900, 5000, 6100), (5, 990, 5064, 7400)]      # block 1: 5000 .. 7400 ns
    value, per_warp = launch_value(pairs, 7.0, 2.0, "block_span_ns", warps_per_block=2)
    assert value == (1000 / 2 + 2400 / 2) / 2
    assert per_warp == [(500 - 7) / 2, (470 - 7) / 2, (900 - 7) / 2, (985 - 7) / 2]  # cycles, as every mode's
    # the clock-span modes read the same rows' clock columns only
    assert launch_value(pairs, 0.0, 1.0, "block_span", warps_per_block=2)[0] == (500 + 990) / 2


def test_block_span_ns_refuses_pairs_without_a_timer():
    with pytest.raises(ValueError, match="4 stamps a warp; build the kernel with TIMER=1"):
        launch_value([(0, 1), (0, 2)], 0.0, 1.0, "block_span_ns", warps_per_block=1)
    with pytest.raises(ValueError, match="3 clock pairs are not whole blocks of 2 warps"):
        launch_value([(0, 1, 0, 1)] * 3, 0.0, 1.0, "block_span_ns", warps_per_block=2)


def test_the_other_modes_ignore_the_block_size():
    pairs = [(0, 100), (50, 300)]
    for mode in ("warp", "span"):
        assert launch_value(pairs, 1.0, 1.0, mode, warps_per_block=2) == launch_value(pairs, 1.0, 1.0, mode)


# ----------------------------------------------------------------------------------------------
# relative_noise


@pytest.mark.parametrize("values, noise", [
    ([], 0.0),
    ([5.0], 0.0),
    ([1.0, 2.0, 3.0], 0.5),            # mean 2, sample std-dev 1
    ([-1.0, -2.0, -3.0], 0.5),         # relative to |mean|
    ([1.0, 3.0], math.sqrt(2) / 2),    # sample (n-1) std-dev sqrt(2), not the population's 1
    ([9.0, 11.0, 9.0, 11.0, 10.0], 0.1),  # sum of squares 4 over n-1 = 4: std-dev 1, mean 10
    ([7.0, 7.0, 7.0], 0.0),
])
def test_relative_noise_by_hand(values, noise):
    assert relative_noise(values) == pytest.approx(noise, abs=1e-15)


def test_relative_noise_of_values_around_zero_is_infinite():
    assert relative_noise([1.0, -1.0]) == math.inf


# ----------------------------------------------------------------------------------------------
# stop_reason


RULE = StopRule(noise_target=0.01, min_samples=5, max_samples=8, time_budget_s=2.0)
FLAT = [100.0] * 8
NOISY = [90.0, 110.0] * 4  # noise ~0.107, far over 1 %


def test_the_default_rule():
    assert StopRule() == StopRule(noise_target=0.01, min_samples=5, max_samples=100, time_budget_s=2.0)


def test_below_the_minimum_count_it_goes_on_however_settled_or_late():
    for n in range(1, 5):
        assert stop_reason(FLAT[:n], RULE, 0.0) is None
        assert stop_reason(FLAT[:n], RULE, 1000.0) is None


def test_converged_at_the_minimum_count():
    assert stop_reason(FLAT[:5], RULE, 0.0) == "converged"


def test_noise_exactly_at_the_target_converges():
    values = [9.0, 11.0, 9.0, 11.0, 10.0]  # noise 0.1 exactly (see above)
    assert stop_reason(values, StopRule(0.1, 5, 8, 2.0), 0.0) == "converged"
    assert stop_reason(values, StopRule(0.0999, 5, 8, 2.0), 0.0) is None


def test_time_budget_only_once_it_is_exceeded():
    assert stop_reason(NOISY[:5], RULE, 1.0) is None
    assert stop_reason(NOISY[:5], RULE, 2.0) is None  # spent, not exceeded
    assert stop_reason(NOISY[:5], RULE, 2.001) == "time budget"


def test_sample_cap_at_the_maximum_count():
    assert stop_reason(NOISY[:7], RULE, 0.0) is None
    assert stop_reason(NOISY[:8], RULE, 0.0) == "sample cap"
    assert stop_reason(NOISY + [90.0], RULE, 0.0) == "sample cap"


def test_converged_wins_over_the_budget_and_the_budget_over_the_cap():
    assert stop_reason(FLAT, RULE, 100.0) == "converged"
    assert stop_reason(NOISY, RULE, 100.0) == "time budget"


def test_a_cap_below_the_minimum_still_stops():
    rule = StopRule(noise_target=0.01, min_samples=5, max_samples=3, time_budget_s=2.0)
    assert stop_reason(FLAT[:2], rule, 0.0) is None
    assert stop_reason(FLAT[:3], rule, 0.0) == "sample cap"  # settled, but under the minimum count


def _loop(launches, rule):
    """What Runner.measure does with its launches, here with hand-made clock pairs."""
    values, reason = [], None
    for pairs in launches:
        values.append(launch_value(pairs, 0.0, 10.0, "warp")[0])
        reason = stop_reason(values, rule, 0.0)
        if reason:
            break
    return values, reason


def test_a_measurement_loop_that_converges():
    # 1000/10, median(1000, 1020)/10 = 101, 100: mean 100.33, std-dev 0.577, noise 0.58 % <= 5 %
    launches = [[(0, 1000)], [(0, 1000), (0, 1020)], [(0, 1000)], [(0, 5000)]]
    assert _loop(launches, StopRule(0.05, 3, 6, 1.0)) == ([100.0, 101.0, 100.0], "converged")


def test_a_measurement_loop_that_hits_the_cap():
    # 100.5, 120, then 100s: the 120 keeps the noise over 5 % (7.7 % with six values) until the cap
    launches = [[(0, 1000), (0, 1010)], [(0, 1200)]] + [[(0, 1000)]] * 6
    values, reason = _loop(launches, StopRule(0.05, 3, 6, 1.0))
    assert values == [100.5, 120.0, 100.0, 100.0, 100.0, 100.0] and reason == "sample cap"


# ----------------------------------------------------------------------------------------------
# lowest_tier


def test_lowest_tier_is_the_values_within_8_percent_of_the_smallest():
    assert lowest_tier([270.0, 305.0, 451.0, 268.0, 283.0, 312.0, 290.0]) == [270.0, 268.0, 283.0]  # to 289.44
    assert lowest_tier([300.0, 310.0, 323.0, 325.0]) == [300.0, 310.0, 323.0]  # 324 is the edge
    assert lowest_tier([]) == []



def test_an_unknown_mode_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="no clock pairs"):
        launch_value([], 0.0, 1.0, "warp")
    with pytest.raises(ValueError, match="'warp', 'warp_min', 'warp_mean', 'span'.*'mean'"):
        launch_value(PAIRS, 0.0, 1.0, "mean")


def test_the_robust_noise_is_the_interquartile_spread_and_ignores_a_slow_copy_the_median_ignores():
    from pytest_gpuprops.stats import IQR_PER_SIGMA, robust_relative_noise
    # H100 GPU-e369c733, 2026-11-26: GPU -> host copies under load, one at half speed
    one_slow = [51.91, 52.09, 52.12, 27.66, 50.32, 51.98, 51.45, 51.98, 52.11, 52.05, 51.99, 52.15]
    assert relative_noise(one_slow) > 0.13
    assert robust_relative_noise(one_slow) == pytest.approx(0.0043, abs=0.0002)
    # GPU-2b139b2f's first process on a fresh node: disturbed throughout, its median 3.4 % low
    disturbed = [47.34, 48.81, 51.39, 49.03, 47.02, 49.36, 50.78, 50.49, 49.79, 51.67, 51.41, 51.95]
    assert robust_relative_noise(disturbed) == pytest.approx(0.0358, abs=0.0005) and robust_relative_noise(disturbed) > 0.02
    # by hand: quartiles 2 and 4 of 1..5, median 3
    assert robust_relative_noise([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / IQR_PER_SIGMA / 3.0)
    # under four values it is the standard deviation's
    assert robust_relative_noise([1.0, 2.0, 3.0]) == relative_noise([1.0, 2.0, 3.0])
    assert robust_relative_noise([0.0, 0.0, 0.0, 0.0]) == float("inf")


def test_settled_copies_are_those_within_the_band_of_the_90th_percentile():
    from pytest_gpuprops.stats import SETTLED_BAND, settled_copies
    with pytest.raises(ValueError, match=r"^no copies: a settled rate needs at least one$"):
        settled_copies([])
    assert settled_copies([55.0]) == [55.0]  # one copy is its own top
    assert settled_copies([50.0, 55.0]) == [55.0]  # two: the top is 54.5, between them
    # the inclusive 90th percentile of ten copies, one fast: 101 (an exclusive one, 109, would keep one copy)
    assert settled_copies([100.0] * 9 + [110.0]) == [100.0] * 9 + [110.0]
    # a copy exactly at the band's edge is settled; in their order
    assert settled_copies([50.0] + [100.0] * 9, band=0.5) == [50.0] + [100.0] * 9
    assert settled_copies([100.0, 98.0, 100.0, 100.0]) == [100.0, 100.0, 100.0] and SETTLED_BAND == 0.01


# -- a host link's window: its best series (links.Node.host_window) ----------------------------------


def test_a_host_window_is_read_by_its_best_series_settled_or_not():
    # GPU-8badd6b4's series, 2026-11-27: a whole series settled 2.6 % low, one disturbed (3 of 12 settled)
    low = [53.2, 53.3, 53.2, 53.1, 53.2, 53.3, 53.2, 53.2, 53.3, 53.1, 53.2, 53.2]
    disturbed = [52.4, 52.1, 52.4, 52.4, 53.1, 53.7, 52.6, 52.2, 53.5, 52.5, 52.4, 52.3]
    good = [54.7, 54.4, 54.6, 54.2, 54.6, 54.8, 53.3, 54.9, 54.6, 54.4, 54.7, 54.7]
    assert stats.series_rate(good) == pytest.approx(54.65)  # the copies within 1 % of the 90th percentile
    assert stats.best_series([low, disturbed, good, low]) == (2, good)
    # a series without SETTLED_MIN_SHARE of its copies settled wins over a settled one read lower: the steady
    # series ran a level down (traffic never speeds a copy up); its measurement is then unsettled
    assert stats.series_rate(disturbed) == pytest.approx(53.5) and stats.series_rate(low) == pytest.approx(53.2)
    assert stats.best_series([low, disturbed]) == (1, disturbed)
    assert stats.best_series([disturbed, [x - 1 for x in disturbed]]) == (0, disturbed)
    # ties: the first
    assert stats.best_series([good, list(good)])[0] == 0


@pytest.mark.parametrize("series", [[], [[54.0] * 12, []]])
def test_a_host_window_without_copies_is_refused(series):
    with pytest.raises(ValueError, match="expected series of copies"):
        stats.best_series(series)


def test_a_series_with_half_its_copies_settled_counts_as_settled():
    """SETTLED_MIN_SHARE is inclusive: 6 of 12 copies at the series' top make a settled series, which then wins
    over a lower settled one."""
    half = [55.0] * 6 + [50.0] * 6
    assert len(stats.settled_copies(half)) == 6 and stats.series_rate(half) == 55.0
    low = [54.0] * 12
    assert stats.best_series([low, half]) == (1, half)
    five = [55.0] * 5 + [50.0] * 7  # one copy fewer at the top: not settled, and still the best series
    assert len(stats.settled_copies(five)) < stats.SETTLED_MIN_SHARE * len(five)
    assert stats.best_series([low, five]) == (1, five) and stats.best_series([five, low]) == (0, five)


def test_the_region_clock_is_the_median_over_warps_of_cycles_over_timer_nanoseconds():
    # warp rows: clock start, stop, %globaltimer start, stop; 1980 MHz is 198000 cycles in 100 us
    pairs = [[0, 198_000, 1_000, 101_000], [10, 199_510, 2_000, 102_000], [0, 196_000, 0, 100_000]]
    assert stats.region_clock_mhz(pairs) == pytest.approx(1980.0)
    assert stats.region_clock_mhz([[0, 198_000]]) is None  # no timer pair: a TIMER=0 build
    assert stats.region_clock_mhz([[0, 198_000, 5, 5], [0, 99_000, 0, 50_000]]) == pytest.approx(1980.0)  # no span: left out


def test_the_clock_beside_several_measurements_is_their_median_and_the_range_of_every_read():
    one = {"clock_beside_mhz": 1987.1, "clock_beside_range_mhz": [1979.9, 1994.3]}
    lines = [one, {"clock_beside_mhz": 1980.0, "clock_beside_range_mhz": [1979.8, 1980.1]},
             {"clock_beside_mhz": 1980.2}, {"grid": 1}]
    assert stats.clock_beside_info(lines) == {"clock_beside_mhz": 1980.2, "clock_beside_range_mhz": [1979.8, 1994.3]}
    # reads without ranges (Runner.measure's own before / after): their median and extremes
    assert stats.clock_beside_info([{"clock_beside_mhz": 1994.3}, {"clock_beside_mhz": 1979.9}]) == {
        "clock_beside_mhz": 1987.1, "clock_beside_range_mhz": [1979.9, 1994.3]}
    assert stats.clock_beside_info([{"grid": 1}, {}]) == {}  # no clock read beside: nothing said
    # to 0.1 MHz, the resolution of a 50 us spin's read (0.064 %, 1.3 MHz at 1980)
    assert stats.clock_beside_info([{"clock_beside_mhz": 1979.64}, {"clock_beside_mhz": 1994.76}]) == {
        "clock_beside_mhz": 1987.2, "clock_beside_range_mhz": [1979.6, 1994.8]}
