"""Fact specs: the one place a measured fact is declared.

A :class:`FactSpec` (a :class:`SweepSpec` for a fact read where a sweep of launches steps) says
everything about one fact that is not its expected value: its name, the
kernel launch that measures it, what its timed region must hold, the statistic and divisor, its
scope (the SM's, or the GPU model's memory system's), the method text record mode writes, and the
arch it is defined for. The GPU test, the static region check, the session prefetch's build list,
``-k <fact>``, the docs' fact list (``tools/fact_specs.py``) and the GPU-scope registration all read
it; the expected value is the facts file's (``facts/sm_XX.toml``).

What the timed region must hold (:class:`region_rules.Region`) is derived, not typed from a disassembly: the spec
names the unit's own opcodes for one step, in issue order (the ones the fact is about: the copy and
its wait, the chained load), and how many steps the kernel runs (a number, or the define that sets
it); the :class:`region_rules.Shape` names how ptxas lays the rest out around them (nothing else, a counted loop,
a try_wait loop, an elected lane's copy, ...). What else sits in the compiled region is then read
from the SASS and checked against the shape's invariants, each a rule, not a count:

* the unit's opcodes, exactly steps x per step, in the shape's order;
* nothing else that touches memory (:func:`sass.region_mismatch`), only the shape's kinds of glue
  (branches and convergence, loop control, uniform set-up) and no more of it than the shape allows;
* a kernel with ``PASSES`` > 1 times its last pass (one branch back over the region after the
  stop read), one with ``PASSES`` = 1 does not loop;
* a try_wait loop retries out of line and comes back into the region, so every retry is timed.

The checks run without a GPU (hwtests/test_static_*.py) and, as the kernel is built for launch, on
the GPU's own compile (:meth:`FactSpec.kernel` sets the launch's ``KernelSpec.region_check`` to the
spec's :class:`region_rules.RegionRules`, and :func:`timing.build_for_timing` refuses a region that breaks them,
as it refuses one that is not clean at both ends).

This module imports no pytest: the pytest side is hwtests/fact_tests.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from . import facts as gp_facts
from . import facts_schema, reserved
from .kernel_spec import KernelSpec
from .region_rules import Region, RegionRules

SCOPES = ("arch", "gpu")
#: where the static checks compile a fact defined for any arch (``FactSpec.arch`` None): the archs with
#: facts files and the pre-Hopper data-centre one (nvdisasm 13 reads sm_75 and newer)
STATIC_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90")

# ----------------------------------------------------------------------------------------------
# the statistic


def check_name_and_scope(name: str, scope: str) -> None:
    """Refuse a fact spec's name that is not lower_snake_case, or a scope that is not one of SCOPES."""
    if not facts_schema.NAME.match(name):
        raise ValueError(f"fact name {name!r} must be lower_snake_case")
    if scope not in SCOPES:
        raise ValueError(f"fact {name}: scope {scope!r}; expected one of {SCOPES}")


@dataclasses.dataclass(frozen=True)
class Statistic:
    """How a launch becomes the fact's value: ``mode`` as measure.Runner.measure takes it (``warp``:
    the median over warps; ``warp_min``: the lowest; ``warp_mean``: the mean; ``span``: the block's span; ``block_span``: the median of each block's span;
    ``block_span_ns``: the same in %globaltimer nanoseconds, for a kernel built with TIMER=1)
    and, for an L2 hit whose latency depends on the line's slice, ``lines``: measured line by line over
    the spread buffer, the lowest tier's median (``near_tier``) or every line's above a low tier (``all_lines``); a
    chase that stays on each line (hwtests/memory_levels.py :data:`CHASE_LINE_STATISTICS`) each line's
    DRAM miss: the mean over the near tier's lines (``dram_near_tier_mean``) or the far tier's
    (``dram_far_tier_mean``)."""

    mode: str = "warp"
    lines: str | None = None

    def __post_init__(self):
        if self.mode not in STATISTIC_MODES:
            raise ValueError(f"statistic mode {self.mode!r}: expected one of {', '.join(STATISTIC_MODES)}")
        if self.lines not in LINE_STATISTICS:
            raise ValueError(f"statistic lines {self.lines!r}: expected None or one of {sorted(k for k in LINE_STATISTICS if k)}")

    def text(self) -> str:
        base = STATISTIC_MODES[self.mode]
        return base + LINE_STATISTICS[self.lines]


