"""Rate arithmetic, no GPU in it: work over time in a fact's unit, one repeat's value from the L2
read's windows and their spread, a stress's own rate over its sustained part (whole and in windows)
from its launches' %globaltimer spans, each window's rate paired with the clock of the same launches,
and the median rate with its own clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from .stats import relative_noise

UNIT_SCALE = {"TFLOP/s": 1e12, "GB/s": 1e9}


def per_second(work: float, seconds: float, unit: str) -> float:
    """``work`` (FLOPs or bytes) over ``seconds``, in ``unit`` (TFLOP/s, GB/s)."""
    if seconds <= 0:
        raise ValueError(f"elapsed time must be > 0, not {seconds}")
    return work / seconds / UNIT_SCALE[unit]


def placement_value(rates: Sequence[float]) -> float:
    """One repeat's value from the rates of its windows (one each, in window order): their mean."""
    if not rates:
        raise ValueError("no window rates to average")
    return float(statistics.fmean(rates))


def placement_summary(rates_by_repeat: Sequence[Sequence[float]]) -> dict:
    """The windows' rates over a measurement: ``rates_by_repeat[r][k]`` is repeat r's rate of window k.
    Per window, the median over repeats (``per_window``); their mean, lowest, highest, ``spread``
    ((highest - lowest) / mean) and ``noise`` (relative standard deviation): how much the rate moves
    with where the lines lie, which the mean over the windows takes out of the fact."""
    if not rates_by_repeat or not rates_by_repeat[0]:
        raise ValueError("no window rates")
    count = len(rates_by_repeat[0])
    if any(len(r) != count for r in rates_by_repeat):
        raise ValueError(f"every repeat must rate all {count} windows: {[len(r) for r in rates_by_repeat]}")
    per_window = [float(statistics.median(r[k] for r in rates_by_repeat)) for k in range(count)]
    mean = statistics.fmean(per_window)
    return {"per_window": per_window, "mean": mean, "lowest": min(per_window), "highest": max(per_window),
            "spread": (max(per_window) - min(per_window)) / mean, "noise": relative_noise(per_window)}


def _sustained_start(spans: Sequence[tuple[int, int]], from_s: float | None) -> int | float:
    """Where a stress's sustained part starts, in %globaltimer ns: ``from_s`` after its first launch
    started, or (None) the middle of its launches' time."""
    start, end = spans[0][0], max(e for _, e in spans)
    return start + from_s * 1e9 if from_s is not None else start + (end - start) / 2


def sustained_rate(spans: Sequence[tuple[int, int]], work_per_launch: float, unit: str,
                   from_s: float | None = None) -> float | None:
    """A stress's own rate over its sustained part (where its sustained clock is taken: the second half,
    or from ``from_s`` on): the work of the launches that started there over their span. ``spans``:
    each launch's (first, last) %globaltimer ns over its blocks, in launch order; None when too few
    launches."""
    if len(spans) < 2:
        return None
    start = _sustained_start(spans, from_s)
    late = [s for s in spans if s[0] >= start]
    if not late:
        return None
    span_ns = max(e for _, e in late) - min(s for s, _ in late)
    return per_second(work_per_launch * len(late), span_ns / 1e9, unit) if span_ns > 0 else None


#: how many windows of a stress's sustained part its rate is read in (as its clock: summarize_clock)
RATE_WINDOWS = 5


def window_launches(spans: Sequence[tuple[int, int]], windows: int = RATE_WINDOWS,
                    from_s: float | None = None) -> list[list[int]]:
    """Which launches make each of ``windows`` equal windows of a stress's sustained part (the second half
    of its launches' time, or from ``from_s`` on): the indices of those that started in it. ``spans`` as
    :func:`sustained_rate`'s; [] when a window holds no launch, or its launches span no time."""
    if len(spans) < 2:
        return []
    end = max(e for _, e in spans)
    half = _sustained_start(spans, from_s)
    width = (end - half) / windows
    members = []
    for k in range(windows):
        lo, hi = half + k * width, half + (k + 1) * width
        inside = [i for i, sp in enumerate(spans) if lo <= sp[0] < hi or (k == windows - 1 and sp[0] == hi)]
        if not inside or max(spans[i][1] for i in inside) <= min(spans[i][0] for i in inside):
            return []
        members.append(inside)
    return members


def launches_rate(spans: Sequence[tuple[int, int]], launches: Sequence[int], work_per_launch: float,
                  unit: str) -> float:
    """The rate of some of a stress's launches: their work over their span (first start to last end)."""
    span_ns = max(spans[i][1] for i in launches) - min(spans[i][0] for i in launches)
    return per_second(work_per_launch * len(launches), span_ns / 1e9, unit)


def window_rates(spans: Sequence[tuple[int, int]], work_per_launch: float, unit: str,
                 windows: int = RATE_WINDOWS, from_s: float | None = None) -> list[float]:
    """A stress's own rate in each of ``windows`` equal windows of its sustained part (the second half
    of its launches' time, or from ``from_s`` on: where its sustained clock is read): the work of the
    launches that started in a window over their span (:func:`window_launches`); [] when a window
    holds no launch."""
    return [launches_rate(spans, w, work_per_launch, unit) for w in window_launches(spans, windows, from_s)]


def window_pairs(spans: Sequence[tuple[int, int]], launches_clock: Callable[[Sequence[int]], float],
                 work_per_launch: float, unit: str, windows: int = RATE_WINDOWS,
                 from_s: float | None = None) -> list[tuple[float, float]]:
    """Each window's (rate, SM clock), both of the same launches (:func:`window_launches`): the rate
    as :func:`window_rates`, the clock ``launches_clock(indices)`` (clocks.launches_clock over those
    launches' stamps). Reading the clock over other windows (equal time bins, split by count: the
    sustained clock's) pairs a rate with a clock it did not run at; [] when a window holds no launch."""
    return [(launches_rate(spans, w, work_per_launch, unit), float(launches_clock(w)))
            for w in window_launches(spans, windows, from_s)]


def median_pair(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The median rate with the clock it was read at: the (rate, clock) of the median-rate window or
    repeat; of an even count, the means of the two middle ones' rates and clocks (the ceiling is linear
    in the clock, so a mean of two possible readings is possible at the mean clock)."""
    if not pairs:
        raise ValueError("no (rate, clock) pairs")
    ranked = sorted(pairs, key=lambda p: p[0])
    mid = len(ranked) // 2
    if len(ranked) % 2:
        return float(ranked[mid][0]), float(ranked[mid][1])
    (r0, c0), (r1, c1) = ranked[mid - 1], ranked[mid]
    return (r0 + r1) / 2, (c0 + c1) / 2
