"""The pytest side of fact specs (pytest_gpuprops/factspec.py): a file's list of FactSpec becomes its
GPU tests (:func:`gpu_params`, :func:`measure_and_check`) and its static region checks
(:func:`static_params`, :func:`region_problems`); the session prefetch (conftest.py) reads the builds
from the same specs, through the ``fact`` parameter of each test.

A GPU test of a spec file is::

    @pytest.mark.fact(lambda fact: fact.name)
    @pytest.mark.parametrize("fact", fact_tests.gpu_params(FACTS))
    def test_fact(gpuprops, fact, benchmark):
        fact_tests.measure_and_check(gpuprops, fact, benchmark)

Each fact is one test, its id the fact's name, so ``pytest hwtests -k <fact>`` runs that fact and its
static checks, nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import memory_levels as ml
import pytest
import specs_caches as sc
import sweeps

from pytest_gpuprops import factspec, sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.timing import UncleanRegion, build_for_timing

KERNELS = Path(__file__).parent.parent / "kernels"


def gpu_params(facts: list[factspec.FactSpec]) -> list:
    """``facts`` as the ``fact`` parameter of a GPU test: id the fact's name, marked with its arch (a
    GPU of another arch skips it, saying so; a fact of any arch runs where the GPU's facts hold it).
    Registers the GPU model's facts (scope "gpu") for record mode."""
    factspec.by_name(facts)  # a name declared twice is refused here, at collection
    factspec.register_scopes(facts)
    return [pytest.param(f, id=f.name, marks=[pytest.mark.arch(f.arch)] if f.arch else []) for f in facts]


def static_params(facts: list[factspec.FactSpec]) -> list:
    """``facts`` as the ``fact`` parameter of a static test, id the fact's name; a fact of any arch once
    per arch of factspec.STATIC_ARCHES (id ``<fact>-<arch>``), pinned to it."""
    return [pytest.param(g, id=f.name if f.arch else f"{f.name}-{g.arch}") for f in facts for g in f.on_each_arch()]


# ----------------------------------------------------------------------------------------------
# on the GPU


def measure(gpuprops, fact: factspec.FactSpec):
    """Measure ``fact`` as its spec says: its launch with its statistic and divisor; an L2 fact line by
    line over the spread buffer (memory_levels.near_tier_latency; the one-line chase's facts:
    memory_levels.chase_line_measurement)."""
    if ml.is_chase_line(fact):
        return ml.chase_line_measurement(gpuprops, fact)
    if fact.statistic.lines is not None:
        band = {"all_lines": {"band": ml.ALL_LINES}, "near_tier": {}}[fact.statistic.lines]
        return ml.near_tier_latency(gpuprops, fact.name, fact.kernel, divisor=fact.per(), **band)
    stop = {} if fact.min_launches is None else \
        {"stop": dataclasses.replace(gpuprops.runner.stop, min_samples=fact.min_launches)}
    spec = fact.kernel()
    built = {} if fact.build_arch is None else {"built": built_for(gpuprops.runner, spec, fact.build_arch)}
    return gpuprops.measure(fact.name, spec, divisor=fact.per(), mode=fact.statistic.mode, unit=fact.unit,
                            transform=fact.transform, **stop, **built)


def built_for(runner, spec, arch: str):
    """``spec`` compiled for ``arch`` (a fact's build_arch: sm_90a for wgmma, where the runner compiles
    for the GPU's sm_90) and patched for timing, its region checked (timing.build_for_timing)."""
    compiled_ = compile_cuda(KERNELS / spec.source, arch, spec.defines, cache_dir=runner.cache_dir)
    return build_for_timing(sass.Cubin(compiled_.cubin, arch, name=f"{spec.source} {spec.defines}"), spec)