#: Statistic.mode (measure.Runner.measure's) -> how its text begins
STATISTIC_MODES = {"warp": "median over warps", "warp_min": "the lowest over warps", "warp_mean": "mean over warps",
                   "span": "the block's span", "block_span": "median of the blocks' spans",
                   "block_span_ns": "median of the blocks' spans in %globaltimer nanoseconds"}

#: Statistic.lines -> how its text ends
LINE_STATISTICS = {None: "", "near_tier": ", line by line: the lowest tier's median",
                   "all_lines": ", line by line: the median over lines above a low tier",
                   "dram_near_tier_mean": ", line by line: each line's DRAM miss, the mean over the near tier's "
                                          "lines",
                   "dram_far_tier_mean": ", line by line: each line's DRAM miss, the mean over the far tier's "
                                         "lines"}

MEDIAN_OVER_WARPS = Statistic()

# ----------------------------------------------------------------------------------------------
# the fact spec


@dataclasses.dataclass(frozen=True)
class FactSpec:
    """One measured fact, declared once (see the module's docstring).

    ``launch()`` (or ``launch(line)`` where ``statistic.lines`` is set: the L2 line the buffer starts
    at) returns the KernelSpec to compile and launch, without its region: :meth:`kernel` adds it.
    ``divisor``: None divides by the region's steps (cycles per step). ``plot(measurement) -> (plot,
    point)`` adds a report plot point. ``scope``: "arch" (the SM's) or "gpu" (the GPU model's memory
    system: record mode writes it to the GPU's section). ``arch``: the one arch the fact is defined
    for (a GPU of another skips it), or None: any arch whose facts file holds it, its region checked
    on every arch of :data:`STATIC_ARCHES`. ``min_launches``: at least this many launches before the
    stop rule may end (where launches differ by where the code is fetched from). ``build_arch``: the
    arch the build is compiled for where it is not the GPU's (``"sm_90a"`` for wgmma, whose cubin runs
    on the sm_90 GPUs); None: the GPU's. ``reserve``: ``(name, bytes(cp))`` of one buffer the fact's
    launches take (reserved.buffer), allocated as the GPU's runner starts (reserved.py); the facts that
    name one buffer share it."""

    name: str
    launch: Callable[..., KernelSpec]
    region: Region
    method: str
    divisor: float | None = None
    statistic: Statistic = MEDIAN_OVER_WARPS
    scope: str = "arch"
    arch: str | None = "sm_90"
    unit: str = "cycles"
    transform: Callable[[float], float] | None = None
    plot: Callable | None = None
    min_launches: int | None = None
    build_arch: str | None = None
    reserve: tuple[str, Callable[[object], int]] | None = None

    def __post_init__(self):
        check_name_and_scope(self.name, self.scope)
        if self.reserve is not None and (len(self.reserve) != 2 or not self.reserve[0] or not callable(self.reserve[1])):
            raise ValueError(f"fact {self.name}: reserve {self.reserve!r}; expected (buffer name, bytes(cp))")
        if self.min_launches is not None and self.min_launches < 1:
            raise ValueError(f"fact {self.name}: min_launches {self.min_launches}; expected a positive count or None")
        if self.build_arch is not None and self.arch is None:
            raise ValueError(f"fact {self.name}: build_arch {self.build_arch} needs the one arch it runs on (arch)")

    def compile_arch(self) -> str | None:
        """The arch the fact's build is compiled for: ``build_arch``, else ``arch``."""
        return self.build_arch or self.arch

    def on_each_arch(self) -> list[FactSpec]:
        """The spec as its static checks take it, one per arch they compile for: itself where it has
        one arch, else pinned to each of :data:`STATIC_ARCHES`."""
        return [self] if self.arch is not None else [dataclasses.replace(self, arch=a) for a in STATIC_ARCHES]

    def kernel(self, line: int | None = None) -> KernelSpec:
        """The launch, with what its region must hold: the unit's exact counts, the shape's glue (and
        any trailing opcodes) as the other instructions allowed, and the region's rules as its
        ``region_check`` (:class:`RegionRules`), which build_for_timing runs before the timing patch."""
        if (line is not None) != (self.statistic.lines is not None):
            raise ValueError(f"fact {self.name}: a line is given for the line-by-line facts only, and they need one")
        spec = self.launch() if line is None else self.launch(line)
        return dataclasses.replace(spec, region=self.region.counts(spec.defines), region_other=self.region.other_max(),
                                   region_check=RegionRules(self.name, self.region, tuple(spec.defines.items())))

    def build(self) -> KernelSpec:
        """The one build every launch of the fact uses (the L2 line is an argument, not code)."""
        return self.kernel(0 if self.statistic.lines else None)

    def steps(self) -> int:
        return self.region.step_count(self.build().defines)

    def per(self) -> float:
        """The divisor the measurement takes."""
        return float(self.steps() if self.divisor is None else self.divisor)

    def row(self) -> dict:
        """The fact as the docs' list shows it."""
        k = self.build()
        defines = " ".join(f"{d}={v}" for d, v in k.defines.items())
        launch = f"{k.grid} x {k.block}" + (f", clusters of {k.cluster}" if k.cluster is not None else "")
        arch = (self.arch or "any") + (f" (built for {self.build_arch})" if self.build_arch else "")
        return {"fact": self.name, "scope": self.scope, "arch": arch, "kernel": f"{k.source} {defines}".strip(),
                "launch": launch, "region": f"{self.region.text(k.defines)} ({self.region.shape.name})",
                "statistic": self.statistic.text(), "divisor": f"{self.per():g}", "unit": self.unit}


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """One measured fact read from a sweep of launches, declared once as a :class:`FactSpec` is: a cache's
    capacity, sector or line, where the value is where a curve steps, not one launch's statistic.

    ``point(x)`` returns the KernelSpec of each point ``x`` of ``xs`` (its region the exact opcode counts
    of a chase of dependent loads, which :func:`timing.build_for_timing` checks); a point's reading is the
    median over launches of a launch's span over ``divisor`` (cycles a hop). ``read(points)`` takes the
    sweep, ``[(x, cycles)]`` in ``xs``' order, and returns the fact's value and what it was read from (a
    dict for the report), raising ValueError where the sweep shows no value. ``x_names`` name a point's
    coordinates in the report's plot points (an ``x`` that is a tuple has one name a coordinate).
    ``shared`` names one sweep several facts are read from (the same ``point`` and ``xs``): it is measured
    once a process, and again whole where any of its facts is confirmed. ``report(gpuprops, build)``, where
    given, says what the GPU holds about the launch (a driver's readback of the function's attributes) for
    the report and a failure's text; it never decides the fact. ``stop(x)``, where given, is point ``x``'s
    stats.StopRule (else the sweep's own). ``reserve(cp)``, where given, is the bytes of one buffer the
    sweep's points share, allocated as the GPU's runner starts (reserved.py; named by ``shared``, else
    ``name``). ``scope``, ``arch``, ``unit`` and ``method`` as a FactSpec's."""

    name: str
    point: Callable[..., KernelSpec]
    xs: tuple
    read: Callable[[list], tuple[float, dict]]
    method: str
    unit: str
    divisor: float
    scope: str = "arch"
    arch: str = "sm_90"
    x_names: tuple[str, ...] = ("x",)
    shared: str | None = None
    report: Callable | None = None
    stop: Callable | None = None
    reserve: Callable | None = None

    def __post_init__(self):
        check_name_and_scope(self.name, self.scope)
        if len(self.xs) < 2:
            raise ValueError(f"fact {self.name}: a sweep of {len(self.xs)} points; expected at least 2")
        if self.divisor <= 0:
            raise ValueError(f"fact {self.name}: divisor {self.divisor}; expected a positive number of steps")

    def compile_arch(self) -> str:
        return self.arch

    def on_each_arch(self) -> list[SweepSpec]:
        return [self]

    def builds(self) -> list[KernelSpec]:
        """The sweep's distinct builds (its points differ by arguments and launch, mostly not by code)."""
        return builds_of(self.point(x) for x in self.xs)

    def build(self) -> KernelSpec:
        """The first point's launch: a build every point of most sweeps shares."""
        return self.point(self.xs[0])

    def plot_point(self, x, cycles: float) -> dict:
        """A point as the report's plot points hold it: its coordinates by name, and its cycles."""
        coords = x if isinstance(x, tuple) else (x,)
        if len(coords) != len(self.x_names):
            raise ValueError(f"fact {self.name}: point {x!r} against coordinates {self.x_names}")
        return {**dict(zip(self.x_names, coords)), "cycles": round(cycles, 2)}

    def row(self) -> dict:
        """The fact as the docs' list shows it."""
        k = self.build()
        defines = " ".join(f"{d}={v}" for d, v in k.defines.items())
        region = ", ".join(f"{n} x {op}" for op, n in (k.region or {}).items())
        return {"fact": self.name, "scope": self.scope, "arch": self.arch, "kernel": f"{k.source} {defines}".strip(),
                "launch": f"{k.grid} x {k.block}", "region": f"{region} (a sweep)",
                "statistic": f"a sweep of {len(self.xs)} points over {', '.join(self.x_names)}, read where it steps",
                "divisor": f"{self.divisor:g}", "unit": self.unit}


