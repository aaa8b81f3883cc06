"""CPU tests of the helpers in hwtests/ (smem_banks.py, memory_levels.py, specs.py): the
bank-conflict model, the footprint each memory level is chased over, the chase's layout, the sweep
grid and how its knees are read."""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import memory_levels as ml  # noqa: E402
import specs  # noqa: E402
from smem_banks import bank_wavefronts, check_access, lane_words  # noqa: E402

from pytest_gpuprops.stats import relative_noise  # noqa: E402

KIB, MIB = 1024, 1024 * 1024


# ---------------------------------------------------------------------------------------------- banks

@pytest.mark.parametrize("stride_words, vec, wavefronts", [
    (1, 1, 1),    # lane l -> bank l
    (0, 1, 1),    # one word for all lanes: a broadcast
    (2, 1, 2),    # lanes l and l + 16 share bank 2l % 32 with different words
    (3, 1, 1),    # 3 is odd: 32 lanes on 32 banks
    (16, 1, 16),  # banks 0 and 16 only, 16 words each
    (32, 1, 32),  # every lane in bank 0
    (33, 1, 1),
    (2, 2, 2),    # float2 contiguous: 64 words, 2 per bank
    (0, 2, 1),    # one 8-byte word for the whole warp: a broadcast (H100: 1.006 cycles)
    (4, 2, 4),    # lanes l, l + 8, l + 16, l + 24 share banks 4l % 32 and 4l % 32 + 1
    (64, 2, 32),  # banks 0 and 1 only, 32 words each
    (4, 4, 4),    # float4 contiguous: 64 words per half-warp, 2 per bank, 2 + 2
    (0, 4, 2),    # broadcast, once per half-warp (H100: 2.005 cycles)
    (8, 4, 8),    # per half-warp: lanes l, l + 4, l + 8, l + 12 start in the same bank: 4 + 4
    (12, 4, 4),   # per half-warp: 12 l % 32 repeats every 8 lanes: 2 words per bank, 2 + 2
    (128, 4, 32),  # banks 0-3 only, 16 words each per half-warp
])
def test_bank_wavefronts_hand_computed(stride_words, vec, wavefronts):
    assert bank_wavefronts(stride_words, vec) == wavefronts


def test_lane_words_and_access_limits():
    assert lane_words(3, 8, 4) == [24, 25, 26, 27]
    for stride, vec, msg in ((1, 3, "vec must be"), (2, 4, "multiple of vec"), (260, 4, "over the kernel")):
        with pytest.raises(ValueError, match=msg):
            check_access(stride, vec)
    with pytest.raises(ValueError, match="multiple of vec"):
        specs.smem_conflict(2, 3)


@pytest.mark.parametrize("vec", [1, 2, 4])
def test_odd_element_strides_are_conflict_free(vec):
    for s in range(1, 34, 2):
        assert bank_wavefronts(s * vec, vec) == vec


# ---------------------------------------------------------------------------------------------- levels

H100 = {"l2CacheSize": 50 * MIB, "sharedMemPerMultiprocessor": 228 * KIB}
RTX3060 = {"l2CacheSize": 3 * MIB, "sharedMemPerMultiprocessor": 100 * KIB}


def test_h100_footprints():
    s = ml.cache_sizes("sm_90", H100)
    assert (s.l1_min_bytes, s.l1_max_bytes) == (28 * KIB, 256 * KIB)
    assert ml.footprint("l1", s) == 14 * KIB
    assert ml.footprint("l2", s) == 50 * MIB // 8
    assert ml.footprint("dram", s) == 200 * MIB
    assert [ml.level_of(ml.footprint(lv, s), s) for lv in ml.LEVELS] == list(ml.LEVELS)


def test_small_l2_takes_four_times_the_largest_l1():
    s = ml.cache_sizes("sm_86", RTX3060)
    assert ml.footprint("l2", s) == 512 * KIB  # 4 x 128 KiB, over L2/8 = 384 KiB, under L2/2


def test_footprints_outside_their_level_are_refused():
    s = ml.cache_sizes("sm_90", H100)
    for level, nbytes in (("l1", 64 * KIB), ("l2", 512 * KIB), ("l2", 40 * MIB), ("dram", 100 * MIB)):
        with pytest.raises(ValueError, match=f"does not measure {level}"):
            ml.check_footprint(level, nbytes, s)
    assert ml.level_of(100 * KIB, s) is None  # between the smallest and the largest L1: a knee
    tiny = ml.cache_sizes("sm_90", {"l2CacheSize": 1 * MIB, "sharedMemPerMultiprocessor": 228 * KIB})
    with pytest.raises(ValueError, match="does not measure l2"):
        ml.footprint("l2", tiny)  # 4 x 256 KiB is over half of a 1 MiB L2: no footprint is only L2


def test_sizes_need_the_documented_arch_and_the_reported_properties():
    with pytest.raises(ValueError, match="no documented"):
        ml.cache_sizes("sm_100", H100)
    with pytest.raises(ValueError, match="lack l2CacheSize"):
        ml.cache_sizes("sm_90", {"sharedMemPerMultiprocessor": 1})
    with pytest.raises(ValueError, match="leaves no L1"):
        ml.cache_sizes("sm_90", {"l2CacheSize": MIB, "sharedMemPerMultiprocessor": 256 * KIB})