def measure_and_check(gpuprops, fact: factspec.FactSpec, benchmark=None):
    """Measure ``fact`` and check it against this GPU's facts (or record it): a cluster launch the
    driver refuses fails or skips first (:func:`require_clusters`), a plot point goes to the report."""
    name = gpuprops.fact_name
    if name != fact.name:
        raise ValueError(f"the test declares {name} but is handed the spec of {fact.name}")
    spec = fact.build()
    if spec.cluster is not None:
        require_clusters(gpuprops, spec)
    m = measure(gpuprops, fact)
    if fact.plot is not None:
        plot, point = fact.plot(m)
        gpuprops.plot_point(plot, **point)
    return gpuprops.check(name, m, benchmark=benchmark, method=fact.method)


def sweep_params(sweeps: list[factspec.SweepSpec]) -> list:
    """``sweeps`` as the ``fact`` parameter of a GPU test, as :func:`gpu_params` does for fact specs."""
    factspec.by_name(sweeps)
    factspec.register_scopes(sweeps)
    return [pytest.param(f, id=f.name, marks=[pytest.mark.arch(f.arch)]) for f in sweeps]


#: the points of each shared sweep measured in this process, by (GPU index, SweepSpec.shared)
_SHARED_SWEEPS: dict[tuple, list] = {}
#: sweeps taken before one that cannot be read fails its test: a sweep is many launches over seconds, and one
#: disturbed point can hide its step (H100 node GPU-f1f1021a + GPU-26662266, 2026-11-27: L2 partition sweeps
#: unreadable in two processes, readable in the next three), so an unreadable sweep is confirmed as a
#: failing value is, by fresh ones
SWEEP_ATTEMPTS = 3


def _sweep_points(gpuprops, sweep: factspec.SweepSpec, fresh: bool) -> list:
    """The sweep's points: measured (each a plot point), or a shared sweep's from earlier in the process."""
    key = (gpuprops.gpu.index, sweep.shared) if sweep.shared else None
    if key is not None and not fresh and key in _SHARED_SWEEPS:
        return _SHARED_SWEEPS[key]
    label = sweep.shared or sweep.name
    points = sweeps.sweep(gpuprops, label, sweep.point, sweep.xs, divisor=sweep.divisor, stop=sweep.stop or sweeps.SWEEP)
    for x, cycles in points:
        gpuprops.plot_point(label, **sweep.plot_point(x, cycles))
    if key is not None:
        _SHARED_SWEEPS[key] = points
    return points


def measure_sweep(gpuprops, sweep: factspec.SweepSpec, fresh: bool = False) -> Measurement:
    """Every point of ``sweep`` measured (sweeps.SWEEP), the sweep read (``sweep.read``): the fact's one value,
    the sweep and what it was read from in the launch info, each point a plot point. A sweep that shows no
    value is swept afresh, up to SWEEP_ATTEMPTS sweeps in all, and fails the test with every sweep's reading
    only when none shows it (the sweeps set aside go to the launch info); a sweep that shows the fact's level
    lies past its reach (specs_caches.NoSuchLevel) skips where this GPU's facts hold no value. Measured again,
    the whole sweep is. A shared sweep (``sweep.shared``) is measured once for all the facts read from it,
    unless ``fresh``. What ``sweep.report`` says of the launch, read after its launches, joins the launch
    info and a failure's text."""
    said: dict = {}
    unreadable: list[str] = []
    for attempt in range(SWEEP_ATTEMPTS):
        points = _sweep_points(gpuprops, sweep, fresh or attempt > 0)
        # after the sweep's launches: what the driver holds for the function is what they left
        said = sweep.report(gpuprops, sweep.build()) if sweep.report else {}
        try:
            value, info = sweep.read(points)
        except sc.NoSuchLevel as exc:  # no value here: a skip, unless this GPU's facts hold one (then confirmed)
            if gpuprops.fact(sweep.name) is None:
                pytest.skip(f"{sweep.name}: {exc}")
            unreadable.append(str(exc))
            continue
        except sc.SweepError as exc:
            unreadable.append(str(exc))
            continue
        m = sweeps.given(sweep.name, [float(value)], sweep.unit, sweep.point(sweep.xs[0]),
                         {"sweep": [sweep.plot_point(x, c) for x, c in points], **info, **said,
                          **getattr(points, "clock", {}),
                          **({"unreadable_sweeps": unreadable} if unreadable else {})},
                         gpuprops.runner.session_sm_clock_mhz(), noise_target=0.0)
        m.remeasure = lambda: measure_sweep(gpuprops, sweep, fresh=True)
        return m
    what = f"{sweep.name} ({said})" if said else sweep.name
    pytest.fail(f"{what}: none of {SWEEP_ATTEMPTS} sweeps shows its value: " +
                "; ".join(f"sweep {k + 1}: {text}" for k, text in enumerate(unreadable)), pytrace=False)


