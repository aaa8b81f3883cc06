"""The L2's two partitions as one SM's chase sees them: the launches and the pure functions that read them
(hwtests/test_l2_partitions.py runs them; tests/test_l2_partitions_method.py checks every function here
without a GPU).

One warp chases a random cycle of 128-byte lines with ld.global.cg (kernels/l1_capacity_chase.cu CACHE=1,
one 8-byte node a line, the cycle walked once in the kernel before the timed hops), over footprints given
as a share of the GPU's L2 (cudaDeviceProp.l2CacheSize: 50 MiB on the H100, 60 MiB on the H200). The
curve has three levels, not two (H100 GPU-8c0bc4db, 2026-11-27, 2 MiB steps): 287 cycles a hop up to
24 MiB, 524-546 from 30 to 48 MiB, 684-695 from 56 MiB on, with a step between each. Read as the
L2's two partitions (Chips and Cheese's H100 article: the far one "nearly twice" the near one's
latency): up to about half the L2 the chase hits the partition near its SM, which then keeps lines of
either partition; past it the lines no longer fit there and the chase reads the far partition; past
the whole L2 it reads DRAM. Three facts are read from the one sweep (``SWEEP``, measured once a process):

* ``l2_near_hit_reach_pct``: the footprint, in % of l2CacheSize, where the chase steps from the near level
  to the far one (:func:`step_at`: the first footprint plus the area under the share of hops still near,
  up to MID_PCT; on the H100 it read 52.2-52.9, where the half-way crossing between two points read 52.1-53.1);
* ``l2_hit_reach_pct``: the same from the far level to DRAM's, from MID_PCT on: the L2 as one SM fills it;
* ``l2_far_hit_chase_cycles``: the far level, cycles a hop (the median of the points of the plateau
  between the two steps). The per-hop far mode (test_memory_hierarchy.py, l2_hit_latency_far_cycles)
  times single hops of many launches, each on whichever SM it landed: a different statistic.

Where a line lives follows its physical address, so the near step moves with where the buffer lies: its
footprints (NEAR_STEP_PCT) are each read over STEP_PLACEMENTS slices of one buffer, a cycle and a launch each,
and their median taken; and the buffer is the same in every process, reserved as the GPU's runner starts
(``reserve``, pytest_gpuprops/reserved.py), before any test allocates. With fresh buffers a point's, the step
moved by up to 1.75 % of its value with the process's allocation history (a `-k` process against a
whole-suite one on one unit), where processes of one kind repeated within 0.1-0.6 %.

A level is a plateau of specs_caches.plateaus (points within PLATEAU_BAND of one another); DRAM's is the
median of the sweep's last DRAM_POINTS points, which must be one level.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics

import specs_caches as sc
import sweeps

from pytest_gpuprops import reserved
from pytest_gpuprops.factspec import SweepSpec
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.stats import StopRule

LINE = sc.LINE
#: the sweep's footprints, % of l2CacheSize: 2 % steps around the two steps (half and all of the L2), coarser
#: on the levels
SHARES_PCT = (30, 36, 40, 44, 46, 48, 50, 52, 54, 56, 58, 60, 64, 70, 76, 82, 88, 92, 96, 98, 100, 102, 104, 106,
              110, 120, 140)
#: DRAM's level: the median of this many of the largest footprints, within PLATEAU_BAND of one another
DRAM_POINTS = 3
#: the footprint between the two steps, on the far level on both SKUs: the near step is read up to it, the
#: L2's from it
MID_PCT = 76
#: a point this close to a level counts as on it (the far level's points spread +-2 % about their median)
SNAP_BAND = 0.03
SWEEP = "l2_partition_chase"
#: the near step's footprints (% of the L2) are each read over this many placements (slices of one buffer, a
#: launch each) and the median taken: which partition a line lives in follows its physical address, so one
#: placement reads the step where its own lines put it (H100 node GPU-8badd6b4 + GPU-3f9a802b, 2026-11-27:
#: the step read over 6 fresh buffers spread 51.95-53.33 % (sd 0.5), over 8 seeds of one buffer 52.56-53.53
#: (sd 0.3); the same placements read alike on both GPUs, and one process's reading moved 1.33 % on the next)
STEP_PLACEMENTS = 8
NEAR_STEP_PCT = (44, 64)
NEAR_FACT, REACH_FACT, FAR_FACT = "l2_near_hit_reach_pct", "l2_hit_reach_pct", "l2_far_hit_chase_cycles"


def footprint_bytes(l2_bytes: int, pct: int) -> int:
    """``pct`` % of an L2 of ``l2_bytes``, whole 128-byte lines (rounded down), at least two lines."""
    if l2_bytes <= 0 or pct <= 0:
        raise ValueError(f"an L2 of {l2_bytes} bytes, {pct} % of it: expected positive numbers")
    return max(2 * LINE, l2_bytes * pct // 100 // LINE * LINE)


def placements(pct: int) -> int:
    """Placements a point of the sweep is read over: STEP_PLACEMENTS in the near step's window, else one."""
    return STEP_PLACEMENTS if NEAR_STEP_PCT[0] <= pct <= NEAR_STEP_PCT[1] else 1


