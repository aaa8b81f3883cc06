"""The L2's two partitions as one SM's chase sees them: the launches and the pure functions that read them
(hwtests/test_l2_partitions.py runs them; tests/test_l2_partitions_method.py checks every function here
without a GPU).

One warp chases a random cycle of 128-byte lines with ld.global.cg (kernels/l1_capacity_chase.cu CACHE=1,
one 8-byte node a line, the cycle walked once in the kernel before the timed hops), over footprints given
as a share of the GPU's L2 (cudaDeviceProp.l2CacheSize: 50 MiB on the H100, 60 MiB on the H200). The
curve has three levels, not two (H100 GPU-8c0bc4db, 2026-11-27, 2 MiB steps): 287 cycles a hop up to
24 MiB, 524-546 from 30 to 48 MiB, 684-695 from 56 MiB on, with a step between each. The first is the
L2 partition near the SM (which holds the SM's lines whichever partition they belong to); past about
half the L2 the lines no longer fit it and the chase reads the far partition; past the whole L2 it
reads DRAM. Three facts are read from the one sweep (``SWEEP``, measured once a process):

* ``l2_near_hit_reach_pct``: the footprint, in % of l2CacheSize, where the chase is half-way from the
  near level to the far one (linear between the two points around it);
* ``l2_hit_reach_pct``: the same half-way point from the far level to DRAM's: the L2 as one SM fills it;
* ``l2_far_hit_chase_cycles``: the far level, cycles a hop (the median of the points of the plateau
  between the two steps). The per-hop far mode (test_memory_hierarchy.py, l2_hit_latency_far_cycles)
  times single hops of many launches, each on whichever SM it landed: a different statistic.

A level is a plateau of specs_caches.plateaus (points within PLATEAU_BAND of one another); DRAM's is the
median of the sweep's last DRAM_POINTS points, which must be one level.
"""

from __future__ import annotations

import dataclasses
import statistics

import specs_caches as sc

from pytest_gpuprops.factspec import SweepSpec
from pytest_gpuprops.kernel_spec import KernelSpec

LINE = sc.LINE
#: the sweep's footprints, % of l2CacheSize: 2 % steps around the two steps (half and all of the L2), coarser
#: on the levels
SHARES_PCT = (30, 36, 40, 44, 46, 48, 50, 52, 54, 56, 58, 60, 64, 70, 76, 82, 88, 92, 96, 98, 100, 102, 104, 106,
              110, 120, 140)
#: DRAM's level: the median of this many of the largest footprints, within PLATEAU_BAND of one another
DRAM_POINTS = 3
SWEEP = "l2_partition_chase"
NEAR_FACT, REACH_FACT, FAR_FACT = "l2_near_hit_reach_pct", "l2_hit_reach_pct", "l2_far_hit_chase_cycles"


def footprint_bytes(l2_bytes: int, pct: int) -> int:
    """``pct`` % of an L2 of ``l2_bytes``, whole 128-byte lines (rounded down), at least two lines."""
    if l2_bytes <= 0 or pct <= 0:
        raise ValueError(f"an L2 of {l2_bytes} bytes, {pct} % of it: expected positive numbers")
    return max(2 * LINE, l2_bytes * pct // 100 // LINE * LINE)


def share_chase(pct: int) -> KernelSpec:
    """The chase over ``pct`` % of the launching GPU's L2 (l2CacheSize read when the arguments are built)."""
    base = sc.capacity_chase(1, 2 * LINE, LINE)

    def args(cp):  # pragma: no cover  (GPU only)
        l2 = int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"])
        return sc.capacity_chase(1, footprint_bytes(l2, pct), LINE).args(cp)

    return dataclasses.replace(base, args=args)


# ----------------------------------------------------------------------------------------------
# reading the sweep


@dataclasses.dataclass(frozen=True)
class Levels:
    """The sweep's three levels (cycles a hop) and the two half-way points (% of the L2)."""

    near: float
    far: float
    dram: float
    near_reach: float
    reach: float
    far_points: int


def half_way(points, low: float, high: float, after: int) -> float:
    """The footprint (interpolated linearly between the two points around it) where the curve, past
    footprint ``after``, first reads over the midpoint of ``low`` and ``high``. Refused: a curve that never
    gets there, or reads under the midpoint again after it (not one step)."""
    mid = (low + high) / 2
    rest = [(x, c) for x, c in points if x >= after]
    for i, (x, c) in enumerate(rest[1:], start=1):
        if c > mid:
            x0, c0 = rest[i - 1]
            back = [xx for xx, cc in rest[i + 1:] if cc <= mid]
            if back:
                raise sc.SweepError(f"past {x} % the chase reads under the midpoint {mid:.1f} again (at {back[0]} %): "
                                    f"not one step from {low:.1f} to {high:.1f}; {sc.table(points, unit='%')}")
            return x0 + (mid - c0) / (c - c0) * (x - x0)
    raise sc.SweepError(f"past {after} % the chase never reads over {mid:.1f}, half-way from {low:.1f} to {high:.1f}; "
                        f"{sc.table(points, unit='%')}")


def levels(points) -> Levels:
    """The near, far and DRAM levels of a sweep ``[(pct, cycles)]`` and the half-way points between them.
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
    return Levels(near, far.level, dram, half_way(pts, near, far.level, ps[0].last),
                  half_way(pts, far.level, dram, far.last), far.points)


def _info(lv: Levels, points) -> dict:
    return dict(near_cycles=round(lv.near, 2), far_cycles=round(lv.far, 2), dram_cycles=round(lv.dram, 2),
                near_hit_reach_pct=round(lv.near_reach, 2), hit_reach_pct=round(lv.reach, 2),
                far_points=lv.far_points)


def read_near_reach(points) -> tuple[float, dict]:
    lv = levels(points)
    return round(lv.near_reach, 2), _info(lv, points)


def read_reach(points) -> tuple[float, dict]:
    lv = levels(points)
    return round(lv.reach, 2), _info(lv, points)


def read_far(points) -> tuple[float, dict]:
    lv = levels(points)
    return round(lv.far, 2), _info(lv, points)


# ----------------------------------------------------------------------------------------------
# the facts

_SWEEP_TEXT = (f"ld.global.cg pointer chase (l1_capacity_chase.cu CACHE=1), one 8-byte node a 128-byte line, one random "
               f"cycle, one warp, {sc.CAP_UNROLL} timed hops after one untimed walk; footprints "
               f"{', '.join(map(str, SHARES_PCT))} % of cudaDeviceProp.l2CacheSize; levels: plateaus within "
               f"{sc.PLATEAU_BAND:.0%}, the near level the smallest footprints', DRAM's the median of the {DRAM_POINTS} "
               f"largest, the far level the longest plateau between them (at least {sc.STEP_RISE:.0%} from each)")
_READ = {NEAR_FACT: (read_near_reach, "%", "the footprint half-way from the near level to the far one "
                                                          "(linear between the points around it)"),
         REACH_FACT: (read_reach, "%", "the footprint half-way from the far level to DRAM's (linear "
                                                      "between the points around it)"),
         FAR_FACT: (read_far, "cycles", "the far level, cycles a hop")}

#: the facts read from the one sweep: the L2's size and partitions are the GPU model's memory system's
FACTS: list[SweepSpec] = [
    SweepSpec(name, share_chase, SHARES_PCT, read, method=f"{_SWEEP_TEXT}; the value: {what}", unit=unit,
              divisor=sc.CAP_UNROLL, scope="gpu", x_names=("l2_pct",), shared=SWEEP)
    for name, (read, unit, what) in _READ.items()
]
