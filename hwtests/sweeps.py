"""The steps every sweep shares (fact_tests.measure_sweep's for a factspec.SweepSpec, and test_cache_capacity.py's
TLB conditions): a sweep measured point by point, and a fact's measurement given from what a sweep read."""

from __future__ import annotations

import specs_caches as sc

from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.stats import StopRule, clock_beside_info

#: a sweep point's launches: at least 3, until the median is steady to 1 % or 0.3 s have passed
SWEEP = StopRule(noise_target=0.01, min_samples=3, max_samples=20, time_budget_s=0.3)
#: a TLB sweep point's launch walks up to ~20k pages: fewer launches
TLB_SWEEP = StopRule(noise_target=0.01, min_samples=3, max_samples=8, time_budget_s=0.5)


class Points(list):
    """A sweep's (point, median cycles per hop) pairs, and ``clock``: the SM clock read beside their launches
    (stats.clock_beside_info; {} where the points' builds read none, KernelSpec.clock_beside)."""

    clock: dict = {}


def sweep(gpuprops, label: str, spec_of, footprints, stop=SWEEP, divisor: float = sc.CAP_UNROLL) -> Points:
    """(footprint, median cycles per hop) for each footprint (any point of a sweep: an offset, a (stride,
    footprint) pair), its launch's span over ``divisor`` hops; ``stop`` a StopRule, or a point's own of it."""
    measured = [(f, gpuprops.measure(f"{label} {f} B", spec_of(f), divisor=divisor,
                                     stop=stop(f) if callable(stop) else stop)) for f in footprints]
    points = Points((f, m.median) for f, m in measured)
    points.clock = clock_beside_info([getattr(m, "launch", None) or {} for _f, m in measured])
    return points


def given(name: str, values, unit: str, spec, launch: dict, clock, noise_target: float = 0.01) -> Measurement:
    """The fact's measurement: its values (a capacity: the one reach; a latency: its plateau's points),
    the sweep in ``launch``."""
    return Measurement.given(name, values, unit=unit, kernel=spec.kernel, sm_clock_mhz=clock,
                             noise_target=noise_target,
                             launch={"source": spec.source, "defines": dict(spec.defines), **launch})
