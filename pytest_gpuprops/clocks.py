"""The SM clock over time: from the kernels' own (clock64, %globaltimer) stamps (the clock of every
interval, binned into a series) and from NVML, sampled by a thread (ClockSampler); and a series
summed up as sustained clock, lowest point and ramp (docs/method.md).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence

from . import devices


def stamp_array(per_launch):
    """A load's kernel stamps as one int64 array (launches, blocks, stamps, 2) of (clock64,
    %globaltimer), every block's in order: a stamp before the one before it is an error naming the
    launch, block and stamp. Numpy: a 6-s stress of 120 launches x 132 blocks, or 50 launches of a
    repeat, is read without a Python loop over its intervals (a simulated stress of 750 launches spent
    7 s in such a loop)."""
    import numpy as np  # with CuPy, on every GPU machine; the CPU tests' simulated loads have it too

    a = np.asarray(per_launch, dtype=np.int64)
    if a.ndim != 4 or a.shape[-1] != 2 or a.shape[2] < 1:
        raise ValueError(f"stamps must be (launches, blocks, stamps, 2), not {a.shape}")
    back = np.argwhere((np.diff(a, axis=2) < 0).any(axis=-1))
    if len(back):
        launch, block, k = (int(x) for x in back[0])
        c1, g1 = a[launch, block, k + 1].tolist()
        c0, g0 = a[launch, block, k].tolist()
        raise ValueError(f"launch {launch}, block {block}: stamp {k + 1} ({c1}, {g1}) is before stamp {k} ({c0}, {g0})")
    return a


def _moved_steps(a):
    """Every interval between consecutive stamps of a block, and which of them %globaltimer moved in:
    an interval in which it did not has no known clock, and is left out of every clock."""
    import numpy as np

    step = np.diff(a, axis=2)
    return step, step[..., 1] > 0


def launch_totals(a) -> tuple[list[int], list[int]]:
    """Each launch's cycles and nanoseconds over its blocks' intervals in which %globaltimer moved
    (``a``: :func:`stamp_array`): a clock over some launches is their cycles over their nanoseconds
    (weighted by time, as the work they did)."""
    import numpy as np

    step, moved = _moved_steps(a)
    return (np.where(moved, step[..., 0], 0).sum(axis=(1, 2)).tolist(),
            np.where(moved, step[..., 1], 0).sum(axis=(1, 2)).tolist())


def totals_mhz(cycles: Sequence[int], ns: Sequence[int]) -> float:
    """The SM clock of some launches' :func:`launch_totals`: all their cycles over all their nanoseconds."""
    total_ns = sum(ns)
    if total_ns <= 0:
        raise ValueError("no interval with elapsed %globaltimer time: the clock is unknown")
    return sum(cycles) / total_ns * 1e3


def launches_clock(stamps) -> float:
    """The SM clock over several launches (``stamps``: as :func:`stamp_array` takes them, e.g. the 50
    launches x 132 blocks x 9 stamps of a repeat): every interval of every block of each."""
    return totals_mhz(*launch_totals(stamp_array(stamps)))


def stamps_series(a, *, t0_ns: int, bin_ns: int) -> list[tuple[float, float]]:
    """The clock over time: every interval of ``a`` (:func:`stamp_array`) in which %globaltimer moved,
    binned by its midpoint (``bin_ns`` wide from ``t0_ns``), each bin's cycles over its nanoseconds;
    [(bin centre in seconds from t0, MHz)] in time order. Midpoints from ``t0_ns`` in integers (exact,
    where two %globaltimer stamps summed as a float are not)."""
    import numpy as np

    if bin_ns <= 0:
        raise ValueError(f"bin_ns must be > 0, not {bin_ns}")
    step, moved = _moved_steps(a)
    rel = a[..., 1] - int(t0_ns)
    k = (rel[:, :, :-1] + rel[:, :, 1:])[moved] // (2 * int(bin_ns))
    if not len(k):
        return []
    base = int(k.min())
    cycles = np.bincount(k - base, weights=step[..., 0][moved].astype(np.float64))
    ns = np.bincount(k - base, weights=step[..., 1][moved].astype(np.float64))
    return [((base + j + 0.5) * bin_ns / 1e9, float(cycles[j] / ns[j] * 1e3)) for j in np.flatnonzero(ns > 0).tolist()]


