"""Timing statistics, no GPU in them: one launch's value from its per-warp clock pairs, the noise
of repeated values (nvbench's relative standard deviation), the rule that ends the repeats
(nvbench's: converged, time budget, sample cap), and the lowest tier of a latency that depends on
where its line lives (docs/method.md).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence


def launch_value(pairs: Sequence[Sequence[int]], overhead: float, divisor: float, mode: str, *,
                 warps_per_block: int | None = None) -> tuple[float, list[float]]:
    """One launch's value from its per-warp (start, stop) clock pairs, and the per-warp values.

    ``warp``: the median over warps of (stop - start - overhead) / divisor: latency, per-warp issue.
    ``span``: (last stop - first start - overhead) / divisor: the whole block's throughput on its SM.
    ``block_span``: the median over blocks (``warps_per_block`` consecutive pairs each) of the
    block's (last stop - first start - overhead) / divisor: per-SM throughput of a launch with one
    block per SM (a cluster), each span read on one SM's clock.
    ``warp_min``: the lowest per-warp value: with one warp on each SM, the nearest SM's latency to a
    level shared by several SMs, whose latency from each SM is set by where that SM lies.
    ``block_span_ns``: as ``block_span``, in nanoseconds of %globaltimer (each pair a warp's clock pair and
    its timer pair, KernelSpec.timer; no clock-read overhead taken off): a rate bounded by a unit of another
    clock than the SM's (L2), whose rate per SM cycle moves with the SM's clock against that unit's.
    ``warp_mean``: the mean over warps: with one warp on each SM, reading from one SM pair each, the
    GPU's mean over its pairs. Pair latencies sit on discrete levels (a DSMEM hop 176-212 cycles), so the
    median jumps a level when a few pairs change (H100 clusters of 2: 193.0-195.0 between processes of
    one unit) while the mean moves by their share (191.81-191.87).
    """
    if not pairs:
        raise ValueError("no clock pairs: the launch had no warps")
    per_warp = [(float(p[1] - p[0]) - overhead) / divisor for p in pairs]
    if mode == "warp":
        return statistics.median(per_warp), per_warp
    if mode == "warp_min":
        return min(per_warp), per_warp
    if mode == "warp_mean":
        return statistics.fmean(per_warp), per_warp
    if mode == "span":
        return (float(max(p[1] for p in pairs) - min(p[0] for p in pairs)) - overhead) / divisor, per_warp
    if mode in ("block_span", "block_span_ns") and warps_per_block:
        in_ns = mode == "block_span_ns"
        if in_ns and any(len(p) != 4 for p in pairs):
            raise ValueError("block_span_ns needs each warp's clock and %globaltimer pairs (4 stamps a warp; "
                             "build the kernel with TIMER=1)")
        if len(pairs) % warps_per_block:
            raise ValueError(f"{len(pairs)} clock pairs are not whole blocks of {warps_per_block} warps")
        # a block's span: its warps' first start to last stop, on the clock (less the clock-read overhead) or the timer
        start, stop, less = (2, 3, 0.0) if in_ns else (0, 1, overhead)
        blocks = [pairs[i:i + warps_per_block] for i in range(0, len(pairs), warps_per_block)]
        return statistics.median((float(max(p[stop] for p in blk) - min(p[start] for p in blk)) - less) / divisor
                                 for blk in blocks), per_warp
    raise ValueError(f"mode must be 'warp', 'warp_min', 'warp_mean', 'span', or 'block_span' or 'block_span_ns' "
                     f"with warps_per_block (the warps a block), "
                     f"not {mode!r}")


def slope_value(short: Sequence[Sequence[int]], long: Sequence[Sequence[int]], divisor: float,
                repeats_apart: int) -> tuple[float, list[float]]:
    """One launch pair's value (KernelSpec.lengths): the difference of the block's spans (last stop - first start)
    of the launch whose chain ran ``repeats_apart`` more times and of the other, over ``repeats_apart`` x
    ``divisor`` (the instructions a repeat); per warp, the same difference of each warp's own stop - start.
    The clock-read overhead and every edge the two launches share (fill, drain, how far apart the warps
    started) cancel."""
    if not short or len(short) != len(long):
        raise ValueError(f"a slope needs the same warps in both launches, not {len(short)} and {len(long)}")
    if repeats_apart < 1 or divisor <= 0:
        raise ValueError(f"repeats_apart must be >= 1 and divisor > 0, not {repeats_apart} and {divisor}")

    def span(pairs):
        return float(max(p[1] for p in pairs) - min(p[0] for p in pairs))
    scale = repeats_apart * divisor
    per_warp = [float((b[1] - b[0]) - (a[1] - a[0])) / scale for a, b in zip(short, long)]
    return (span(long) - span(short)) / scale, per_warp


#: the interquartile range of a normal distribution in standard deviations: IQR / IQR_PER_SIGMA estimates sigma
IQR_PER_SIGMA = 1.349


#: a copy within this of its series' top (the 90th percentile of its copies) ran at the series' settled rate; a
#: slower one met a disturbance of the host's. A settled H100 host copy series spreads 0.1-0.4 %; the disturbed
#: ones fall to 24-35 GB/s and climb back over several copies, or drop a level for the rest of the series
#: (GPU-5969eb1a, 2026-11-26: D2H 54.9 and 55.1 GB/s, then ten copies at 53.4-53.9, 2 % down; its other
#: processes' 54.9-55.1). 2 % would take such a level for the settled rate; 1 % keeps every copy of 116 of the
#: 174 host-copy series of 2026-11-26's reports (H100s) and half or more of all but 7
SETTLED_BAND = 0.01
#: a series with fewer of its copies at the settled rate than this share has no settled rate: NOISY, measured
#: again (7 of those 174 series: the dips and the level drops above, and one wobbling 52.9-54.6 throughout)
SETTLED_MIN_SHARE = 0.5


def settled_copies(values: Sequence[float], band: float = SETTLED_BAND) -> list[float]:
    """The ``values`` (rates of repeated copies) within ``band`` of their top, the 90th percentile (inclusive),
    in their order: the copies that ran at the link's settled rate."""
    if not values:
        raise ValueError("no copies: a settled rate needs at least one")
    top = statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]
    return [v for v in values if v >= (1 - band) * top]


