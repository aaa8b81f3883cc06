"""Rate arithmetic, no GPU in it: work over time in a fact's unit, one repeat's value from the L2
read's windows and their spread, and a stress's own rate over its sustained part (whole and in
windows) from its launches' %globaltimer spans.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

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
    late = [s for s in spans if s[0] >= _sustained_start(spans, from_s)]
    if not late:
        return None
    span_ns = max(e for _, e in late) - min(s for s, _ in late)
    return per_second(work_per_launch * len(late), span_ns / 1e9, unit) if span_ns > 0 else None


#: how many windows of a stress's sustained part its rate is read in (as its clock: summarize_clock)
RATE_WINDOWS = 5


def window_rates(spans: Sequence[tuple[int, int]], work_per_launch: float, unit: str,
                 windows: int = RATE_WINDOWS, from_s: float | None = None) -> list[float]:
    """A stress's own rate in each of ``windows`` equal windows of its sustained part (the second half
    of its launches' time, or from ``from_s`` on: where its sustained clock is read): the work of the
    launches that started in a window over their span. ``spans`` as :func:`sustained_rate`'s; []
    when a window holds no launch."""
    if len(spans) < 2:
        return []
    end = max(e for _, e in spans)
    half = _sustained_start(spans, from_s)
    width = (end - half) / windows
    rates = []
    for k in range(windows):
        lo, hi = half + k * width, half + (k + 1) * width
        inside = [sp for sp in spans if lo <= sp[0] < hi or (k == windows - 1 and sp[0] == hi)]
        span_ns = max((e for _, e in inside), default=0) - min((s for s, _ in inside), default=0)
        if not inside or span_ns <= 0:
            return []
        rates.append(per_second(work_per_launch * len(inside), span_ns / 1e9, unit))
    return rates