def second_half(series: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points of a time series from the middle of its time span on."""
    if not series:
        return []
    mid = (series[0][0] + series[-1][0]) / 2
    return [p for p in series if p[0] >= mid]


def window_means(values: Sequence[float], windows: int = 5) -> list[float]:
    """The means of ``windows`` consecutive, near-equal runs of ``values`` (each value alone when
    there are fewer). A mean, not a median: under a power cap the clock cycles between a plateau and
    dips (on the H100 under dense wgmma, 2026-11-25: ~1650 MHz with a dip to ~1400 every second), and
    the work a load does follows the time-averaged clock."""
    if not values:
        return []
    if len(values) <= windows:
        return [float(v) for v in values]
    edges = [round(i * len(values) / windows) for i in range(windows + 1)]
    return [float(statistics.fmean(values[a:b])) for a, b in zip(edges, edges[1:])]


#: where the early windows of a stress start: the power cap settles within ~0.1 s on an H100 SXM
EARLY_FROM_S = 1.0


def early_sustained(series: Sequence[tuple[float, float]], duration_s: float, windows: int = 5) -> float | None:
    """The sustained statistic (median of window means) over EARLY_FROM_S to EARLY_FROM_S + half the
    stress, instead of its second half: equal within the noise, run after run, means a stress that
    long would give the same sustained clock. None when the series does not reach past that span."""
    if not series or series[-1][0] < EARLY_FROM_S + duration_s / 2:
        return None
    early = [mhz for t, mhz in series if EARLY_FROM_S <= t < EARLY_FROM_S + duration_s / 2]
    wins = window_means(early, windows)
    return float(statistics.median(wins)) if wins else None


def ramp_time_s(series: Sequence[tuple[float, float]], target_mhz: float, frac: float = 0.95) -> float | None:
    """The first time the series reaches ``frac`` of ``target_mhz``; None if it never does."""
    return next((t for t, mhz in series if mhz >= frac * target_mhz), None)


@dataclasses.dataclass(frozen=True)
class ClockSummary:
    sustained_mhz: float  # median of the window means of the second half
    windows_mhz: list[float]
    min_mhz: float  # lowest point from the ramp on (from the second half if it never ramps)
    ramp_s: float | None  # first time at 95 % of sustained
    start_mhz: float  # the first point
    points: int

    def as_dict(self) -> dict:
        return {"sustained_mhz": round(self.sustained_mhz, 1), "windows_mhz": [round(w, 1) for w in self.windows_mhz],
                "min_mhz": round(self.min_mhz, 1), "ramp_s": None if self.ramp_s is None else round(self.ramp_s, 4),
                "start_mhz": round(self.start_mhz, 1), "points": self.points}


def summarize_clock(series: Sequence[tuple[float, float]], *, windows: int = 5, frac: float = 0.95,
                    from_s: float | None = None) -> ClockSummary:
    """Sustained, minimum and ramp of a clock series [(seconds from the first launch, MHz)]; the
    sustained clock over its second half, or from ``from_s`` on."""
    if not series:
        raise ValueError("an empty clock series has no sustained clock")
    late = second_half(series) if from_s is None else [p for p in series if p[0] >= from_s]
    if not late:
        raise ValueError(f"the clock series ends at {series[-1][0]:.3f} s, before its sustained part ({from_s} s on)")
    wins = window_means([mhz for _, mhz in late], windows)
    sustained = float(statistics.median(wins))
    ramp = ramp_time_s(series, sustained, frac)
    loaded = [mhz for t, mhz in series if t >= ramp] if ramp is not None else [mhz for _, mhz in late]
    return ClockSummary(sustained, wins, float(min(loaded)), ramp, float(series[0][1]), len(series))


class ClockSampler:
    """Reads (throttle reasons, SM clock MHz) every ``period_s`` from a thread while in use.

    ``read`` is :func:`devices.throttle_reasons` bound to a GPU (``lambda: throttle_reasons(info)``),
    or any function returning ``(reasons, mhz or None)``. Times are ``time.monotonic()``; :meth:`mark`
    sets the origin that :meth:`series` counts from.
    """

    def __init__(self, read: Callable[[], tuple[list[str], int | float | None]], period_s: float = 0.05):
        self.read = read
        self.period_s = period_s
        self.samples: list[tuple[float, float | None, tuple[str, ...]]] = []
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def sample(self) -> None:
        try:
            reasons, mhz = self.read()
        except Exception:  # NVML went away mid-run: no sample, the kernel-side clock still stands
            return
        with self._lock:
            self.samples.append((time.monotonic(), None if mhz is None else float(mhz), tuple(reasons)))

    def mark(self) -> float:
        self.t0 = time.monotonic()
        return self.t0

    def __enter__(self) -> ClockSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuprops-clock-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.sample()  # one more at the end: a reason that came up in the last period is seen

    def series(self, start_s: float = -math.inf, end_s: float = math.inf) -> list[tuple[float, float]]:
        """[(seconds from the mark, MHz)] of the samples in [start_s, end_s] that have a clock."""
        with self._lock:
            return [(t - self.t0, mhz) for t, mhz, _ in self.samples
                    if mhz is not None and start_s <= t - self.t0 <= end_s]

    def reasons(self, start_s: float = -math.inf, end_s: float = math.inf) -> list[str]:
        """Every throttle reason any sample in [start_s, end_s] saw."""
        with self._lock:
            return sorted({r for t, _, rs in self.samples if start_s <= t - self.t0 <= end_s for r in rs})


def nvml_reader(info: devices.GpuInfo) -> Callable[[], tuple[list[str], int | None]]:
    """NVML's (throttle reasons, SM clock) of the GPU ``info``, as :class:`ClockSampler` reads them."""
    return lambda: devices.throttle_reasons(info)