def series_rate(values: Sequence[float]) -> float:
    """One series' settled rate: the median of its copies at the settled rate (stats.settled_copies)."""
    return statistics.median(settled_copies(values))


def region_clock_mhz(pairs: Sequence[Sequence[int]]) -> float | None:
    """The SM clock (MHz) one launch's timed regions ran at: the median over warps of the clock cycles over the
    %globaltimer nanoseconds around them (4 stamps a warp: KernelSpec.timer), or None where no warp has a
    timer span. The timer reads sit just outside the clock reads, so a region of a few cycles reads low; a
    chase of 1024 hops reads to the timer's 32 ns over its ~0.1-0.5 ms."""
    clocks = [(p[1] - p[0]) / (p[3] - p[2]) * 1e3 for p in pairs if len(p) == 4 and p[3] > p[2]]
    return statistics.median(clocks) if clocks else None


def clock_summary(key: str, clocks: Sequence[float], reads: Sequence[float] = ()) -> dict:
    """SM clocks (MHz) as a launch info says them: ``<key>_mhz`` their median and ``<key>_range_mhz`` the lowest
    and highest of ``reads`` (every single read, where the clocks are themselves medians), else of the clocks;
    to 0.1 MHz; {} where there is none."""
    if not clocks:
        return {}
    span = reads or clocks
    return {f"{key}_mhz": round(statistics.median(clocks), 1),
            f"{key}_range_mhz": [round(min(span), 1), round(max(span), 1)]}