def l2_bytes(cp) -> int:
    """The launching GPU's cudaDeviceProp.l2CacheSize."""
    return int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"])


def sweep_bytes(l2: int) -> int:
    """The sweep's one buffer on an L2 of ``l2`` bytes: the largest of its points' placements x footprint
    (5.12 x the L2: the near step's 8 slices of 64 %)."""
    return max(placements(pct) * footprint_bytes(l2, pct) for pct in SHARES_PCT)


def reserve_bytes(cp) -> int:
    """:func:`sweep_bytes` of the GPU in use, allocated as its runner starts (pytest_gpuprops/reserved.py)."""
    return sweep_bytes(l2_bytes(cp))


def share_chase(pct: int) -> KernelSpec:
    """The chase over ``pct`` % of the launching GPU's L2 (l2CacheSize read when the arguments are built), over
    :func:`placements` slices of the sweep's reserved buffer (:func:`reserve_bytes`), a launch each in turn."""
    base = sc.capacity_chase(1, 2 * LINE, LINE, placements=placements(pct))

    def args(cp):
        l2 = l2_bytes(cp)
        words = reserved.buffer(cp, SWEEP, sweep_bytes(l2))
        footprint, k = footprint_bytes(l2, pct), placements(pct)
        return sc.capacity_chase(1, footprint, LINE, placements=k, buffer=words).args(cp)

    return dataclasses.replace(base, args=args, clock_beside=True)


def point_stop(pct: int) -> StopRule:
    """A point's launches: sweeps.SWEEP's, or in the near step's window exactly one a placement."""
    k = placements(pct)
    return sweeps.SWEEP if k == 1 else StopRule(noise_target=0.0, min_samples=k, max_samples=k, time_budget_s=0.0)


# ----------------------------------------------------------------------------------------------
# reading the sweep


@dataclasses.dataclass(frozen=True)
class Levels:
    """The sweep's three levels (cycles a hop) and the two steps between them (% of the L2)."""

    near: float
    far: float
    dram: float
    near_reach: float
    reach: float
    far_points: int


def share_at_low(cycles: float, low: float, high: float, snap: float = SNAP_BAND) -> float:
    """The share of a point's hops still at the ``low`` level, read from its cycles: 1 within ``snap`` of
    ``low`` or under it, 0 within ``snap`` of ``high`` or over it, linear between."""
    if cycles <= (1 + snap) * low:
        return 1.0
    if cycles >= (1 - snap) * high:
        return 0.0
    return (high - cycles) / (high - low)


def step_at(points, low: float, high: float, start: int, end: int) -> float:
    """Where the curve steps from ``low`` to ``high`` between footprints ``start`` and ``end``: ``start`` plus
    the area under the share of hops still at ``low`` (:func:`share_at_low`, trapezoids). A sharp step at x
    reads x; a gradual one its middle, every point of it weighing in (no one point decides). Refused: a
    curve not at ``low`` at ``start`` or not at ``high`` at ``end`` (the step lies outside the window)."""
    window = [(x, share_at_low(c, low, high)) for x, c in points if start <= x <= end]
    if len(window) < 2 or window[0][0] != start or window[-1][0] != end:
        raise sc.SweepError(f"the sweep has no points at {start} % and {end} %: {sc.table(points, unit='%')}")
    if window[0][1] < 0.5 or window[-1][1] > 0.5:
        raise sc.SweepError(f"from {start} % to {end} % the chase does not go from {low:.1f} to {high:.1f} cycles a hop "
                            f"(it reads {points_at(points, start):.1f} and {points_at(points, end):.1f}): the step lies "
                            f"outside; {sc.table(points, unit='%')}")
    return start + sum((x1 - x0) * (f0 + f1) / 2 for (x0, f0), (x1, f1) in zip(window, window[1:]))


