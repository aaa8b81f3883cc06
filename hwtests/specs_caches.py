"""Capacity sweeps of sm_90's caches: the launches and the pure functions that read them
(hwtests/test_cache_capacity.py runs them; tests/test_cache_capacity_method.py checks every function
here without a GPU).

A sweep is a latency-vs-footprint curve of one dependent chase; the facts are where it steps up.

* L1 data cache per shared-memory carve-out (kernels/l1_capacity_chase.cu CACHE=0, ld.global.ca, one
  node per 128-byte line, a random cycle, warmed by one walk over it in the kernel). L1 and shared
  memory share 256 KiB per SM on sm_90, shared memory taking 0, 8, 16, 32, 64, 100, 132, 164, 196 or
  228 KiB of it (CUDA C++ Programming Guide, compute capability 9.0). A launch's dynamic shared memory
  plus the reserved 1 KiB per block sets the smallest carve-out it can run with; the function's
  PREFERRED_SHARED_MEMORY_CARVEOUT hint (KernelSpec.carveout) says which way the driver rounds.
* The constant cache's levels (kernels/const_chase.cu): the __constant__ table swept from 256 B to the
  whole 64 KiB bank, walked once before the timed passes (WARM_HOPS = NODES).
* The TLBs' reach (l1_capacity_chase.cu CACHE=1, ld.global.cg): one node per page-sized stride, so
  each hop is a new page (2 MiB: the page cudaMalloc maps large buffers with) or a new 32 MiB region;
  the nodes' lines fit L2 many times over, so past the warm walk only address translation changes.

Reading a sweep (:func:`plateaus`, :func:`steps`): the curve is cut into plateaus, runs of at least
MIN_RUN consecutive points within PLATEAU_BAND of one another (points between plateaus are a gradual
transition, as a cache that does not replace strictly LRU gives); neighbouring plateaus less than
STEP_RISE apart are one level. A step's reach is the last footprint of the lower plateau: the
capacity, quantised to the sweep's grid (the true one lies below the step's next footprint).
"""

from __future__ import annotations

import dataclasses
import statistics

from memory_levels import log_grid  # the chase sweep's grid, shared
from specs_sync_units import const_chase_args

from pytest_gpuprops.factspec import SweepSpec
from pytest_gpuprops.kernel_spec import KernelSpec

KIB, MIB = 1024, 1024 * 1024

#: timed hops per launch, every chase here
CAP_UNROLL = 256
#: bytes between the L1 chase's nodes: one node per 128-byte line
LINE = 128
#: sm_90: L1 + shared memory per SM, the carve-outs shared memory may take, the shared memory each
#: block reserves for the system (CUDA C++ Programming Guide, compute capability 9.0; the reserved KiB
#: is also cudaDevAttrReservedSharedMemoryPerBlock, read back on the GPU)
L1_SMEM_KIB = 256
CARVEOUTS_KIB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
RESERVED_SMEM_PER_BLOCK = 1 * KIB

#: the plateau rules (see the module's docstring)
PLATEAU_BAND = 0.05
STEP_RISE = 0.10
MIN_RUN = 2
#: an L1 miss is an L2 hit: several times an L1 hit; a sweep whose top is not this far above its start
#: never left L1
L1_MISS_RISE = 1.5


class SweepError(ValueError):
    """A sweep that does not show what its fact needs (no step, a fall, too few points)."""


class NoSuchLevel(SweepError):
    """A sweep read as it should, showing that its fact's level lies past what the sweep can reach on this
    GPU (the constant bank inside the level behind the first): no value to record here, and a failure only
    where the GPU's facts hold one."""


# ----------------------------------------------------------------------------------------------
# footprint grids


def linear_grid(lo: int, hi: int, step: int) -> list[int]:
    """lo, lo + step, ..., hi (inclusive); lo and hi multiples of step."""
    if step <= 0 or lo <= 0 or hi < lo or lo % step or hi % step:
        raise ValueError(f"grid {lo}..{hi} step {step}: expected 0 < lo <= hi, both multiples of a positive step")
    return list(range(lo, hi + 1, step))