def builds_of(specs: Iterable[KernelSpec]) -> list[KernelSpec]:
    """The distinct builds among ``specs`` (one per source, kernel and defines), in order."""
    seen, out = set(), []
    for k in specs:
        key = (k.source, k.kernel, tuple(sorted(k.defines.items())))
        if key not in seen:
            seen.add(key)
            out.append(k)
    return out


def by_name(facts: Iterable[FactSpec | SweepSpec]) -> dict[str, FactSpec | SweepSpec]:
    """The specs by fact name; a name declared twice is refused."""
    out: dict[str, FactSpec] = {}
    for f in facts:
        if f.name in out:
            raise ValueError(f"fact {f.name} is declared twice")
        out[f.name] = f
    return out


def register_scopes(facts: Iterable[FactSpec | SweepSpec]) -> None:
    """Tell the facts layer which facts are the GPU model's (record mode files them under the GPU)."""
    gp_facts.register_gpu_scoped(*(f.name for f in facts if f.scope == "gpu"))


def builds(facts: Iterable[FactSpec | SweepSpec]) -> list[KernelSpec]:
    """The distinct builds of ``facts`` (one per source, kernel and defines), in order: what a session
    compiles for them (every build of a sweep's points)."""
    return builds_of(k for f in facts for k in (f.builds() if isinstance(f, SweepSpec) else [f.build()]))


def markdown(facts: Iterable[FactSpec | SweepSpec]) -> str:
    """The facts as a Markdown table (the docs' fact list)."""
    rows = [f.row() for f in facts]
    cols = ["fact", "scope", "kernel", "launch", "region", "statistic", "divisor", "unit"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(f"`{r[c]}`" if c in ("fact", "kernel") else r[c] for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def request_reservations(specs: Iterable) -> list[str]:
    """The buffers the given fact specs reserve (``SweepSpec.reserve``, ``FactSpec.reserve``), asked of
    reserved.py for this session in place of any earlier session's; returns their names. Anything else in
    ``specs`` (a spec that reserves nothing, a test's other parameters, None) is passed over."""
    reserved.clear()
    for spec in specs:
        if isinstance(spec, SweepSpec) and spec.reserve is not None:
            reserved.request(spec.shared or spec.name, spec.reserve)
        elif isinstance(spec, FactSpec) and spec.reserve is not None:
            reserved.request(*spec.reserve)
    return reserved.requested()