def points_at(points, x: int) -> float:
    return next(c for xx, c in points if xx == x)


def levels(points) -> Levels:
    """The near, far and DRAM levels of a sweep ``[(pct, cycles)]`` and the two steps between them (:func:`step_at`).
    Refused: the smallest footprints not on one level, the largest not on one, no plateau between them
    at least STEP_RISE from each, or a step that is not one step."""
    pts = sc.check_sweep(points)
    ps = sc.plateaus(pts)
    if not ps or ps[0].first != pts[0][0]:
        raise sc.SweepError(f"the smallest footprints are not one level: {sc.table(pts, unit='%')}")
    tail = [c for _, c in pts[-DRAM_POINTS:]]
    if len(pts) < DRAM_POINTS + 2 or max(tail) > (1 + sc.PLATEAU_BAND) * min(tail):
        raise sc.SweepError(f"the {DRAM_POINTS} largest footprints are not one level ({', '.join(f'{c:.1f}' for c in tail)}): "
                            f"extend the sweep past the L2; {sc.table(pts, unit='%')}")
    near, dram = ps[0].level, statistics.median(tail)
    between = [p for p in ps[1:] if p.last < pts[-DRAM_POINTS][0]
               and p.level > (1 + sc.STEP_RISE) * near and p.level < dram / (1 + sc.STEP_RISE)]
    if not between:
        raise sc.SweepError(f"no level between the near one ({near:.1f}) and DRAM's ({dram:.1f}): one step, not two; "
                            f"{sc.table(pts, unit='%')}")
    far = max(between, key=lambda p: p.points)
    return Levels(near, far.level, dram, step_at(pts, near, far.level, pts[0][0], MID_PCT),
                  step_at(pts, far.level, dram, MID_PCT, pts[-1][0]), far.points)


def read_level(field: str, points) -> tuple[float, dict]:
    """One of :func:`levels`' readings (``field`` of :class:`Levels`), to 0.01, with all of them beside it."""
    lv = levels(points)
    return round(getattr(lv, field), 2), dict(
        near_cycles=round(lv.near, 2), far_cycles=round(lv.far, 2), dram_cycles=round(lv.dram, 2),
        near_hit_reach_pct=round(lv.near_reach, 2), hit_reach_pct=round(lv.reach, 2), far_points=lv.far_points)


# ----------------------------------------------------------------------------------------------
# the facts

_SWEEP_TEXT = (f"ld.global.cg pointer chase (l1_capacity_chase.cu CACHE=1), one 8-byte node a 128-byte line, one random "
               f"cycle, one warp, {sc.CAP_UNROLL} timed hops after one untimed walk; footprints "
               f"{', '.join(map(str, SHARES_PCT))} % of cudaDeviceProp.l2CacheSize, those from {NEAR_STEP_PCT[0]} to "
               f"{NEAR_STEP_PCT[1]} % each over {STEP_PLACEMENTS} placements (slices of one buffer, a cycle and a launch "
               f"each, PLACEMENTS={STEP_PLACEMENTS}; the point the median of the {STEP_PLACEMENTS} launches); every point in "
               f"one buffer reserved as the GPU's runner starts, before any test allocates; levels: plateaus within "
               f"{sc.PLATEAU_BAND:.0%}, the near level the smallest footprints', DRAM's the median of the {DRAM_POINTS} "
               f"largest, the far level the longest plateau between them (at least {sc.STEP_RISE:.0%} from each)")
_STEP = (f"the first footprint plus the area (trapezoids) under the share of hops still at the lower level, 1 within "
         f"{SNAP_BAND:.0%} of it, 0 within {SNAP_BAND:.0%} of the higher one, linear between")
_READ = {NEAR_FACT: ("near_reach", "%", f"the near step, {_STEP}, from the smallest footprint to {MID_PCT} %"),
         REACH_FACT: ("reach", "%", f"the L2's step, {_STEP}, from {MID_PCT} % to the largest footprint"),
         FAR_FACT: ("far", "cycles", "the far level, cycles a hop")}

#: the facts read from the one sweep: the L2's size and partitions are the GPU model's memory system's
FACTS: list[SweepSpec] = [
    SweepSpec(name, share_chase, SHARES_PCT, functools.partial(read_level, field), unit=unit,
              method=f"{_SWEEP_TEXT}; the value: {what}", divisor=sc.CAP_UNROLL, scope="gpu", x_names=("l2_pct",),
              shared=SWEEP, stop=point_stop, reserve=reserve_bytes)
    for name, (field, unit, what) in _READ.items()
]