@dataclasses.dataclass(frozen=True)
class Carveout:
    """One L1 sweep's launch: ``shared_mem`` bytes of dynamic shared memory per block (with the
    reserved KiB, the least shared memory the SM must give the block), the carve-out hint, and the
    footprints: a few small ones (L1 hits whatever the carve-out) then a fine window round the
    expected capacity."""

    name: str
    shared_mem: int
    hint: int
    window_kib: tuple[int, int, int]  # lo, hi, step

    @property
    def expected_smem_kib(self) -> int:
        return smallest_carveout_kib(self.shared_mem)

    @property
    def expected_l1_kib(self) -> int:
        return L1_SMEM_KIB - self.expected_smem_kib

    def footprints(self) -> list[int]:
        lo, hi, step = self.window_kib
        small = [f for f in (4 * KIB, 8 * KIB, 12 * KIB) if f < lo * KIB]
        return small + [k * KIB for k in linear_grid(lo, hi, step)]


def smallest_carveout_kib(shared_mem: int, reserved: int = RESERVED_SMEM_PER_BLOCK) -> int:
    """The smallest sm_90 carve-out a block with ``shared_mem`` bytes of dynamic shared memory (and
    ``reserved`` for the system) fits in; refused beyond the largest."""
    need = shared_mem + reserved
    for c in CARVEOUTS_KIB:
        if c * KIB >= need:
            return c
    raise ValueError(f"{shared_mem} + {reserved} reserved bytes of shared memory exceed sm_90's largest "
                     f"carve-out, {CARVEOUTS_KIB[-1]} KiB")


#: carve-out 0 (the most L1: no dynamic shared memory, hint 0 %), 100 KiB (99 KiB dynamic + 1 reserved:
#: no smaller carve-out fits it, hint 0 % keeps the driver from taking more) and 228 KiB (227 KiB, the
#: largest a block may opt in to, hint 100 %)
CARVEOUTS = {c.name: c for c in (
    Carveout("smem0", 0, 0, (128, 288, 4)),
    Carveout("smem100", 99 * KIB, 0, (96, 208, 4)),
    Carveout("smem228", 227 * KIB, 100, (14, 64, 2)),
)}


def l1_fact(carveout: str) -> str:
    return f"l1_capacity_kib_{carveout}"


# ----------------------------------------------------------------------------------------------
# the launches


def node_offsets(n_blocks: int, stride: int, skew: int = 0, per_block: int = 1, within: int | None = None):
    """Byte offsets of the chase's nodes (numpy int64, block-major): ``per_block`` nodes in each of
    ``n_blocks`` blocks of ``stride`` bytes, all in the block's first ``within`` bytes (default: the
    whole block; a TLB sweep at a 32 MiB stride keeps a block's nodes in one 2 MiB page): block b's
    first node ``(b * skew) % within`` bytes in, the others spread evenly after it (wrapping), each on
    its own 128-byte line. A skew keeps nodes a page apart off one L2 set (every node at a page's start
    would be); several nodes a block spread the hops of a few-page chase over many L2 lines (an L2
    hit's latency differs by the line's partition, so a chase over two lines reads whichever they are
    in)."""
    import numpy as np
    within = stride if within is None else within
    if stride <= 0 or stride % 8 or skew % 8 or skew < 0 or not 8 <= within <= stride or within % 8:
        raise ValueError(f"stride {stride}, skew {skew}, within {within}: expected multiples of 8 bytes, "
                         "0 < within <= stride, skew >= 0")
    if per_block < 1 or per_block > 1 and (within % LINE or per_block * LINE > within):
        raise ValueError(f"{per_block} nodes a block within {within} B: expected 1, or up to within / {LINE} "
                         f"with within a multiple of {LINE}")
    gap = within // per_block // LINE * LINE
    b = np.repeat(np.arange(n_blocks, dtype=np.int64), per_block)
    slot = np.tile(np.arange(per_block, dtype=np.int64), n_blocks)
    return b * stride + (b * skew + slot * gap) % within


