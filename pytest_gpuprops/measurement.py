"""The Measurement: one quantity's per-launch values, how they were obtained, and what they say (the
reading, its spread and noise, whether a series of copies settled). The data model the measure layer's
Runner makes and every layer above it reads (assertions, reports, the unit compare); it launches nothing."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence

from .stats import SETTLED_MIN_SHARE, relative_noise, robust_relative_noise, settled_copies


@dataclasses.dataclass
class Measurement:
    """Per-launch values of one quantity, and how they were obtained."""

    name: str
    unit: str
    values: list[float]
    stop_reason: str  # "converged", "time budget", "sample cap"
    noise_target: float
    overhead_cycles: float
    sm_clock_mhz: float | None
    throttle: list[str]
    kernel: str
    launch: dict
    per_warp: list[float] = dataclasses.field(default_factory=list)  # last launch, for reports
    #: measure again with fresh launches (set by Runner.measure; a failure is confirmed with it)
    remeasure: Callable[[], Measurement] | None = dataclasses.field(default=None, repr=False, compare=False)
    #: how the values make the reading: "median" (robust to a disturbed launch), "mean" where the values
    #: are equal parts of one whole (a stress's power windows: their mean is the energy over the span's time),
    #: or "settled": the median of the copies at a link's settled rate (stats.settled_copies), the ones a host's
    #: disturbance slowed left out
    center: str = "median"
    #: how the values' noise is read: "stdev" (nvbench's relative standard deviation), "iqr" where the reading
    #: is the median of a few repeats that now and then one of a host's hiccups slows (stats.robust_relative_noise),
    #: or "settled": the settled copies' interquartile spread, and unsettled (NOISY) where fewer than
    #: stats.SETTLED_MIN_SHARE of the copies ran at the settled rate
    spread: str = "stdev"

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def reading(self) -> float:
        """The value checked against the fact: the values' median, their mean, or the median of the settled
        copies (:attr:`center`)."""
        if self.center == "mean":
            return statistics.fmean(self.values)
        if self.center == "settled":
            return statistics.median(settled_copies(self.values))
        if self.center != "median":
            raise ValueError(f"{self.name}: center {self.center!r}; expected 'median', 'mean' or 'settled'")
        return self.median

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def noise(self) -> float:
        """Relative standard deviation of the per-launch values (nvbench's 'noise'), or their robust
        counterpart (:attr:`spread`)."""
        if self.spread == "iqr":
            return robust_relative_noise(self.values)
        if self.spread == "settled":
            return robust_relative_noise(settled_copies(self.values))
        if self.spread != "stdev":
            raise ValueError(f"{self.name}: spread {self.spread!r}; expected 'stdev', 'iqr' or 'settled'")
        return relative_noise(self.values)

    @property
    def settled_share(self) -> float | None:
        """The share of the copies at the settled rate (:attr:`spread` "settled"); None for other spreads."""
        return len(settled_copies(self.values)) / self.n if self.spread == "settled" else None

    @property
    def settled(self) -> bool:
        return not self.unsettled_reason()

    def unsettled_reason(self) -> str:
        """Why the measurement is not settled, as a verdict says it; empty where it is."""
        share = self.settled_share
        if share is not None and share < SETTLED_MIN_SHARE:
            return (f"{round(share * self.n)} of {self.n} copies at the settled rate, under {SETTLED_MIN_SHARE:.0%}: "
                    "a disturbance through the series")
        if self.noise > self.noise_target:
            return f"noise {self.noise:.2%} over target {self.noise_target:.2%}"
        return ""

    def summary(self) -> str:
        robust = {"iqr": " (interquartile)", "settled": " (interquartile, settled copies)"}.get(self.spread, "")
        share = self.settled_share
        at = "" if share is None else f", {round(share * self.n)} of {self.n} copies at the settled rate"
        return (f"{self.reading:.3f} {self.unit} (min {self.min:.3f}, max {self.max:.3f}, noise {self.noise:.2%}{robust}"
                f"{at}, n={self.n}, {self.stop_reason})")

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "remeasure"}
        d = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
        d.update(median=self.median, reading=self.reading, min=self.min, max=self.max, noise=self.noise, n=self.n)
        return d

    @classmethod
    def given(cls, name: str, values: Sequence[float], unit: str = "cycles", **kw) -> Measurement:
        """A measurement from given numbers (tests of the assertion and report layers)."""
        base = dict(stop_reason="converged", noise_target=0.01, overhead_cycles=0.0, sm_clock_mhz=None,
                    throttle=[], kernel="(given)", launch={})
        base.update(kw)
        return cls(name=name, unit=unit, values=list(values), **base)
