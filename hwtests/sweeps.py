"""The steps every sweep shares (fact_tests.measure_sweep's for a factspec.SweepSpec, and test_cache_capacity.py's
constant-cache and TLB sweeps, not yet sweep specs): a sweep measured point by point, its plateaus
for the report, a fact's measurement given from what a sweep read, and a sweep that cannot be read failing its
test with the sweep."""

from __future__ import annotations

import pytest
import specs_caches as sc

from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.stats import StopRule

#: a sweep point's launches: at least 3, until the median is steady to 1 % or 0.3 s have passed
SWEEP = StopRule(noise_target=0.01, min_samples=3, max_samples=20, time_budget_s=0.3)
#: a TLB sweep point's launch walks up to ~20k pages: fewer launches
TLB_SWEEP = StopRule(noise_target=0.01, min_samples=3, max_samples=8, time_budget_s=0.5)

def sweep(gpuprops, label: str, spec_of, footprints, stop=SWEEP, divisor: float = sc.CAP_UNROLL) -> list[tuple]:
    """(footprint, median cycles per hop) for each footprint (any point of a sweep: an offset, a (stride,
    footprint) pair), its launch's span over ``divisor`` hops."""
    return [(f, gpuprops.measure(f"{label} {f} B", spec_of(f), divisor=divisor, stop=stop).median)
            for f in footprints]


plateau_dicts = sc.plateau_dicts


def given(name: str, values, unit: str, spec, launch: dict, clock, noise_target: float = 0.01) -> Measurement:
    """The fact's measurement: its values (a capacity: the one reach; a latency: its plateau's points),
    the sweep in ``launch``."""
    return Measurement.given(name, values, unit=unit, kernel=spec.kernel, sm_clock_mhz=clock,
                             noise_target=noise_target,
                             launch={"source": spec.source, "defines": dict(spec.defines), **launch})


def no_such_step(gpuprops, name: str, text: str):
    """The sweep shows no step for fact ``name``: a failure where the facts hold a value for it (the
    step was there when it was recorded), else a skip saying so (the step may lie past what the
    sweep can reach on this GPU: nothing to record)."""
    if gpuprops.fact(name) is not None:
        pytest.fail(text, pytrace=False)
    pytest.skip(text)


def read_sweep(reader, points, what: str):
    """``reader(points)``, a sweep that does not show its step failing the test with the sweep."""
    try:
        return reader(points)
    except sc.SweepError as exc:
        pytest.fail(f"{what}: {exc}", pytrace=False)