def fill_cycle(xp, words, base_address: int, n_blocks: int, stride: int, seed: int = 0, skew: int = 0,
               per_block: int = 1, within: int | None = None) -> int:
    """Lay one random cycle over the nodes of :func:`node_offsets` at the start of ``words`` (64-bit
    words of array module ``xp`` at device address ``base_address``): each node holds the address of
    the node after it. Only the nodes' words are written (a TLB sweep's buffer is tens of GiB).
    Returns the address of the cycle's first node."""
    import numpy as np
    offset = node_offsets(n_blocks, stride, skew, per_block, within)
    if offset.size < 2:
        raise ValueError(f"a chase needs at least 2 nodes, not {offset.size}")
    if n_blocks * stride > words.size * 8:
        raise ValueError(f"{n_blocks} blocks of {stride} B need {n_blocks * stride} bytes; the buffer has "
                         f"{words.size * 8}")
    order = np.random.default_rng(seed).permutation(offset.size)
    nxt = offset[np.roll(order, -1)].astype(np.uint64)
    words[xp.asarray(offset[order] // 8)] = xp.asarray(np.uint64(base_address) + nxt)
    return int(base_address + int(offset[order[0]]))


#: a TLB sweep's block i has its first node (i x this) mod the stride into it: a new 4 KiB block and
#: line each; and at least this many nodes in all (several a page where the pages are few)
TLB_SKEW = 4 * KIB + LINE
TLB_MIN_NODES = 256
#: the page every TLB node of a block lies in: cudaMalloc maps large buffers with 2 MiB pages
TLB_PAGE = 2 * MIB


def tlb_nodes_per_page(pages: int) -> int:
    """Nodes a page, so that a chase over ``pages`` pages has at least TLB_MIN_NODES nodes."""
    return max(1, -(-TLB_MIN_NODES // pages))


def capacity_chase(cache: int, footprint: int, stride: int, *, shared_mem: int = 0, carveout: int | None = None,
                   buffer=None, skew: int = 0, per_block: int = 1, within: int | None = None,
                   placements: int = 1) -> KernelSpec:
    """l1_capacity_chase.cu over ``footprint`` bytes in blocks of ``stride`` bytes (``skew``,
    ``per_block``, ``within``: see node_offsets), walked once in the kernel before the timed hops; ``buffer`` (a
    TLB sweep's, allocated once; a sweep's reserved one) or a fresh one. ``placements`` K > 1: K cycles over the
    buffer's first K slices of ``footprint`` (seeds 0..K-1), launch n walking cycle n mod K (the kernel's
    PLACEMENTS)."""
    if footprint % stride:
        raise ValueError(f"footprint {footprint} is not a multiple of the stride {stride}")
    if placements < 1:
        raise ValueError(f"{placements} placements: expected 1 or more (each its own slice of the buffer)")
    blocks = footprint // stride

    def args(cp):
        words = buffer if buffer is not None else cp.empty(placements * footprint // 8, dtype=cp.uint64)
        if words.size * 8 < placements * footprint:
            raise ValueError(f"{placements} placements of {footprint} bytes need {placements * footprint} bytes; the "
                             f"buffer has {words.size * 8}")
        n = footprint // 8
        starts = [fill_cycle(cp, words[k * n:(k + 1) * n], words.data.ptr + k * footprint, blocks, stride, seed=k,
                             skew=skew, per_block=per_block, within=within) for k in range(placements)]
        cp.cuda.runtime.deviceSynchronize()
        return (words, cp.asarray(starts, dtype=cp.uint64), cp.zeros(1 if placements == 1 else 2, dtype=cp.uint64),
                cp.int32(blocks * per_block))

    opcode = {0: "LDG.E.64.STRONG.SM", 1: "LDG.E.64.STRONG.GPU"}[cache]
    defines = {"CACHE": cache, "UNROLL": CAP_UNROLL, **({"PLACEMENTS": placements} if placements > 1 else {})}
    return KernelSpec("l1_capacity_chase.cu", "capacity_chase", defines, grid=1,
                      block=32, args=args, region={opcode: CAP_UNROLL}, shared_mem=shared_mem, carveout=carveout)


def tlb_chase(footprint: int, stride: int, buffer=None) -> KernelSpec:
    """The TLB sweep's point: ld.global.cg over ``footprint`` bytes, pages ``stride`` apart."""
    return capacity_chase(1, footprint, stride, buffer=buffer, skew=TLB_SKEW, within=min(stride, TLB_PAGE),
                          per_block=tlb_nodes_per_page(footprint // stride))


def l1_chase(carveout: Carveout, footprint: int) -> KernelSpec:
    return capacity_chase(0, footprint, LINE, shared_mem=carveout.shared_mem, carveout=carveout.hint)


# the constant table: 256 B .. 4 KiB in 256 B steps, .. 8 KiB in 512 B steps, .. 64 KiB in 4 KiB steps
CONST_FOOTPRINTS = (linear_grid(256, 4 * KIB, 256) + linear_grid(4608, 8 * KIB, 512)
                    + linear_grid(12 * KIB, 64 * KIB, 4 * KIB))
CONST_PASSES = 2


def const_stride(nodes: int, start: int = 17) -> int:
    """The word stride of a constant table of ``nodes`` words: the first odd number from ``start`` that
    shares no factor with it, so that the chase is one cycle through every word."""
    import math
    s = start | 1
    while math.gcd(s, nodes) != 1:
        s += 2
    return s


def const_sweep_point(footprint: int) -> KernelSpec:
    """const_chase.cu over a ``footprint``-byte table, walked once before its passes."""
    if footprint % 4 or not 8 <= footprint <= 64 * KIB:
        raise ValueError(f"constant table of {footprint} bytes: expected whole words, 8 B .. 64 KiB (the bank)")
    nodes = footprint // 4

    return KernelSpec("const_chase.cu", "const_chase",
                      {"NODES": nodes, "STRIDE": const_stride(nodes), "UNROLL": CAP_UNROLL, "PASSES": CONST_PASSES,
                       "WARM_HOPS": nodes}, grid=1, block=32, args=const_chase_args, region={"LDC": CAP_UNROLL})


#: TLB sweeps: stride -> the footprints' lowest point and points per octave (up to what free memory allows)
TLB_STRIDES = {2 * MIB: (4 * MIB, 4), 32 * MIB: (64 * MIB, 4)}
#: at most this much of the free memory goes to the TLB buffer (the brief: half)
TLB_FREE_FRACTION = 0.5
#: the buffer's cap: far past any TLB's reach the sweep only costs time
TLB_MAX_BYTES = 64 * 1024 * MIB


def tlb_buffer_bytes(free_bytes: int) -> int:
    """The TLB buffer: at most TLB_FREE_FRACTION of the free memory and TLB_MAX_BYTES, a multiple of the
    coarsest stride."""
    quantum = max(TLB_STRIDES)
    n = min(int(free_bytes * TLB_FREE_FRACTION), TLB_MAX_BYTES) // quantum * quantum
    if n < 2 * quantum:
        raise ValueError(f"{free_bytes} bytes free: half of it holds fewer than two {quantum >> 20} MiB strides")
    return n


def tlb_footprints(stride: int, buffer_bytes: int) -> list[int]:
    lo, per_octave = TLB_STRIDES[stride]
    return log_grid(lo, buffer_bytes // stride * stride, per_octave, stride)


def tlb_fact(stride: int) -> str:
    return f"tlb_no_step_to_half_memory_stride{stride >> 20}m"


#: the TLB conditions: stride. No step is the fact: on the H100 (GPU-2bbcd972, 2026-11-26) the chase read
#: 276-279 cycles a hop (L2 hits) from 4 MiB to 40256 MiB at 2 MiB and from 64 MiB to 40256 MiB at 32 MiB,
#: so every TLB level's reach is past half the memory; a TLB that misses within it is a change
TLB_FACTS = {tlb_fact(s): s for s in (2 * MIB, 32 * MIB)}
#: the same condition over pages mapped out of physical order (pytest_gpuprops/vmm.py: each 2 MiB page a
#: translation of its own), up to this much or half the free memory: the reach of 2 MiB translations. On the
#: H100 (GPU-6e1f9a28, 2026-11-27) it read 284-298 cycles a hop from 4 MiB to 16 GiB, as cudaMalloc's buffer and
#: the pages mapped in order did
TLB_OUT_OF_ORDER_FACT = "tlb_no_step_to_16g_2m_pages_out_of_order"
TLB_OUT_OF_ORDER_BYTES = 16 * 1024 * MIB


# ----------------------------------------------------------------------------------------------
# reading a sweep


@dataclasses.dataclass(frozen=True)
class Plateau:
    first: int  # footprint of its first point
    last: int  # footprint of its last point
    level: float  # its points' median latency
    points: int


@dataclasses.dataclass(frozen=True)
class Step:
    reach: int  # the last footprint at the lower level: the capacity, to the grid's step
    above: int  # the first footprint of the higher plateau
    below_level: float
    above_level: float


def check_sweep(points) -> list[tuple[int, float]]:
    """The sweep sorted by footprint; refused: fewer than MIN_RUN points, a footprint twice, a latency
    that is not a positive number."""
    pts = sorted((int(f), float(c)) for f, c in points)
    if len(pts) < MIN_RUN:
        raise SweepError(f"a sweep of {len(pts)} points: at least {MIN_RUN} needed")
    fs = [f for f, _ in pts]
    if len(set(fs)) != len(fs):
        raise SweepError(f"a footprint measured twice in {fs}")
    bad = [(f, c) for f, c in pts if not c > 0]
    if bad:
        raise SweepError(f"latencies that are not positive numbers: {bad}")
    return pts


def plateaus(points, *, band: float = PLATEAU_BAND, rise: float = STEP_RISE, min_run: int = MIN_RUN) -> list[Plateau]:
    """The sweep's plateaus (the module's docstring): greedy runs of at least ``min_run`` consecutive
    points whose highest is within ``band`` of their lowest; then neighbours less than ``rise`` apart
    merged. A plateau lower than the one before it by more than ``rise`` is refused: a capacity sweep
    only climbs, and a fall is noise or a chase that is not what it says."""
    pts = check_sweep(points)
    runs, i = [], 0
    while i < len(pts):
        j = i
        while j + 1 < len(pts):
            lats = [c for _, c in pts[i:j + 2]]
            if max(lats) > (1 + band) * min(lats):
                break
            j += 1
        if j - i + 1 >= min_run:
            runs.append(pts[i:j + 1])
            i = j + 1
        else:
            i += 1
    merged: list[list] = []
    for run in runs:
        if merged:
            prev = statistics.median(c for _, c in merged[-1])
            cur = statistics.median(c for _, c in run)
            if abs(cur - prev) <= rise * prev:
                merged[-1] = merged[-1] + run
                continue
            if cur < prev:
                raise SweepError(f"latency falls from {prev:.1f} (up to {merged[-1][-1][0]} B) to {cur:.1f} "
                                 f"(from {run[0][0]} B): a capacity sweep only climbs; {table(pts)}")
        merged.append(run)
    return [Plateau(r[0][0], r[-1][0], statistics.median(c for _, c in r), len(r)) for r in merged]


def steps(points, **rules) -> list[Step]:
    """Where the sweep climbs from one plateau to the next: each step's reach (the lower plateau's last
    footprint) and the two levels."""
    ps = plateaus(points, **rules)
    return [Step(a.last, b.first, a.level, b.level) for a, b in zip(ps, ps[1:])]


def table(points, scale: int = 1, unit: str = "B") -> str:
    """The sweep as text: 'footprint: cycles, ...'."""
    return ", ".join(f"{f / scale:g} {unit}: {c:.1f}" for f, c in sorted(points))


def l1_capacity(points) -> Step:
    """The L1 capacity of an ld.global.ca sweep: the reach of its first step. Refused: a sweep whose
    smallest footprints are no plateau (no L1-hit level to leave), that never steps, or whose top is
    less than L1_MISS_RISE x its start (it never left L1)."""
    pts = check_sweep(points)
    ps = plateaus(pts)
    if not ps or ps[0].first != pts[0][0]:
        raise SweepError(f"the smallest footprints are not one L1-hit level: {table(pts, KIB, 'KiB')}")
    top = pts[-1][1]
    if len(ps) < 2 or top < L1_MISS_RISE * ps[0].level:
        raise SweepError(f"the sweep never leaves the L1-hit level ({ps[0].level:.1f} cycles; the largest footprint "
                         f"reads {top:.1f}, an L2 hit is more than {L1_MISS_RISE} x): "
                         f"widen the sweep; {table(pts, KIB, 'KiB')}")
    a, b = ps[0], ps[1]
    return Step(a.last, next(f for f, _ in pts if f > a.last), a.level, b.level)


def const_levels(points) -> list[Step]:
    """The constant sweep's steps: the first is the constant L1's capacity, its upper level the next
    level's hit latency; a second (the bank may not reach it) that level's capacity. Refused: the
    smallest tables are no plateau, or no step."""
    pts = check_sweep(points)
    ps = plateaus(pts)
    if not ps or ps[0].first != pts[0][0]:
        raise SweepError(f"the smallest constant tables are not one hit level: {table(pts)}")
    if len(ps) < 2:
        raise SweepError(f"no step in the constant sweep up to {pts[-1][0]} B: {table(pts)}")
    return [Step(a.last, b.first, a.level, b.level) for a, b in zip(ps, ps[1:])]


def plateau_dicts(points) -> list[dict]:
    """The sweep's plateaus as the report keeps them; a sweep that cannot be cut into plateaus, its error."""
    try:
        return [dict(first=p.first, last=p.last, cycles=round(p.level, 2), points=p.points) for p in plateaus(points)]
    except SweepError as exc:
        return [{"error": str(exc)}]


def tlb_steps(points) -> list[Step]:
    """The TLB sweep's steps (footprints in bytes), the smallest footprints a plateau."""
    pts = check_sweep(points)
    ps = plateaus(pts)
    if not ps or ps[0].first != pts[0][0]:
        raise SweepError(f"the smallest footprints are not one level: {table(pts, MIB, 'MiB')}")
    return [Step(a.last, b.first, a.level, b.level) for a, b in zip(ps, ps[1:])]


def tlb_flat(points) -> tuple[bool, str]:
    """The TLB condition's judgement of one sweep: (no step, what it read). A sweep that cannot be read
    (its smallest footprints not one level) does not hold."""
    try:
        found = tlb_steps(points)
    except SweepError as exc:
        return False, f"the sweep cannot be read: {exc}"
    pts = sorted(points)
    lat = [c for _f, c in pts]
    where = f"{pts[0][0] >> 20} MiB .. {pts[-1][0] >> 20} MiB"
    if not found:
        return True, f"no step: {min(lat):.1f} .. {max(lat):.1f} cycles a hop over {where}"
    steps = ", ".join(f"{x.reach >> 20} MiB ({x.below_level:.0f} -> {x.above_level:.0f} cycles)" for x in found)
    return False, f"{len(found)} step(s) over {where}, after {steps}: {table(pts, MIB, 'MiB')}"


# ----------------------------------------------------------------------------------------------
# the L1 capacity facts


def carveout_readback(gpuprops, spec: KernelSpec) -> dict:  # pragma: no cover  (GPU only)
    """What the driver holds for ``spec``'s function after its launches: the carve-out hint, the dynamic
    shared memory allowed, the blocks per SM the launch's shared memory allows (one block of 227 KiB
    needs the 228 KiB carve-out), and the device's reserved and per-SM shared memory."""
    from pytest_gpuprops import driver_launch as dl
    try:
        d = dl.cuda_driver()
        runner = gpuprops.runner
        cubin, _ = runner.build(spec)
        f = d.CUfunction(dl.function_handle(runner.load(cubin, spec.kernel)))
        out = {}
        for attr in ("PREFERRED_SHARED_MEMORY_CARVEOUT", "MAX_DYNAMIC_SHARED_SIZE_BYTES", "SHARED_SIZE_BYTES"):
            err, v = d.cuFuncGetAttribute(getattr(d.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attr}"), f)
            out[attr.lower()] = int(v) if int(err) == 0 else dl.driver_error(d, err)
        err, n = d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, spec.block, spec.shared_mem)
        out["blocks_per_sm"] = int(n) if int(err) == 0 else dl.driver_error(d, err)
        dev = d.CUdevice(gpuprops.gpu.index)
        for attr in ("RESERVED_SHARED_MEMORY_PER_BLOCK", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"):
            err, v = d.cuDeviceGetAttribute(getattr(d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{attr}"), dev)
            out[attr.lower()] = int(v) if int(err) == 0 else dl.driver_error(d, err)
        return {"driver_readback": out}
    except Exception as exc:  # the readback informs the report; it never decides the fact
        return {"driver_readback": {"error": f"{type(exc).__name__}: {exc}"}}


def read_l1(carveout: Carveout, points) -> tuple[float, dict]:
    """An L1 sweep's value, KiB (:func:`l1_capacity`'s reach), with the step and the carve-out it was read at."""
    step = l1_capacity(points)
    return step.reach / KIB, dict(
        grid_step_kib=carveout.window_kib[2], knee_kib=step.reach / KIB, next_kib=step.above / KIB,
        hit_cycles=round(step.below_level, 2), above_cycles=round(step.above_level, 2),
        plateaus=plateau_dicts(points),
        shared_mem=carveout.shared_mem, carveout_hint_percent=carveout.hint,
        carveout_kib_implied=carveout.expected_smem_kib, l1_kib_expected=carveout.expected_l1_kib)


def l1_method(c: Carveout) -> str:
    lo, hi, step = c.window_kib
    return (f"ld.global.ca chase (l1_capacity_chase.cu CACHE=0), one 8-byte node per 128-byte line, one random cycle, "
            f"one warp, {CAP_UNROLL} timed hops after one untimed walk over the whole cycle; launched with "
            f"{c.shared_mem // KIB} KiB of dynamic shared memory and PREFERRED_SHARED_MEMORY_CARVEOUT = {c.hint} % "
            f"(the smallest sm_90 carve-out holding that and the reserved 1 KiB: {c.expected_smem_kib} KiB; the sweep "
            f"says what L1 the driver left); "
            f"footprints {lo}..{hi} KiB step {step} KiB (and 4..12 KiB); the value is the last footprint of the "
            f"L1-hit plateau (points within {PLATEAU_BAND:.0%}), so the capacity lies in [value, value + {step})")


#: the L1's capacity at each carve-out (hwtests/test_cache_capacity.py tests them, tools/fact_specs.py lists them),
#: the driver's readback of the function's carve-out beside each sweep
L1_FACTS: list[SweepSpec] = [
    SweepSpec(l1_fact(c.name), lambda f, c=c: l1_chase(c, f), tuple(c.footprints()),
              lambda points, c=c: read_l1(c, points), method=l1_method(c), unit="KiB", divisor=CAP_UNROLL,
              x_names=("footprint",), report=carveout_readback)
    for c in CARVEOUTS.values()
]


# ----------------------------------------------------------------------------------------------
# the constant cache's facts: two read from one sweep (const_l15_hit_latency_cycles, the level's latency from the
# nearest SM, is a fact of specs_sync_units: one table on every SM, not a sweep on one)

CONST_SWEEP = "const_chase"
CONST_METHOD = (f"dependent LDC chase (const_chase.cu, one warp, every lane on one word) through a __constant__ "
                f"table swept over {CONST_FOOTPRINTS[0]} B .. {CONST_FOOTPRINTS[-1] // KIB} KiB (256 B steps to "
                f"4 KiB, 512 B to 8 KiB, 4 KiB to 64 KiB), word stride odd and coprime with the table (one cycle), "
                f"one untimed walk over the table, then {CAP_UNROLL} hops per pass, pass 2 of 2 timed; plateaus "
                f"within {PLATEAU_BAND:.0%}, steps over {STEP_RISE:.0%}")


def read_const(level: int, points) -> tuple[int, dict]:
    """The constant sweep's ``level``-th capacity (0: the constant L1's, 1: the level behind it), bytes, with
    the steps and plateaus. :class:`NoSuchLevel` where the 64 KiB bank does not reach that level."""
    levels = const_levels(points)
    info = dict(plateaus=plateau_dicts(points),
                steps=[dict(reach=x.reach, above=x.above, below_cycles=round(x.below_level, 2),
                            above_cycles=round(x.above_level, 2)) for x in levels])
    if len(levels) <= level:
        raise NoSuchLevel(f"the 64 KiB constant bank does not reach past level {level + 1} ({len(levels)} step(s), the "
                          f"last at {levels[-1].reach} B; none after it up to {max(f for f, _ in points)} B): "
                          f"{table(points)}")
    return levels[level].reach, info


CONST_FACTS: list[SweepSpec] = [
    SweepSpec(name, const_sweep_point, tuple(CONST_FOOTPRINTS), lambda points, k=k: read_const(k, points),
              method=f"{CONST_METHOD}; the value: {what}", unit="bytes", divisor=CAP_UNROLL, x_names=("footprint",),
              shared=CONST_SWEEP)
    for k, (name, what) in enumerate((("const_l1_capacity_bytes",
                                       "the last table size of the first (constant L1 hit) plateau"),
                                      ("const_l15_capacity_bytes", "the last table size of the second plateau")))
]
#: every sweep spec of this file (tools/fact_specs.py lists them)
FACTS: list[SweepSpec] = L1_FACTS + CONST_FACTS