def measure_sweep_and_check(gpuprops, sweep: factspec.SweepSpec, benchmark=None):
    """Measure ``sweep``'s fact and check it against this GPU's facts (or record it); a fact this GPU has
    no value for skips before the sweep, saying how to record it."""
    name = gpuprops.fact_name
    if name != sweep.name:
        raise ValueError(f"the test declares {name} but is handed the sweep of {sweep.name}")
    gpuprops.fact(name)
    return gpuprops.check(name, measure_sweep(gpuprops, sweep), benchmark=benchmark, method=sweep.method)


def require_clusters(gpuprops, spec):
    """Before a cluster launch: where the driver refuses ``spec``'s clusters, fail with its reason and
    what to check on sm_90 and newer (they have clusters, and the fact was measured with this launch),
    skip with it only on an arch without clusters (specs_async.refused_cluster). A fact this GPU has no
    value for skips first, saying how to record it; a build problem is left to gpuprops.measure, which
    reports it as every fact does."""
    from specs_async import refused_cluster
    name = gpuprops.fact_name
    fact = gpuprops.fact(name)  # skips where this GPU's facts lack it
    try:
        reason = gpuprops.runner.cluster_refusal(spec)
    except UncleanRegion:
        return
    if reason:
        skip, message = refused_cluster(gpuprops.gpu.arch, spec, reason, name,
                                        fact.expected_text() if fact is not None else None)
        if skip:
            pytest.skip(message)
        pytest.fail(message, pytrace=False)


# ----------------------------------------------------------------------------------------------
# without a GPU


@functools.lru_cache(maxsize=None)
def compiled(fact: factspec.FactSpec) -> tuple[sass.Cubin, object]:
    """(``fact``'s build compiled for its arch (its build_arch where it has one), the KernelSpec it is
    launched with). A fact of any arch is compiled once pinned to each (``fact.on_each_arch()``, as
    static_params hands them out)."""
    if fact.arch is None:
        raise ValueError(f"fact {fact.name} is defined for any arch: compile it pinned to one (fact.on_each_arch())")
    spec = fact.build()
    arch = fact.compile_arch()
    cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, arch, spec.defines).cubin, arch,
                       name=f"{spec.source} {spec.defines}")
    return cubin, spec


def region_problems(fact: factspec.FactSpec) -> list[str]:
    """How ``fact``'s compiled region breaks its spec's rules (empty: it holds them)."""
    cubin, spec = compiled(fact)
    return fact.region.problems(cubin.instructions(spec.kernel), spec.defines)


@functools.lru_cache(maxsize=None)
def launched(fact: factspec.FactSpec) -> tuple[sass.Instruction, ...]:
    """``fact``'s build as it is launched: compiled, patched for timing and checked (timing.build_for_timing,
    which refuses a region that is not clean or breaks the spec's rules)."""
    cubin, spec = compiled(fact)
    return tuple(build_for_timing(cubin, spec)[1])


def region(fact: factspec.FactSpec) -> list[sass.Instruction]:
    """The launched build's timed region, padding left out."""
    _, between, _ = sass.timed_region(list(launched(fact)))
    return [i for i in between if not sass.is_filler(i)]
