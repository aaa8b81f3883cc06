"""What a fact's kernel is: the source and defines to compile, the launch shape (grid, block,
cluster, dynamic shared memory), its arguments, the edits beside the timing patch and what its timed
region must hold. Building (timing.py), launching (driver_launch.py, measure.py) and profiling
(nsight.py) all take one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass
class KernelSpec:
    """What to compile and how to launch it.

    ``args(cupy) -> tuple`` builds the arguments after the cycles buffer; ``patch(cubin, kernel) ->
    list[Edit]`` adds edits to the automatic clock-read waits. ``region`` is what the timed region
    must hold (opcode -> count, padding aside) and ``region_other`` how many other, non-memory
    instructions (loop control) may sit beside them: a kernel that does not measure what its name
    says is refused before it runs, on every arch. ``region_check(instructions) -> list[str]``
    checks what counts cannot say (the order, the kinds of glue, a timed last pass: a fact spec's
    region rules, region_rules.RegionRules) on the kernel's compiled instructions and returns the
    problems, none where the region holds; it runs before ``patch``, which is not asked for edits
    to a region that does not hold.
    """

    source: str
    kernel: str
    defines: dict = dataclasses.field(default_factory=dict)
    grid: int = 1
    block: int = 32
    args: Callable | None = None
    patch: Callable | None = None
    region: dict | None = None
    region_other: int = 0
    region_check: Callable | None = None
    #: thread-block cluster size: None launches as usual; k launches clusters of k CTAs along x
    #: (cuLaunchKernelEx with a cluster-dimension attribute; the kernel is compiled with
    #: ``__cluster_dims__()``, so one build serves every size). Above
    #: driver_launch.PORTABLE_CLUSTER_SIZE the function is allowed a non-portable size first.
    cluster: int | None = None
    #: dynamic shared memory per CTA, bytes (0: none). Any launches through cuLaunchKernelEx, which
    #: allows the function that much first; more than half an SM's keeps CTAs on separate SMs.
    shared_mem: int = 0
    #: the function's PREFERRED_SHARED_MEMORY_CARVEOUT, a percent of the largest shared-memory carve-out
    #: (0: the most L1, 100: the most shared memory; a hint the driver may round up to a carve-out it
    #: has, and overrides where the launch needs more shared memory). None leaves the attribute as it
    #: is; any other value launches through cuLaunchKernelEx, which sets it first.
    carveout: int | None = None
    #: whether the measurement also reads the SM clock beside its launches (measure.Runner.clock_beside_mhz,
    #: before the first timed launch and after the last): a latency whose path leaves the SM (an L2 hit, a DRAM
    #: miss) counts cycles of the SM clock for only part of the way, so its cycles follow the clock's state
    #: (unit_compare.PARTLY_CLOCKED_EXPONENT), and a baseline is compared at the clock it was read at
    clock_beside: bool = False
    #: (short, long): the kernel's last argument is how many times its timed chain runs (not in ``args``); each
    #: launch of the measurement is a pair, one at each count, and its value is the difference of the two spans
    #: over (long - short) x the divisor (stats.slope_value): the chain's steady interval, without the fill, drain
    #: and start-skew edges that a single span holds (a wgmma chain of 16384 / N instructions: N / 2 plus an edge
    #: of 60-210 cycles that differed between units and launches, docs/results.md). None: one launch, as is.
    lengths: tuple[int, int] | None = None

    def __post_init__(self):
        if self.carveout is not None and not 0 <= self.carveout <= 100:
            raise ValueError(f"carveout {self.carveout}: expected a percent 0..100 of the largest shared-memory "
                             "carve-out, or None to leave the driver's default")
        if self.lengths is not None and not (len(self.lengths) == 2 and 1 <= self.lengths[0] < self.lengths[1]):
            raise ValueError(f"lengths {self.lengths}: expected (short, long) repeat counts, 1 <= short < long, or "
                             "None for one launch of the kernel as built")

    @property
    def timer(self) -> bool:
        """Whether the kernel also records each warp's %globaltimer (start, stop) after the clock pairs
        (built with TIMER=1: kernels/gpuprops.cuh gp_record_timer): its launches then read four stamps a warp."""
        return bool(self.defines.get("TIMER"))

    def label(self) -> str:
        base = f"{self.kernel} from {self.source} {self.defines} grid={self.grid} block={self.block}"
        if self.cluster is not None:
            base += f" cluster={self.cluster}"
        if self.carveout is not None:
            base += f" carveout={self.carveout}%"
        return base + (f" shared_mem={self.shared_mem}" if self.shared_mem else "")