def clock_beside_info(launches: Sequence[dict]) -> dict:
    """The SM clock read beside one or more measurements (their launch infos' ``clock_beside_mhz`` and
    ``clock_beside_range_mhz``, measure.Runner.measure's for a KernelSpec.clock_beside build), as a launch info of
    one: the median of their clocks, the range of every read; {} where none was read. A fact read from
    many measurements (a latency over lines, a sweep) says the clock its parts ran at this way."""
    clocks = [c for lc in launches if isinstance(c := lc.get("clock_beside_mhz"), (int, float))]
    reads = [r for lc in launches for r in lc.get("clock_beside_range_mhz") or [] if isinstance(r, (int, float))]
    return clock_summary("clock_beside", clocks, reads)


def best_series(series: Sequence[Sequence[float]]) -> tuple[int, list[float]]:
    """(index, copies) of the series read at the highest settled rate (:func:`series_rate`), whether or not
    SETTLED_MIN_SHARE of its copies ran at it: a host's traffic slows whole series and never speeds one up, so
    the best series of a window reads the link and the others the traffic. A series that ran steadily a level
    down is the traffic too: preferring settled series read H200 GPU-3c48baa4's H2D 53.53 GB/s (a steady
    series) where an unsettled one of the window read 54.54 and the unit's next three windows 54.44-54.80
    (2026-11-27; likewise H100 GPU-9f7679a0, 54.15 against 54.84 and then 54.89-54.98): a false MOVED on the
    next run. Where the best series did not settle, its measurement says so (links.rate_measurement): it is
    judged only at or above its band's lower edge and is never a baseline. Ties: the first. Refused: no
    series, or an empty one."""
    if not series or any(not s for s in series):
        raise ValueError(f"a host link's window of {len(series)} series, "
                         f"{sum(1 for s in series if not s)} of them empty: expected series of copies")
    best = max(range(len(series)), key=lambda k: series_rate(series[k]))
    return best, list(series[best])


def robust_relative_noise(values: Sequence[float]) -> float:
    """The values' spread around their median that the median itself feels: the interquartile range (inclusive
    quartiles) over :data:`IQR_PER_SIGMA`, relative to the median, so it reads as :func:`relative_noise`
    does on normal values; one or two outliers in twelve leave it (and the median) where they were. Fewer
    than four values: :func:`relative_noise`."""
    if len(values) < 4:
        return relative_noise(values)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    mid = statistics.median(values)
    return (q3 - q1) / IQR_PER_SIGMA / abs(mid) if mid else float("inf")


def relative_noise(values: Sequence[float]) -> float:
    """Relative standard deviation (nvbench's 'noise'); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    m = statistics.fmean(values)
    return statistics.stdev(values) / abs(m) if m else float("inf")


@dataclasses.dataclass(frozen=True)
class StopRule:
    """When a measurement's repeated launches end (:func:`stop_reason`)."""

    noise_target: float = 0.01
    min_samples: int = 5
    max_samples: int = 100
    time_budget_s: float = 2.0


def stop_reason(values: Sequence[float], rule: StopRule, elapsed_s: float) -> str | None:
    """Why to stop repeating launches now, or None to go on (nvbench's rule): "converged" once at
    least ``min_samples`` values have noise under the target, else "time budget" once the budget is
    spent (after ``min_samples``), else "sample cap" at ``max_samples``."""
    n = len(values)
    if n >= rule.min_samples:
        if relative_noise(values) <= rule.noise_target:
            return "converged"
        if elapsed_s > rule.time_budget_s:
            return "time budget"
    if n >= rule.max_samples:
        return "sample cap"
    return None


#: the lowest tier of an L2 latency: values within this fraction of the smallest (see lowest_tier)
TIER_BAND = 0.08


def lowest_tier(values: Sequence[float], band: float = TIER_BAND) -> list[float]:
    """The values within ``band`` (relative) of the smallest, in their order: the lowest tier of a
    latency that depends on where its line lives. An L2 hit's latency depends on the L2 slice that owns
    the line and the SM that asks: global atomics over 64 lines on the H100 (2026-11-25, three runs)
    fell in tiers of 267-283, 302-317 and 439-524 cycles; the lowest tier's top is 6 % above its
    bottom and the next tier starts 13 % above it, so 8 % takes exactly the lowest tier."""
    if not values:
        return []
    top = min(values) * (1 + band)
    return [v for v in values if v <= top]