def test_chain_is_one_cycle_over_every_line():
    base, nbytes = 0x7F0000000000, 64 * KIB
    words = np.zeros(nbytes // 8, dtype=np.uint64)
    start = ml.fill_chain(np, words, base, seed=3)
    n = nbytes // ml.NODE_STRIDE
    seen, p = [], start
    for _ in range(n):
        assert (p - base) % ml.NODE_STRIDE == 0 and base <= p < base + nbytes
        seen.append(p)
        p = int(words[(p - base) // 8])
    assert p == start and len(set(seen)) == n
    steps = np.diff(np.array(seen, dtype=np.int64))
    assert (np.abs(steps) >= ml.NODE_STRIDE).all() and (np.abs(steps) == ml.NODE_STRIDE).mean() < 0.05


def test_sweep_grid_is_logarithmic_up_to_four_times_l2():
    s = ml.cache_sizes("sm_90", H100)
    grid = ml.sweep_footprints(s)
    assert grid[0] == 4 * KIB and grid[-1] == 200 * MIB
    assert all(b > a for a, b in zip(grid, grid[1:])) and all(f % ml.NODE_STRIDE == 0 for f in grid)
    ratios = [b / a for a, b in zip(grid, grid[1:-1])]
    assert all(abs(r - 2 ** 0.5) < 0.01 for r in ratios)  # line rounding aside


def test_capacity_knees_from_a_synthetic_sweep():
    s = ml.cache_sizes("sm_90", H100)

    def latency(f):
        return 35.0 if f <= 192 * KIB else 270.0 if f <= 40 * MIB else 700.0
    points = [(f, latency(f)) for f in ml.sweep_footprints(s)]
    l1, l2 = ml.capacity_knees(points, s)
    assert 192 * KIB < l1 <= 272 * KIB and 40 * MIB < l2 <= 57 * MIB


def test_percentiles():
    assert ml.percentile([4, 1, 3, 2], 50) == 2.5 and ml.percentile([1, 2, 3], 100) == 3
    vals = list(range(100))
    assert ml.batch_percentiles(vals, 50, 4) == [48.0, 49.0, 50.0, 51.0]
    with pytest.raises(ValueError, match="too few"):
        ml.batch_percentiles([1, 2, 3], 50, 2)


def test_near_group_is_the_lowest_tier_within_the_band_of_the_smallest():
    tiers = [280.0, 313.0, 281.0, 279.0, 460.0, 314.0, 282.0, 500.0, 280.5, 313.5]
    assert ml.near_group(tiers) == [280.0, 281.0, 279.0, 282.0, 280.5]  # up to 279 x 1.08 = 301.3
    assert ml.near_group(tiers, band=0.13) == [280.0, 313.0, 281.0, 279.0, 314.0, 282.0, 280.5, 313.5]
    assert ml.near_group([]) == []


def test_near_group_batches_take_each_batch_median_of_the_lowest_tier():
    lines = [280.0, 282.0, 313.0, 310.0, 284.0, 286.0, 312.0, 311.0]
    assert ml.near_group_batches(lines, 2) == [282.0, 284.0]  # tier 280, 282, 284, 286: batches 280, 284; 282, 286
    # the tier's lines all at even positions: every batch still gets its share
    assert ml.near_group_batches([280.0, 313.0, 282.0, 310.0, 284.0, 312.0, 286.0, 311.0], 2) == [282.0, 284.0]
    # 7 near lines of 64 (H200 GPU-2cf08462, 2026-11-25) in 4 batches: 2, 2, 2 and 1
    assert ml.near_group_batches([266.0, 272.0, 275.0, 281.0, 283.0, 286.0, 287.0] + [320.0] * 57, 4) == [
        274.5, 279.0, 281.0, 281.0]  # (266, 283), (272, 286), (275, 287), (281,)
    with pytest.raises(ValueError, match="1 of 6 values are in the lowest tier.*too few for 2 batches.*"
                                         "smallest values: 200.0, 282.0"):
        ml.near_group_batches([200.0, 313.0, 282.0, 310.0, 284.0, 312.0], 2)  # one line far below the rest


#: H200 GPU-3c48baa4's 1 KiB TMA copy over the 64 lines (2026-11-27): the process with a large low tier (10
#: copies at 303-317 whose every line was near) and the next, with 2
TMA_1K_LOW_TIER_PROCESS = [339, 347, 339, 346, 310, 344, 341, 338, 345, 343, 340, 344, 337, 342, 339, 349, 309, 334,
                           347, 337, 352, 336, 352, 339, 355, 345, 337, 344, 336, 343, 328, 343, 305, 310, 313, 337,
                           343, 343, 340, 342, 338, 341, 350, 333, 353, 340, 341, 338, 312, 341, 306, 340, 303, 335,
                           354, 339, 314, 317, 332, 341, 331, 338, 346, 346]
TMA_1K_NEXT_PROCESS = [354, 314, 349, 339, 337, 337, 347, 354, 354, 331, 347, 328, 347, 340, 336, 348, 339, 343, 348,
                       345, 350, 339, 333, 348, 335, 342, 343, 352, 306, 338, 353, 339, 348, 346, 347, 341, 350, 346,
                       349, 350, 355, 337, 340, 337, 342, 348, 344, 351, 345, 340, 347, 345, 346, 341, 348, 349, 349,
                       346, 327, 340, 342, 335, 352, 326]


def test_a_copy_of_many_lines_is_read_above_its_low_tier_so_the_tiers_share_moves_it_less():
    """The low tier's share follows the allocation: over every line the two processes read 340.25 and 345.75
    (1.6 %, a false MOVED against the 1 % same-unit band); above the low tier 341.0 and 343.75 (0.8 %)."""
    import statistics
    every = [statistics.median(b) for b in (ml.upper_tier(v, gap=1.0) for v in (TMA_1K_LOW_TIER_PROCESS, TMA_1K_NEXT_PROCESS))]
    assert ml.upper_tier(TMA_1K_LOW_TIER_PROCESS, gap=1.0) == TMA_1K_LOW_TIER_PROCESS  # no gap that wide: all
    low = ml.upper_tier(TMA_1K_LOW_TIER_PROCESS)
    assert len(low) == 54 and min(low) == 328 and low == [v for v in TMA_1K_LOW_TIER_PROCESS if v >= 328]  # 317 -> 328
    assert len(ml.upper_tier(TMA_1K_NEXT_PROCESS)) == 62  # 306 and 314 under the gap to 326
    batches = [statistics.median(ml.near_group_batches(v, 4, band=ml.ALL_LINES))
               for v in (TMA_1K_LOW_TIER_PROCESS, TMA_1K_NEXT_PROCESS)]
    assert batches == [341.0, 343.75]
    assert abs(batches[1] - batches[0]) / batches[0] < 0.01 < abs(every[1] - every[0]) / every[0]
    # one tier (a 4 KiB copy's lines, or a gap under 3 %): every line, in order
    one = [367.0, 365.5, 368.0, 356.0 * 1.029, 370.0, 366.0]
    assert ml.upper_tier(one) == one and ml.upper_tier([]) == [] and ml.upper_tier([300.0]) == [300.0]
    # a gap in the upper half is not a low tier: the slowest lines are the copy's own
    assert ml.upper_tier([300.0, 301.0, 302.0, 400.0]) == [300.0, 301.0, 302.0, 400.0]


def test_near_tier_latency_measures_every_line_afresh_and_asserts_the_lowest_tier():
    """Every line is measured with its own spec and the line stop rule; the value is the lowest tier's
    median per batch; the slower tiers are in the launch info only; a re-measurement measures again."""
    from pytest_gpuprops.measure import Measurement
    far = {k for k in range(ml.L2_LINES) if k % 3 == 0}  # a third of the lines in the far partition
    calls = []

    class Fake:
        def measure(self, name, spec, *, divisor, stop):
            calls.append((name, spec, divisor, stop))
            cycles = (313.0 if spec in far else 280.0 + spec % 4) / divisor
            clock = 1980.0 if spec < 24 else 1995.0  # the clock beside each line (KernelSpec.clock_beside)
            return Measurement.given(name, [cycles] * 5, overhead_cycles=2.0, sm_clock_mhz=1980.0,
                                     throttle=["sw_power_cap"] if spec == 5 else [], kernel="k",
                                     launch={"grid": 1, "clock_beside_mhz": clock,
                                             "clock_beside_range_mhz": [clock - 0.2, clock + 0.2]})

    m = ml.near_tier_latency(Fake(), "x_latency_cycles", lambda k: k, divisor=2)
    assert [c[1] for c in calls] == list(range(ml.L2_LINES)) and {c[2] for c in calls} == {2}
    assert {c[3] for c in calls} == {ml.LINE_STOP}
    assert [c[0] for c in calls[:2]] == ["x_latency_cycles line at +0 B", f"x_latency_cycles line at +{ml.L2_LINE_STRIDE} B"]
    assert max(m.values) < 142.0 and min(m.values) >= 140.0  # (280..283) / 2: never the far lines' 156.5
    assert m.launch["line_cycles"][0] == 156.5 and m.launch["lines"] == ml.L2_LINES and m.launch["grid"] == 1
    assert m.launch["p90_over_lines_cycles"] == 156.5 and m.launch["p10_over_lines_cycles"] < 141.0
    assert m.throttle == ["sw_power_cap"] and m.noise_target == ml.NEAR_NOISE and len(m.values) == ml.NEAR_BATCHES
    # the clock the lines met: their median and every read's range, not line 0's alone
    assert m.launch["clock_beside_mhz"] == 1995.0 and m.launch["clock_beside_range_mhz"] == [1979.8, 1995.2]
    calls.clear()
    again = m.remeasure()
    assert len(calls) == ml.L2_LINES and again.values == m.values


def test_a_re_measurement_over_lines_holds_one_more_buffer_so_its_lines_get_other_memory(monkeypatch):
    """CuPy's pool hands freed memory out again: holding a buffer of the lines' size while measuring again
    makes the re-measurement's buffers other memory (another allocation's slices)."""
    import sys
    import types
    events = []

    class Held:
        def __init__(self, nbytes):
            self.nbytes = nbytes
            events.append(("held", nbytes))

        def __del__(self):
            events.append(("freed", self.nbytes))

    fake = types.SimpleNamespace(uint8="uint8", empty=lambda nbytes, dtype: Held(nbytes))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert ml.on_other_memory(lambda: events.append(("measured", None)) or 7) == 7
    assert events == [("held", ml.L2_SPREAD_BYTES), ("measured", None), ("freed", ml.L2_SPREAD_BYTES)]


# ---------------------------------------------------------------------------------------------- per-hop modes

#: 2048 L2 hops shaped as the H100 gave them (GPU-ce7928d2, 2026-11-26): 85 % in a near mode 245..304
#: cycles, 15 % in a far mode 415..485, nothing between; every seventh hop far, spread through the run
HOPS_H100 = [415.0 + 70 * ((k * 37) % 100) / 99 if k % 7 == 3 else 245.0 + 59 * ((k * 53) % 100) / 99
             for k in range(2048)]


def test_hop_modes_split_at_the_widest_gap_and_refuse_one_mode():
    near, far, (lo, hi, gap) = ml.hop_modes(HOPS_H100)
    assert max(near) == lo <= 304.0 and min(far) == hi >= 415.0 and gap > 0.36
    assert len(far) == sum(k % 7 == 3 for k in range(2048)) and len(near) + len(far) == 2048
    assert far == [h for h in HOPS_H100 if h >= 415.0]  # in the hops' order
    dram = [542.0 + 0.1 * k for k in range(2048)]  # one mode, as the DRAM hops (gaps of 3 %)
    with pytest.raises(ValueError, match="one mode.*under 20%"):
        ml.hop_modes(dram)
    with pytest.raises(ValueError, match="one mode"):  # 15 % apart: under the 20 % split
        ml.hop_modes([300.0] * 100 + [345.0] * 100)


def test_a_few_stray_slow_hops_are_no_far_mode():
    stray = HOPS_H100[:1000] + [2000.0, 2100.0]  # two hops 4 x slower (an interrupt), 0.2 % of the hops
    near, far, (lo, hi, _) = ml.hop_modes(stray)
    assert hi >= 415.0 and lo <= 304.0 and 2000.0 in far  # the split is still the partitions'
    only_near = [h for h in HOPS_H100 if h < 400] + [2000.0, 2100.0]
    with pytest.raises(ValueError, match="one mode"):
        ml.hop_modes(only_near)  # 2 of ~1760 hops: under MODE_MIN_SHARE, no mode


def test_far_mode_batches_take_the_far_hops_and_never_the_near_ones():
    far = ml.far_mode_batches(HOPS_H100)
    assert len(far) == ml.MODE_BATCHES and all(415 <= v <= 485 for v in far)
    assert max(far) / min(far) - 1 < ml.MODE_NOISE  # the far batches are steady: ~73 hops each
    with pytest.raises(ValueError, match="one mode"):
        ml.far_mode_batches([542.0 + 0.1 * k for k in range(2048)])
    with pytest.raises(ValueError, match="too few for 4 batches"):  # 5 far hops of 250: 2 % of them, 2 a batch short
        ml.far_mode_batches([266.0 + k % 9 for k in range(245)] + [450.0] * 5)


def test_the_near_mode_and_p50_are_reported_beside_the_far_mode():
    """The near mode read 288.0 and 268.5 cycles on two H100s (GPU-9db59b7a, GPU-fd48deeb, 2026-11-26):
    it moves with the allocation's slices, so only the far mode is a fact; the summary the far fact's
    launch info takes carries the near mode's median, p10 / p50 / p90 and the far share."""
    out = ml.hop_modes_summary(HOPS_H100)
    assert {"p10_cycles", "p50_cycles", "p90_cycles", "far_share", "near_mode_cycles"} <= set(out)
    assert 245 <= out["near_mode_cycles"][1] <= 304 and out["near_mode_cycles"][1] == round(
        ml.percentile([h for h in HOPS_H100 if h < 400], 50), 2)


def test_hop_modes_summary_reports_the_far_share_and_p90():
    out = ml.hop_modes_summary(HOPS_H100)
    assert out["modes"] == 2 and out["far_share"] == round(sum(k % 7 == 3 for k in range(2048)) / 2048, 4)
    assert out["p90_cycles"] > 415 and 245 <= out["p50_cycles"] <= 304  # a far share over 10 %: p90 in the far mode
    assert out["near_mode_cycles"][0] == 245.0 and out["far_mode_cycles"][2] == 485.0
    one = ml.hop_modes_summary([542.0 + 0.1 * k for k in range(2048)])
    assert one["modes"] == 1 and "far_share" not in one and "one mode" in one["one_mode"]


# ---------------------------------------------------------------------------------------------- one-line chase

#: 64 lines' L2 hits of the one-line chase as the H100 gave them (GPU-2bbcd972, 2026-11-26): one tier,
#: 253.0 .. 307.0 cycles
ONE_TIER = [253.0 + 54 * ((k * 29) % 64) / 63 for k in range(64)]
#: 64 lines' DRAM misses in two tiers: 30 lines near 620 cycles, 34 near 800 (a planted split, 25 % apart)
TWO_TIER_MISSES = [620.0 + (k % 5) if k % 2 else 800.0 + (k % 7) for k in range(64)]


def test_widest_gap_is_the_partitions_not_a_tier_s_own_spread():
    lo, hi, gap = ml.widest_gap(TWO_TIER_MISSES)
    assert (lo, hi) == (624.0, 800.0) and gap == pytest.approx(800 / 624 - 1)
    with pytest.raises(ValueError, match="no gap"):
        ml.widest_gap([1.0])
    assert ml.widest_gap([1.0, 1.1, 2.0, 2.1, 9.0])[:2] == (2.1, 9.0)
    assert ml.widest_gap([1.0, 1.1, 2.0, 2.1, 9.0], min_side=2)[:2] == (1.1, 2.0)  # 2.1 -> 9 leaves one above
    with pytest.raises(ValueError, match="positive"):
        ml.widest_gap([0.0, 1.0])


def batch_medians(values, batches: int) -> list[float]:
    """The median of each of ``batches`` interleaved batches (values[i::batches]), refusing batches of
    fewer than 2 values: the DRAM tiers' statistic before the quarters, kept here to show why it went."""
    if len(values) < 2 * batches:
        raise ValueError(f"{len(values)} values are too few for {batches} batches of 2 or more")
    return [ml.percentile(values[i::batches], 50) for i in range(batches)]


def test_batch_medians_are_interleaved_and_refuse_thin_batches():
    assert batch_medians([1, 10, 2, 20, 3, 30], 2) == [2, 20]
    with pytest.raises(ValueError, match="too few"):
        batch_medians([1, 2, 3], 2)


#: planted DRAM misses, one a line: one tier (the L2 hits + 400: 653 .. 707 cycles, gaps under 1 %)
ONE_TIER_MISSES = [c + 400.0 for c in ONE_TIER]
#: two tiers 15 % apart: 32 lines at 600 .. 604 cycles, 32 at 695 .. 701 (695 / 604 = 1.151)
SPLIT_15 = [600.0 + k % 5 if k % 2 else 695.0 + k % 7 for k in range(64)]
#: 58 lines at 600 .. 604 and 6 at 800: a 32 % gap, but 6 lines above it, under DRAM_TIER_MIN_LINES
FEW_SLOW = [800.0 if k % 11 == 5 else 600.0 + k % 5 for k in range(64)]


def _h100_lines(anchors):
    """64 lines' misses whose sorted values run linearly between ``anchors`` ((sorted index, cycles)),
    line k holding sorted value (29 k) mod 64, so each tier's lines fall among all four batches."""
    ranked = [float(np.interp(i, [a for a, _ in anchors], [c for _, c in anchors])) for i in range(64)]
    return [round(ranked[(29 * k) % 64], 1) for k in range(64)]


#: The DRAM misses of the two H100s, planted to their reported shape (the lines themselves were not
#: kept): GPU-9db59b7a and GPU-fd48deeb (driver 580.159.04, CUDA 13.0, 2026-11-26), 535 .. 785 cycles,
#: the widest gap 589 -> 723 (22.8 %) and 590 -> 679 (15.1 %), p10 550 / 557, median 588 / 634, p90
#: 770 / 775
H100_9DB59B7A = _h100_lines([(0, 535.0), (6, 550.0), (7, 550.0), (31, 587.0), (32, 589.0), (33, 723.0),
                             (56, 770.0), (57, 770.0), (63, 785.0)])
H100_FD48DEEB = _h100_lines([(0, 541.0), (6, 557.0), (7, 557.0), (31, 589.6), (32, 678.4), (56, 775.0),
                             (57, 775.0), (63, 785.0)])


def test_the_h100_readings_split_at_their_widest_gap_into_steady_tiers():
    for misses, (lo, hi, gap), (p10, p50, p90), near_lines in (
            (H100_9DB59B7A, (589.0, 723.0, 0.228), (550.0, 588.0, 770.0), 33),
            (H100_FD48DEEB, (589.6, 678.4, 0.151), (557.0, 634.0, 775.0), 32)):
        assert [ml.percentile(misses, q) for q in (10, 50, 90)] == pytest.approx([p10, p50, p90])
        near, far, split = ml.dram_tiers(misses)
        assert split[:2] == (lo, hi) and split[2] == pytest.approx(gap, abs=5e-4)
        assert len(near) == near_lines and sorted(near + far) == list(range(64))
        assert max(misses[k] for k in near) == lo and min(misses[k] for k in far) == hi
        for kind, (low, high), lines in (("dram_near_tier_mean", (535.0, lo), near),
                                         ("dram_far_tier_mean", (hi, 785.0), far)):
            values = ml.line_statistic(kind, ONE_TIER, misses)
            assert values == [misses[k] for k in lines] and all(low <= v <= high for v in values)
            assert relative_noise(values) < ml.DRAM_TIER_NOISE, (kind, values)  # the tier's spread: its noise
        # the median over lines was the old fact: on GPU-fd48deeb it lies in the gap, read by no line
        whole = batch_medians(misses, ml.NEAR_BATCHES)
        assert misses is H100_9DB59B7A or all(lo < v < hi for v in whole)
    spread = batch_medians(H100_9DB59B7A, ml.NEAR_BATCHES)  # and on GPU-9db59b7a its batches straddle the gap
    assert min(spread) < 589.0 < 723.0 > max(spread) and max(spread) / min(spread) - 1 > ml.MODE_NOISE


def test_dram_tiers_split_a_15_percent_gap_into_the_lines_below_and_above_it():
    near, far, (lo, hi, gap) = ml.dram_tiers(SPLIT_15)
    assert (lo, hi) == (604.0, 695.0) and gap == pytest.approx(695 / 604 - 1)
    assert near == list(range(1, 64, 2)) and far == list(range(0, 64, 2))

    with pytest.raises(ValueError, match="one tier.*15.1%, under 20%"):  # a 20 % rule would refuse it
        ml.dram_tiers(SPLIT_15, min_gap=0.20)


def test_dram_tiers_refuse_one_tier_and_a_gap_with_too_few_lines_on_a_side():
    with pytest.raises(ValueError, match=r"one tier: their widest gap with 8 or more of 64 lines on each side.*under 10%"):
        ml.dram_tiers(ONE_TIER_MISSES)
    with pytest.raises(ValueError, match=r"one tier.*604.0 -> 800.0 \(32.5%\), leaves 6 lines on a side, under 8"):
        ml.dram_tiers(FEW_SLOW)
    near, far, _ = ml.dram_tiers(FEW_SLOW, min_lines=6)  # the rule, not the data, refused it
    assert len(far) == 6
    with pytest.raises(ValueError, match="no gap with 8 or more"):
        ml.dram_tiers(SPLIT_15[:15])


def test_the_dram_line_statistics_are_the_tiers_misses_never_the_hits():
    with pytest.raises(ValueError, match="one DRAM reading per line"):
        ml.line_statistic("dram_near_tier_mean", ONE_TIER, SPLIT_15[:-1])
    with pytest.raises(ValueError, match="one DRAM reading per line"):
        ml.line_statistic("dram_far_tier_mean", ONE_TIER)
    for gone in ("near_tier", "far_tier", "dram_near_tier", "dram_far_tier", "dram_nearest_quarter",
                 "dram_farthest_quarter", "p90_over_lines", "dram_all_lines"):
        with pytest.raises(ValueError, match="expected one of"):
            ml.line_statistic(gone, ONE_TIER, SPLIT_15)
    assert ml.line_statistic("dram_near_tier_mean", SPLIT_15, SPLIT_15) == ml.line_statistic(
        "dram_near_tier_mean", ONE_TIER, SPLIT_15)  # the hits take no part
    assert ml.line_statistic("dram_far_tier_mean", ONE_TIER, SPLIT_15) == [695.0 + k % 7 for k in range(0, 64, 2)]
    with pytest.raises(ValueError, match="one tier"):  # a tier's fact needs two tiers
        ml.line_statistic("dram_near_tier_mean", ONE_TIER, ONE_TIER_MISSES)


#: H100 GPU-41edd6a1, 2026-11-26: two processes' DRAM misses of the 64 lines (each line's median over
#: launches), in line order, from their reports (launch["dram_line_cycles"]); the near tier holds two levels, ~535-559 and ~572-600, and which lines land in
#: each is the allocation's: its median over the lines below the widest gap read 567.5, then 550.25
GPU_41EDD6A1 = (
    [709, 745, 578, 791, 584, 593, 747, 595, 781, 600, 706, 579, 750, 548, 688, 551, 753, 554, 686, 579, 690, 690,
     539, 753, 546, 758, 582, 782, 589, 774, 577, 740, 583, 547, 787, 537, 690, 740, 537, 774, 544, 719, 535, 736,
     540, 756, 584, 784, 578, 688, 581, 686, 543, 782, 582, 789, 550, 749, 538, 737, 559, 752, 590, 746],
    [773, 684, 584, 682, 541, 755, 549, 771, 582, 765, 548, 757, 741, 572, 746, 552, 706, 552, 766, 551, 711, 572,
     731, 586, 770, 535, 778, 545, 740, 550, 774, 551, 708, 579, 738, 533.5, 712, 551, 707, 581, 781, 543, 682, 574,
     542, 767, 549, 754, 593, 755, 545, 744, 542, 738, 536, 777, 582, 785, 550, 686, 762, 547, 772, 583])


#: H100 GPU-b842806c, 2026-11-26 night: two whole-suite processes' DRAM misses of the 64 lines, in line
#: order, from their reports (launch["dram_line_cycles"]): the median of the quarter of the lines with the
#: lowest misses (the fact until then) read 574.0, then 548.5 (-4.4 %, a false MOVED against a 3.2 % band)
GPU_B842806C = (
    [562, 588, 688, 580, 682, 721, 588, 727, 574, 705, 558, 708, 577, 759, 553, 762, 574, 766, 550, 683, 549, 724,
     583, 742, 574, 743, 589, 755, 587, 763, 573, 682, 577, 574, 747, 576, 772, 684, 576, 776, 576, 738, 575, 747,
     572, 727, 577, 753, 586, 720, 584, 727, 574, 575, 685, 584, 786, 578, 754, 577, 766, 575, 725, 574],
    [538, 555, 723, 574, 729, 572, 754, 565, 743, 537, 756, 585, 766, 790, 542, 780, 584, 746, 573, 777, 581, 703,
     538, 784, 532, 684, 576, 773, 574, 754, 554, 772, 549, 590, 685, 582, 775, 586, 772, 595, 708, 547, 727, 552,
     758, 764, 548, 686, 550, 764, 536, 787, 587, 768, 583, 781, 555, 755, 583, 744, 549, 587, 775, 587])


def _tier_means(misses):
    import statistics
    return tuple(round(statistics.fmean(ml.line_statistic(kind, ONE_TIER, misses)), 2) for kind in ml.CHASE_LINE_STATISTICS)


def test_each_tier_s_mean_moves_less_than_an_order_statistic_when_lines_change_level():
    """Two units' processes whose lines fell in the tiers' levels differently: the lowest quarter's median
    (GPU-b842806c: -4.4 %) or the near tier's median (GPU-41edd6a1: -4.5 %) jumped a level; each tier's
    mean moved by the share of lines that changed level (-1.7 %, -1.3 %)."""
    import statistics
    quarter = [statistics.median(sorted(m)[:16]) for m in GPU_B842806C]
    assert quarter == [574.0, 548.5]
    assert [_tier_means(m) for m in GPU_B842806C] == [(574.82, 732.81), (565.03, 751.06)]
    tier_median = []
    for misses in GPU_41EDD6A1:
        near, _, _ = ml.dram_tiers(misses)
        tier_median.append(statistics.median(misses[k] for k in near))
    assert tier_median == [577, 551]
    assert [_tier_means(m) for m in GPU_41EDD6A1] == [(565.23, 741.15), (558.08, 742.97)]
    for pair in (GPU_B842806C, GPU_41EDD6A1):
        (a, _), (b, _) = (_tier_means(m) for m in pair)
        assert abs(b / a - 1) < 0.0191  # the widest near-tier move on one unit over 38 processes: 1.90 %



#: a near tier whose own widest gap (600 / 540: 11 %) stays under the one to the far tier (700 / 600: 17 %)
_near_cycles = st.lists(st.floats(540.0, 600.0), min_size=8, max_size=56)


@given(near=_near_cycles, far_share=st.integers(8, 56), far_level=st.floats(700.0, 800.0), seed=st.randoms())
def test_each_tier_s_statistic_takes_exactly_its_tier_s_lines_in_line_order(near, far_share, far_level, seed):
    """Any 64 lines whose misses fall in two tiers more than 10 % apart, in any line order: the near
    statistic's values are the near lines' misses and the far one's the far lines', each in line order;
    their means lie inside the tier (a tier's fact never takes a line of the other)."""
    far_count = max(8, min(64 - len(near), far_share))
    near = (near * 8)[:64 - far_count]
    lines = [(c, "near") for c in near] + [(far_level + k % 7, "far") for k in range(far_count)]
    seed.shuffle(lines)
    misses = [c for c, _ in lines]
    for kind, tier in zip(ml.CHASE_LINE_STATISTICS, ("near", "far")):
        values = ml.line_statistic(kind, [1.0] * 64, misses)
        assert values == [c for c, t in lines if t == tier]
        assert min(values) <= sum(values) / len(values) <= max(values)

def test_not_cold_names_the_lines_whose_miss_reads_as_a_hit_or_as_nothing():
    assert ml.not_cold([300.0, 450.0], [700.0, 800.0]) == []
    assert ml.not_cold([300.0, 450.0], [700.0, 451.0]) == ["line 1: DRAM 451.0 vs L2 hit 450.0 cycles"]
    assert len(ml.not_cold(ONE_TIER, [2.0] * 64)) == 64  # the unread load of 2026-11-26: every line refused


def test_over_lines_summary_reports_both_tiers_lines_share_and_gap_or_why_there_is_one():
    out = ml.over_lines_summary(ONE_TIER, TWO_TIER_MISSES)
    assert out["line_cycles"] == [round(c, 3) for c in ONE_TIER] and len(out["dram_line_cycles"]) == 64
    assert out["dram_far_lines"] == list(range(0, 64, 2)) and out["dram_near_lines"] == list(range(1, 64, 2))
    assert out["dram_widest_gap_cycles"][:2] == [624.0, 800.0] and out["dram_far_share"] == 0.5
    assert out["dram_near_cycles"] == [620.0, 622.0, 624.0] and out["dram_far_cycles"][0] == 800.0
    assert out["dram_tiers"] == 2 and out["p10_over_lines_cycles"] < out["p50_over_lines_cycles"]
    gold = ml.over_lines_summary(ONE_TIER, H100_FD48DEEB)
    assert gold["dram_widest_gap_cycles"] == [589.6, 678.4, 0.1506] and gold["dram_far_share"] == 0.5
    assert gold["dram_p50_over_lines_cycles"] == 634.0
    one = ml.over_lines_summary(ONE_TIER, ONE_TIER_MISSES)
    assert one["dram_tiers"] == 1 and "one tier" in one["dram_one_tier"] and "dram_far_lines" not in one
    assert "dram_line_cycles" not in ml.over_lines_summary(ONE_TIER)


class _LineGpu:
    """A stand-in for the gpuprops fixture: line k's L2 hit ONE_TIER[k % 64] cycles, its miss ``miss(k)`` (the
    64 lines' pattern repeated over the DRAM_LINES lines by default)."""

    def __init__(self, miss=lambda k: H100_9DB59B7A[k % 64], index=0):
        from types import SimpleNamespace
        self.gpu = SimpleNamespace(index=index)
        self.calls = []
        self.miss = miss

    def measure(self, name, spec, *, divisor, stop):
        from pytest_gpuprops.measure import Measurement
        self.calls.append((name, spec.defines.get("DISCARD", 0), divisor, stop))
        k = ml.dram_line_offsets().index(int(name.rsplit("+", 1)[1].split()[0]))
        cycles = self.miss(k) if spec.defines.get("DISCARD") else ONE_TIER[k % 64]
        clock = 1995.0 if spec.defines.get("DISCARD") else 1980.0
        return Measurement.given(name, [cycles] * 5, overhead_cycles=2.0, sm_clock_mhz=1980.0, kernel=spec.kernel,
                                 launch={"defines": dict(spec.defines), "clock_beside_mhz": clock})


def test_the_dram_facts_read_each_line_s_hit_and_miss_once_and_a_remeasure_reads_again(monkeypatch):
    import specs_memory as sm
    monkeypatch.setattr(ml, "_CHASE_LINES", {})
    gpu = _LineGpu()
    near_fact, far_fact = sm.FACTS
    near = ml.chase_line_measurement(gpu, near_fact)
    assert len(gpu.calls) == 2 * ml.DRAM_LINES
    assert {c[1:] for c in gpu.calls[:ml.DRAM_LINES]} == {(0, sm.LINE_CHASE_UNROLL, ml.LINE_STOP)}
    assert {c[1:] for c in gpu.calls[ml.DRAM_LINES:]} == {(1, 1.0, ml.DRAM_LINE_STOP)}
    far = ml.chase_line_measurement(gpu, far_fact)
    assert len(gpu.calls) == 2 * ml.DRAM_LINES  # shared by both facts: read once
    assert all(535 <= v <= 589 for v in near.values) and all(723 <= v <= 785 for v in far.values)
    assert near.noise_target == far.noise_target == ml.DRAM_TIER_NOISE and near.launch["defines"]["DISCARD"] == 1
    assert (near.launch["statistic"], far.launch["statistic"]) == ml.CHASE_LINE_STATISTICS
    assert near.center == far.center == "mean" and near.reading == pytest.approx(sum(near.values) / 132)
    assert near.launch["clock_beside_mhz"] == 1987.5 and near.launch["clock_beside_range_mhz"] == [1980.0, 1995.0]
    assert (near.launch["tier_lines"], far.launch["tier_lines"]) == (132, 124)
    assert len(far.launch["dram_line_cycles"]) == ml.DRAM_LINES and far.launch["dram_far_share"] == round(124 / 256, 4)
    assert len(near.launch["dram_near_lines"]) == 132 and far.launch["dram_widest_gap_cycles"][:2] == [589.0, 723.0]
    gpu.calls.clear()
    far.remeasure()
    assert len(gpu.calls) == 2 * ml.DRAM_LINES  # hits and misses read afresh
    other = _LineGpu(index=1)
    ml.chase_line_measurement(other, near_fact)
    assert len(other.calls) == 2 * ml.DRAM_LINES  # another GPU reads its own lines


def test_the_dram_facts_refuse_lines_still_in_l2_or_a_load_not_waited_for(monkeypatch):
    import specs_memory as sm
    monkeypatch.setattr(ml, "_CHASE_LINES", {})
    gpu = _LineGpu(miss=lambda k: ONE_TIER[k % 64] * (1.0 if k == 7 else 2.0))  # line 7's discard left it in L2
    with pytest.raises(ValueError, match="1 of 256 lines' DRAM reading is under 1.1 x.*line 7:"):
        ml.chase_line_measurement(gpu, sm.FACTS[0])
    monkeypatch.setattr(ml, "_CHASE_LINES", {})
    with pytest.raises(ValueError, match="256 of 256 lines.*static"):  # 2.0 cycles, as the unread load read
        ml.chase_line_measurement(_LineGpu(miss=lambda k: 2.0), sm.FACTS[0])
    monkeypatch.setattr(ml, "_CHASE_LINES", {})
    # misses of one tier: no tier to take the mean of, refused with the lines' misses
    with pytest.raises(ValueError, match=r"dram_latency_far_cycles: the DRAM misses form one tier.*the lines' DRAM misses: 653"):
        ml.chase_line_measurement(_LineGpu(miss=lambda k: ONE_TIER_MISSES[k % 64]), sm.FACTS[1])


def test_line_chase_specs_hit_or_miss_one_line_with_one_build():
    import specs_memory as sm
    hit, miss = sm.line_chase(5), sm.line_chase(9, miss=True)
    assert hit.defines == sm.line_chase(0).defines == {"CACHE": 1, "UNROLL": sm.LINE_CHASE_UNROLL}
    assert miss.defines == {"CACHE": 1, "UNROLL": 1, "DISCARD": 1}
    assert [f.name for f in sm.FACTS] == ["dram_latency_near_cycles", "dram_latency_far_cycles"]
    assert [f.statistic.lines for f in sm.FACTS] == list(ml.CHASE_LINE_STATISTICS)
    assert [f.scope for f in sm.FACTS] == ["gpu", "gpu"] and all(ml.is_chase_line(f) for f in sm.FACTS)
    assert [f.build().defines.get("DISCARD", 0) for f in sm.FACTS] == [1, 1] and [f.per() for f in sm.FACTS] == [1.0] * 2
    assert len({(b.source, tuple(b.defines.items())) for b in (f.build() for f in sm.FACTS)}) == 1  # one build
    import specs_async
    assert not any(ml.is_chase_line(f) for f in specs_async.FACTS)  # their lines are near_tier_latency's


def test_line_chase_lays_the_line_holding_its_own_address_in_one_reserved_buffer():
    import specs_memory as sm
    from gp_testing import DeviceWords, StandInCupy

    from pytest_gpuprops import factspec, reserved
    reserved.clear()
    cp = StandInCupy()
    assert factspec.request_reservations(sm.FACTS) == [sm.SPREAD_BUFFER]  # both facts, one buffer
    reserved.allocate_requested(cp)
    assert cp.made == [(0, ml.DRAM_SPREAD_BYTES // 8)]
    for line in (0, 5, ml.DRAM_LINES - 1):
        for miss in (False, True):
            words, cursor, warm = sm.line_chase(line, miss).args(cp)
            address = words.data.ptr
            assert int(words[0]) == address == int(cursor[0]) and int(warm) == 1 and len(cursor) == 2
            assert address - DeviceWords.BASE == ml.dram_line_offsets()[line]
            assert words.base.nbytes == ml.DRAM_SPREAD_BYTES
    assert len(cp.made) == 1  # line k is one physical line in its hit and its miss readings, the buffer reserved
    reserved.clear()


#: 64 lines' L2 hits as the H100 gave the global atomics (2026-11-25): three tiers, 267-283, 302-317 and
#: 439-524 cycles, here 24, 16 and 24 lines of them
TIERED = [267.0 + 16 * (k % 24) / 23 for k in range(24)] + [302.0 + k for k in range(16)] + \
         [439.0 + 85 * k / 23 for k in range(24)]


def test_near_threshold_splits_at_the_widest_gap_or_says_there_is_none():
    assert ml.near_threshold(TIERED) == (317.0 + 439.0) / 2
    assert ml.near_threshold([280.0, 290.0, 300.0]) is None


def test_sweep_rows_count_the_hops_under_the_split():
    row = ml.sweep_row(MIB, TIERED, 378.0)
    assert row["near_share"] == 0.625 and row["hops"] == 64 and row["footprint"] == MIB  # 40 of 64
    assert row["p10_cycles"] < row["p50_cycles"] < row["p90_cycles"] and row["mean_cycles"] == round(sum(TIERED) / 64, 2)
    assert ml.sweep_row(MIB, TIERED, None)["near_share"] is None


def test_past_half_l2_groups_the_rows_by_the_partition_size():
    s = ml.cache_sizes("sm_90", H100)  # L2 50 MiB: half 25 MiB
    rows = [{"footprint": f * MIB, "p10_cycles": p10, "mean_cycles": p10 + 100, "near_share": share}
            for f, p10, share in ((1, 260.0, 0.5), (16, 262.0, 0.5), (25, 264.0, 0.5), (32, 300.0, 0.3),
                                  (50, 320.0, None), (200, 600.0, 0.1))]
    out = ml.past_half_l2(rows, s)
    assert out["up_to_half_l2"] == {"rows": 3, "p10_cycles": 262.0, "mean_cycles": 362.0, "near_share": 0.5}
    assert out["half_to_whole_l2"] == {"rows": 2, "p10_cycles": 310.0, "mean_cycles": 410.0, "near_share": 0.3}
    assert ml.past_half_l2(rows[:1], s)["half_to_whole_l2"] == {"rows": 0, "p10_cycles": None, "mean_cycles": None,
                                                                 "near_share": None}
    table = [dict(r, p90_cycles=r["p10_cycles"] + 200) for r in (rows[0], rows[4])]
    assert ml.sweep_table(table) == ("1 MiB: p10 260, mean 360, p90 460, near 50%; "
                                     "50 MiB: p10 320, mean 420, p90 520, near -")


# ---------------------------------------------------------------------------------------------- specs

def test_shuffle_index_inputs_are_lane_numbers():
    x = specs._alu_inputs("shfl_idx", 3).reshape(3, 32)
    assert x.dtype == np.uint32 and all(sorted(row) == list(range(32)) for row in x.tolist())
    assert specs._alu_inputs("dfma", 2).dtype == np.float64


def test_chase_specs_take_their_footprint_from_the_level():
    s = ml.cache_sizes("sm_90", H100)
    assert specs.chase_level("l1", s).defines["CACHE"] == 0
    assert specs.chase_level("dram", s, unroll=1).region == {"LDG.E.64.STRONG.GPU": 1}
    assert specs.chase_sweep_point(8 * MIB, s).defines["CACHE"] == 0


def test_a_chase_of_many_hops_reads_its_clock_and_one_of_a_single_hop_does_not():
    """The level chases (1024 hops a launch) are built with TIMER=1, so each launch says the SM clock it ran
    at; a launch of one hop (the per-hop distributions) is too short for the timer's 32 ns ticks."""
    s = ml.cache_sizes("sm_90", H100)
    for level in ("l1", "l2", "dram"):
        long_, one = specs.chase_level(level, s), specs.chase_level(level, s, unroll=1)
        assert long_.timer and long_.defines["UNROLL"] >= specs.REGION_CLOCK_MIN_UNROLL, level
        assert not one.timer and "TIMER" not in one.defines, level
    assert not specs.chase_sweep_point(8 * MIB, s).timer  # the sweeps' points keep their build


# ---------------------------------------------------------------------------------------------- prefetch

def _hwtests_conftest():
    import importlib.util
    path = Path(__file__).parent.parent / "hwtests" / "conftest.py"
    spec = importlib.util.spec_from_file_location("hwtests_conftest", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wgmma_fact(n: int, bf16: bool, a_regs: bool):
    """The latency fact of one wgmma case (hwtests/specs_wgmma.py)."""
    import specs_wgmma
    return next(f for f in specs_wgmma.LATENCY if f.name == f"wgmma_{specs_wgmma.case_id(n, bf16, a_regs)}_latency_cycles")


def _item(file: str, name: str = "test_x", **params):
    from types import SimpleNamespace
    module = None
    if file in ("test_wgmma.py", "test_wgmma_dtypes.py"):
        import importlib
        module = importlib.import_module(file[:-3])
    return SimpleNamespace(path=Path("hwtests") / file, module=module, originalname=name,
                           callspec=SimpleNamespace(params=params))


def test_the_gpu_prefetch_compiles_what_the_selected_tests_launch():
    """hwtests/conftest.py's session prefetch: a selection compiles its own builds, nothing else."""
    import specs_alu
    import specs_async
    import specs_sync_units

    from pytest_gpuprops import factspec
    gpu_builds = _hwtests_conftest()._gpu_builds

    def keys(items, arch="sm_90"):
        return {(a, src, tuple(sorted(d.items()))) for a, src, d, _ in gpu_builds(items, arch)}

    always = keys([])
    assert always == {("sm_90", "sm_clock_rate.cu", ()), ("sm_90", "clock_overhead.cu", ())}
    # one wgmma test: its own sm_90a build, not the file's 48
    one = keys([_item("test_wgmma.py", "test_fact", fact=_wgmma_fact(256, True, True))]) - always
    assert one == {("sm_90a", "wgmma.cu", tuple(sorted(specs.wgmma(256, True, True, unroll=1).defines.items())))}
    # the tests of fact specs (the asynchronous and synchronous units): each fact's build, on the
    # fact's arch only
    for file, units in (("test_async_units.py", specs_async), ("test_dpx_atomics_const.py", specs_sync_units)):
        all_facts = keys([_item(file, "test_fact", fact=f) for f in units.FACTS]) - always
        assert all_facts == {("sm_90", s.source, tuple(sorted(s.defines.items()))) for s in factspec.builds(units.FACTS)}
        assert len(all_facts) > 10
    one_fact = keys([_item("test_async_units.py", "test_fact", fact=specs_async.FACTS[0])]) - always
    assert one_fact == {("sm_90", "mbarrier_roundtrip.cu", (("PASSES", 2), ("TOKEN", 0)))}
    assert keys([_item("test_async_units.py", "test_fact", fact=specs_async.FACTS[0]),
                 _item("test_dpx_atomics_const.py", "test_fact", fact=specs_sync_units.FACTS[0])], "sm_86") == \
        {("sm_86", src, d) for _, src, d in always}
    # a fact of any arch (the ALU facts): its build on whatever arch the GPU is
    ffma = specs_alu.FFMA_FACTS[0]
    for arch in ("sm_86", "sm_90"):
        assert keys([_item("test_alu.py", "test_fact", fact=ffma)], arch) - keys([], arch) == \
            {(arch, "ffma.cu", tuple(sorted(ffma.build().defines.items())))}
    # the stresses: the FFMA and stream kernels, and the wgmma stress for sm_90a on sm_90
    stresses = keys([_item("test_throughput_and_clocks.py")]) - always
    assert {src for _, src, _ in stresses} == {"stress_ffma.cu", "stream_bandwidth.cu"}
    assert {a for a, _, _ in stresses} == {"sm_90", "sm_90a"}
    # a file whose tests share builds: that file's (specs.launched_by_file), none of another file's
    by_file = specs.launched_by_file()

    def file_keys(name):
        return {("sm_90", b.source, tuple(sorted(b.defines.items()))) for b in by_file[name].values()}

    smem = keys([_item("test_smem.py", "test_lds_latency", unroll=500)]) - always
    assert ("sm_90", "smem_latency_ld.cu", (("UNROLL", 500),)) in smem and smem == file_keys("test_smem.py")
    two = keys([_item("test_smem.py"), _item("test_memory_hierarchy.py")], "sm_86") - keys([], "sm_86")
    assert {(src, d) for _, src, d in two} == {(src, d) for _, src, d in
                                                file_keys("test_smem.py") | file_keys("test_memory_hierarchy.py")}
    assert keys([_item("test_health.py")]) == always  # NVML only
    # a file the table does not name: every launched build
    unknown = keys([_item("test_a_new_fact.py")]) - always
    assert unknown == {("sm_90", b.source, tuple(sorted(b.defines.items()))) for b in specs.launched().values()} - always


def test_the_builds_of_every_file_make_up_the_launched_builds():
    """specs.launched() (whose regions test_static.py checks) is the clock-overhead build and every
    file's builds: a build added for one file's tests is checked statically and prefetched with it."""
    by_file = specs.launched_by_file()
    launched = specs.launched()
    assert set(launched) == {"clock_overhead"} | {k for builds in by_file.values() for k in builds}
    assert sum(len(b) for b in by_file.values()) + 1 == len(launched)  # no id in two files
    here = Path(__file__).parent.parent / "hwtests"
    assert set(by_file) <= {p.name for p in here.glob("test_*.py")}


def test_a_compile_a_test_makes_itself_is_counted_and_named_in_the_prefetch_line(tmp_path, monkeypatch):
    """hwtests/conftest.py: a build a test compiles on its own thread (one the prefetch did not
    foresee) is counted and named in the summary line; one compiled beside the tests, on another
    thread, and a cache hit are not."""
    import threading

    from gp_testing import KERNELS

    from pytest_gpuprops import compile as gp_compile
    from pytest_gpuprops import prefetch
    monkeypatch.setattr(prefetch, "timings", prefetch.Timings(builds=1))
    monkeypatch.setattr(gp_compile, "compiled_here", [])
    hook = _hwtests_conftest().pytest_runtest_protocol(item=None, nextitem=None)
    next(hook)
    gp_compile.compile_cuda(KERNELS / "ffma.cu", "sm_90", {"ILP": 2}, cache_dir=tmp_path)
    beside = threading.Thread(target=gp_compile.compile_cuda, args=(KERNELS / "ffma.cu", "sm_80"),
                              kwargs={"cache_dir": tmp_path}, name="gpuprops-build-0")
    beside.start()
    beside.join()
    gp_compile.compile_cuda(KERNELS / "ffma.cu", "sm_90", {"ILP": 2}, cache_dir=tmp_path)  # a hit
    with pytest.raises(StopIteration):
        next(hook)
    assert len(gp_compile.compiled_here) == 2
    assert [c[:3] for c in prefetch.timings.by_tests] == [("ffma.cu", "sm_90", (("ILP", "2"),))]
    assert prefetch.timings.line().endswith("; 1 compiled by the tests themselves, not foreseen: ffma.cu sm_90 ILP=2")
    prefetch.timings.by_tests *= 3
    assert prefetch.timings.line().endswith("ILP=2, ffma.cu sm_90 ILP=2, ffma.cu sm_90 ILP=2")
    prefetch.timings.by_tests *= 2
    assert prefetch.timings.line().endswith(": ffma.cu sm_90 ILP=2, ffma.cu sm_90 ILP=2, ffma.cu sm_90 ILP=2, "
                                            "ffma.cu sm_90 ILP=2 and 2 more")
    assert "6 compiled by the tests themselves" in prefetch.timings.line()


def test_the_builds_made_beside_the_tests_are_the_wgmma_files_own():
    """hwtests/conftest.py: per_test_only keeps the per-test builds (the wgmma files', compiled beside
    the tests before them on a first run) and leaves out the shared, per-file and always-built ones."""
    gpu_builds = _hwtests_conftest()._gpu_builds
    import specs_async
    items = [_item("test_wgmma.py", "test_fact", fact=_wgmma_fact(256, True, True)), _item("test_smem.py"),
             _item("test_throughput_and_clocks.py"), _item("test_async_units.py", "test_fact", fact=specs_async.FACTS[0])]
    late = {(a, src, tuple(sorted(d.items()))) for a, src, d, _ in gpu_builds(items, "sm_90", per_test_only=True)}
    assert late == {("sm_90a", "wgmma.cu", tuple(sorted(specs.wgmma(256, True, True, unroll=1).defines.items())))}
    assert gpu_builds(items, "sm_86", per_test_only=True) == []


def test_the_static_prefetch_foresees_each_fact_specs_build_as_launched():
    """hwtests/conftest.py's _static_builds: a static test of a fact spec (the asynchronous and
    synchronous units on sm_90, an ALU fact pinned to each arch) compiles its fact's build for the
    fact's arch and patches it for timing; the prefetch reads both in its batches instead of each
    test reading its own alone. A static test of those
    files that takes no fact is not foreseen (it compiles what it needs itself)."""
    import specs_async
    import specs_sync_units
    static_builds = _hwtests_conftest()._static_builds
    import specs_alu
    for file, fact in (("test_static_async_units.py", specs_async.FACTS[-1]),
                       ("test_static_dpx_atomics_const.py", specs_sync_units.FACTS[-1]),
                       ("test_static_alu.py", specs_alu.FACTS[-1].on_each_arch()[1])):
        spec = fact.build()
        (build, patched), = static_builds(_item(file, "test_region_holds_what_the_fact_measures", fact=fact), specs, {})
        assert (build.source.name, build.arch, dict(build.defines)) == (spec.source, fact.arch, {k: str(v) for k, v in spec.defines.items()})
        assert (patched.kernel, patched.defines, patched.region, patched.region_check) == \
            (spec.kernel, spec.defines, spec.region, spec.region_check)
    assert static_builds(_item("test_static_dpx_atomics_const.py", "test_throughput_builds_run_their_trips_and_differ_only_in_them",
                               kind="atom_shared"), specs, {}) == []


def test_the_static_prefetch_foresees_every_build_the_throughput_checks_compile(pytester, kernel_cache, monkeypatch):
    """tools/probes/foreseen_builds.py over test_static_throughput.py (whose ``_builds_of`` says what
    each test compiles): every build a test asks for, cache hits included, was asked for by the
    prefetch first, so a first run compiles none of them one test after another. (The run keeps the
    suite's caches: the probe counts requests, not compiles.)"""
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(kernel_cache))
    from pytest_gpuprops import compile as gp_compile
    from pytest_gpuprops import workloads
    repo = Path(__file__).parent.parent
    sys.path.insert(0, str(repo / "tools" / "probes"))
    try:
        import foreseen_builds
    finally:
        sys.path.remove(str(repo / "tools" / "probes"))
    original = gp_compile.compile_cuda
    probe = foreseen_builds.ForeseenBuilds()
    r = pytester.runpytest_inprocess(str(repo / "hwtests" / "test_static_throughput.py"), "-p", "no:randomly",
                                     plugins=[probe])
    assert r.ret == 0 and gp_compile.compile_cuda is original  # every binding put back
    # 4 archs x (the FFMA stress, the stream kernels' three builds: the kernel file's default shape, the
    # L2 read's shared chunks and the DRAM facts' tiles), the wgmma stress for sm_90 and per sm_90a type
    assert len(probe.by_tests) == 4 * 4 + 1 + len(workloads.WGMMA_DTYPES) and probe.missed == {}
    r.stdout.fnmatch_lines(["foreseen builds: 19 of the 19 builds the tests asked for; not foreseen: 0"])


def test_the_prefetch_foresees_every_build_of_a_sweep_fact_and_nothing_else():
    """hwtests/conftest.py: a test of a sweep spec (its ``fact`` parameter, factspec.SweepSpec) prefetches each
    distinct build of its sweep's points, for the GPU run and for the static check, not every launched build
    of the suite (a file that names no builds gets those)."""
    import specs_lines
    conftest = _hwtests_conftest()
    for sweep in specs_lines.FACTS:
        item = _item("test_cache_lines.py", "test_sweep_fact", fact=sweep)
        got = [(a, src, d) for a, src, d, _ in conftest._gpu_builds([item], "sm_90")][2:]  # after the two always built
        assert got == [("sm_90", k.source, k.defines) for k in sweep.builds()]
        static = conftest._static_builds(item, specs, {})
        assert [(b.source.name, b.arch) for b, _ in static] == [(k.source, "sm_90") for k in sweep.builds()]
    # on a GPU of another arch, an sm_90 sweep builds nothing
    assert conftest._gpu_builds([_item("test_cache_lines.py", "test_sweep_fact", fact=specs_lines.FACTS[0])],
                                "sm_86")[2:] == []


def test_the_latencies_whose_path_leaves_the_sm_read_the_clock_beside_them_and_the_sm_s_own_do_not():
    """KernelSpec.clock_beside on the builds whose cycles follow the SM clock's state only in part (an L2 hit,
    a DRAM miss, a copy through L2, a release barrier's fence): H100 GPU-1d74b276, 2026-11-27, three processes,
    those moved 0.2-0.8 % with the 1980 / 1995 MHz state while the L1, shared-memory, DSMEM and constant-cache
    latencies read the same cycles in both."""
    import specs
    import specs_async as sa
    import specs_memory as sm
    import specs_sync_units as su
    assert specs.global_chase("cg", 1 << 20).clock_beside and not specs.global_chase("ca", 1 << 14).clock_beside
    assert sm.line_chase(0).clock_beside and sm.line_chase(0, miss=True).clock_beside
    assert sa.cp_async("cg16", line=0).clock_beside and not sa.cp_async("ca16").clock_beside
    assert sa.bulk_copy(1024).clock_beside and sa.tma_tensor(1).clock_beside and sa.tma_tensor(2).clock_beside
    assert sa.tma_store(visible=True).clock_beside and not sa.tma_store().clock_beside  # the source read: shared memory
    assert sa.cluster_barrier(2, relaxed=False).clock_beside and not sa.cluster_barrier(2).clock_beside
    assert su.atomic_latency("atom_global", "distinct").clock_beside
    assert not su.atomic_latency("atom_shared", "distinct").clock_beside
