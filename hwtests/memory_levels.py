"""Which memory level a pointer chase measures, from the sizes the device reports, and the chase's
layout (kernels/global_chase.cu). Pure functions; the array module (numpy on the CPU, cupy on the
GPU) is passed in, so tests/test_hwtests_helpers.py checks all of it without a GPU.

Sizes:
* L2: ``l2CacheSize`` of cudaGetDeviceProperties;
* shared memory per SM at its largest carve-out: ``sharedMemPerMultiprocessor``;
* L1 and shared memory together per SM: not reported by CUDA; the CUDA C++ Programming Guide gives
  it per compute capability (:data:`L1_SMEM_PER_SM_KIB`: 256 KiB on sm_90).
L1 is what shared memory leaves: at least ``L1+smem - smem`` (28 KiB on sm_80 .. sm_90, whatever
carve-out the driver picks), at most ``L1+smem``.

Footprints, each checked against its level's bounds by :func:`check_footprint`:
* L1 hit: half the smallest L1, so the chase fits at any carve-out (14 KiB: 112 nodes);
* L2 hit: an eighth of L2, and at least 4 x the largest L1 (never an L1 hit even if a load were
  cached there); at most half of L2;
* DRAM: 4 x L2, chased cold after an eviction pass that writes another 4 x L2.
"""

from __future__ import annotations

import dataclasses
import math

from pytest_gpuprops import reserved
from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.stats import TIER_BAND, StopRule, clock_beside_info, lowest_tier

KIB, MIB = 1024, 1024 * 1024
#: L1 data cache + shared memory per SM, by arch (CUDA C++ Programming Guide, compute capabilities).
L1_SMEM_PER_SM_KIB = {"sm_75": 96, "sm_80": 192, "sm_86": 128, "sm_87": 192, "sm_89": 128, "sm_90": 256,
                      "sm_90a": 256}
NODE_STRIDE = 128  # bytes between nodes: one node per 128-byte line, so every hop is a new line
LEVELS = ("l1", "l2", "dram")


@dataclasses.dataclass(frozen=True)
class CacheSizes:
    arch: str
    l2_bytes: int
    smem_per_sm_bytes: int  # shared memory per SM at the largest carve-out
    l1_smem_per_sm_bytes: int  # L1 + shared memory per SM

    @property
    def l1_min_bytes(self) -> int:
        """L1 left at the largest shared-memory carve-out."""
        return self.l1_smem_per_sm_bytes - self.smem_per_sm_bytes

    @property
    def l1_max_bytes(self) -> int:
        return self.l1_smem_per_sm_bytes

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(l1_min_bytes=self.l1_min_bytes, l1_max_bytes=self.l1_max_bytes)
        return d


def cache_sizes(arch: str, props: dict) -> CacheSizes:
    """Sizes from cudaGetDeviceProperties' dict (cupy.cuda.runtime.getDeviceProperties)."""
    if arch not in L1_SMEM_PER_SM_KIB:
        raise ValueError(f"no documented L1 + shared memory size for {arch}; add it to L1_SMEM_PER_SM_KIB")
    smem = int(props.get("sharedMemPerMultiprocessor") or props.get("maxSharedMemoryPerMultiProcessor") or 0)
    l2 = int(props.get("l2CacheSize") or 0)
    if smem <= 0 or l2 <= 0:
        raise ValueError(f"device properties lack l2CacheSize ({l2}) or sharedMemPerMultiprocessor ({smem})")
    sizes = CacheSizes(arch, l2, smem, L1_SMEM_PER_SM_KIB[arch] * KIB)
    if sizes.l1_min_bytes <= 0:
        raise ValueError(f"{arch}: shared memory per SM {smem} B leaves no L1 of the documented "
                         f"{sizes.l1_smem_per_sm_bytes} B L1 + shared memory")
    return sizes


def device_sizes(cupy, index: int, arch: str) -> CacheSizes:
    return cache_sizes(arch, cupy.cuda.runtime.getDeviceProperties(index))


def _lines(nbytes: int) -> int:
    return nbytes // NODE_STRIDE * NODE_STRIDE


def footprint(level: str, sizes: CacheSizes) -> int:
    """Bytes the chase for ``level`` covers (a multiple of NODE_STRIDE), checked against the level."""
    if level == "l1":
        f = _lines(sizes.l1_min_bytes // 2)
    elif level == "l2":
        f = _lines(max(sizes.l2_bytes // 8, 4 * sizes.l1_max_bytes))
    elif level == "dram":
        f = 4 * _lines(sizes.l2_bytes)
    else:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
    check_footprint(level, f, sizes)
    return f


def check_footprint(level: str, nbytes: int, sizes: CacheSizes) -> None:
    """Raise ValueError unless a chase over ``nbytes`` can only be served by ``level``."""
    bounds = {"l1": (NODE_STRIDE * 2, sizes.l1_min_bytes // 2),
              "l2": (4 * sizes.l1_max_bytes, sizes.l2_bytes // 2),
              "dram": (4 * sizes.l2_bytes, math.inf)}
    if level not in bounds:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
    lo, hi = bounds[level]
    if not lo <= nbytes <= hi:
        raise ValueError(f"a {nbytes} B chase does not measure {level} on {sizes.arch} (L1 {sizes.l1_min_bytes}.."
                         f"{sizes.l1_max_bytes} B, L2 {sizes.l2_bytes} B): it must lie in [{lo}, {hi}] B")


def level_of(nbytes: int, sizes: CacheSizes) -> str | None:
    """The level a chase over ``nbytes`` measures, or None between levels (a capacity knee)."""
    for level in LEVELS:
        try:
            check_footprint(level, nbytes, sizes)
        except ValueError:
            continue
        return level
    return None


def log_grid(lo: int, hi: int, per_octave: int, quantum: int) -> list[int]:
    """Footprints from ``lo`` to ``hi`` (inclusive, the last point even off the octaves), ``per_octave``
    points per doubling, each rounded down to a multiple of ``quantum``, no footprint twice."""
    if quantum <= 0 or lo < quantum or hi < lo or lo % quantum or hi % quantum or per_octave < 1:
        raise ValueError(f"log grid {lo}..{hi}, {per_octave} per octave, quantum {quantum}: expected "
                         "quantum <= lo <= hi, both multiples of the quantum, at least 1 point per octave")
    out, k = [], 0
    while True:
        f = int(lo * 2 ** (k / per_octave)) // quantum * quantum
        if f >= hi:
            break
        if not out or f > out[-1]:
            out.append(f)
        k += 1
    return out + [hi]


def sweep_footprints(sizes: CacheSizes, start: int = 4 * KIB, per_octave: int = 2) -> list[int]:
    """A log grid from ``start`` to 4 x L2 (inclusive), ``per_octave`` points per doubling, each a
    multiple of NODE_STRIDE."""
    return log_grid(start, 4 * _lines(sizes.l2_bytes), per_octave, NODE_STRIDE)


def cycle_order(n_nodes: int, seed: int = 0):
    """A random order of the nodes 0..n-1 (numpy), the chase visiting them in this order, cyclically."""
    import numpy as np
    if n_nodes < 2:
        raise ValueError(f"a chase needs at least 2 nodes, not {n_nodes}")
    order = np.random.default_rng(seed).permutation(n_nodes)
    return order


def fill_chain(xp, words, base_address: int, *, stride: int = NODE_STRIDE, seed: int = 0) -> int:
    """Lay the chase out in ``words`` (64-bit words of array module ``xp``, at device address
    ``base_address``): node i sits at byte i * stride and holds the address of the node after it in
    :func:`cycle_order`, so following the words from any node visits every node once and comes back.
    Returns the address of the first node in that order (the chase's start)."""
    if stride % 8 or stride < 8:
        raise ValueError(f"stride {stride} must be a positive multiple of 8 bytes")
    n = words.size * 8 // stride
    order = cycle_order(n, seed)
    dev_order = xp.asarray(order, dtype=xp.int64)
    words[...] = 0
    nxt = xp.roll(dev_order, -1).astype(xp.uint64)
    words[dev_order * (stride // 8)] = xp.uint64(base_address) + nxt * xp.uint64(stride)
    return int(base_address + int(order[0]) * stride)


# ----------------------------------------------------------------------------------------------
# reading the results


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between order statistics."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    pos = (len(xs) - 1) * q / 100
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def batch_percentiles(values, q: float, batches: int) -> list[float]:
    """The q-th percentile of each of ``batches`` interleaved batches (values[i::batches]): their
    spread is the percentile's sampling noise."""
    if len(values) < 2 * batches:
        raise ValueError(f"{len(values)} values are too few for {batches} batches")
    return [percentile(values[i::batches], q) for i in range(batches)]


def near_group(values, *, band: float = TIER_BAND) -> list[float]:
    """The lowest tier of ``values`` (an L2 line's slice: the nearest ones), in their order
    (stats.lowest_tier: within ``band`` of the smallest)."""
    return lowest_tier(list(values), band)


#: a copy of many lines waits for its slowest slice, so its lines form one tier, except the copies whose every
#: line lives in the near partition: a low tier split off by a relative gap of at least this much in the
#: lower half (1 KiB copies on H200 GPU-3c48baa4, 2026-11-27: 302-314 cycles against 333-356, 3-16 % of the
#: lines from one process to the next; the 4 KiB copies, 32 lines each, never had one)
UPPER_TIER_GAP = 0.03


def upper_tier(values, *, gap: float = UPPER_TIER_GAP) -> list[float]:
    """``values`` in their order but a low tier: those under the widest relative gap of at least ``gap``
    between two neighbours of the lower half of the sorted values; all of them where there is none. Why:
    the share of lines in the low tier follows where the allocation's lines lie, so the median over every
    line moved with it (GPU-3c48baa4's 1 KiB copies read 340.25 in one process, 344.25-345.75 in three;
    above the gap 341.0-344.0), while the tier above it is the copy's own latency."""
    ordered = sorted(values)
    cuts = [(ordered[i] - ordered[i - 1]) / ordered[i - 1] for i in range(1, len(ordered) // 2 + 1)]
    widest = max(range(len(cuts)), key=cuts.__getitem__, default=None)
    if widest is None or cuts[widest] < gap:
        return list(values)
    floor = ordered[widest + 1]
    return [v for v in values if v >= floor]


def near_group_batches(values, batches: int, *, band: float = TIER_BAND) -> list[float]:
    """The median of each of ``batches`` interleaved batches of the lowest tier (:func:`near_group`,
    chosen once over all values, kept in their order): their median is the tier's typical value, their
    spread its sampling noise. Batching the tier (not the values) keeps every batch filled however the
    tier's lines fall among all of them. ``band`` ALL_LINES: the tier above a low one (:func:`upper_tier`)."""
    tier = upper_tier(values) if band == ALL_LINES else near_group(values, band=band)
    if len(tier) < batches:
        shown = ", ".join(f"{v:.1f}" for v in sorted(values)[:batches + 4])
        raise ValueError(f"{len(tier)} of {len(values)} values are in the lowest tier (within {band:.0%} of the "
                         f"smallest), too few for {batches} batches; the smallest values: {shown}")
    return [percentile(tier[b::batches], 50) for b in range(batches)]


# ----------------------------------------------------------------------------------------------
# The per-hop L2 chase's two modes. Over L2/8, one hop per launch, the H100's hops fall in a near mode
# (245..304 cycles, 84-86 % of hops, median 266-267) and a far mode (415..485, 14-18 %, median
# 447-449), with no hop between: a gap of 36-38 % (four processes of GPU-ce7928d2, 2026-11-26). A hop's
# line lives in whichever L2 partition its physical address picks, so the far share is the share of
# lines the far partition owns along the chase and the far mode is a far-partition hit. The modes are
# split at the hops' widest relative gap, refused (one mode) when it is under HOP_MODE_GAP: a
# distribution of one mode read widest gaps of 2.6-4 % (the DRAM hops; the one-line chase's lines).
#
# Only the far mode's median is a fact: 456.0 and 453.5 cycles on two more H100s (GPU-9db59b7a,
# GPU-fd48deeb, 2048 hops, 2026-11-26; batches 0.3 / 1.0 % apart), 447-449 on GPU-ce7928d2. The near
# mode's median read 288.0 and 268.5 on those two units, the median over hops 291.0 and 272.0, 7 %
# apart while each was steady to 0.2-1.9 % within its process: the near mode is a mix of slices at
# different crossbar distances, and its median moves with which slices the allocation's lines fall
# in. It is the allocation's, not the GPU model's, so it and the median over hops are reported (the
# far fact's launch info, :func:`hop_modes_summary`), not asserted.

#: the least relative gap that splits the near mode from the far one: half the H100's 36-38 %, five
#: times the widest gap of a one-mode distribution seen (4 %)
HOP_MODE_GAP = 0.20
#: interleaved batches of a mode's hops: the median of each, their median the fact, their spread its
#: noise (the far hops' 4 batches of 1024 hops spread 0.9-3.1 % on the H100, 2026-11-26)
MODE_BATCHES = 4
#: the least share of the hops a mode must hold for a gap to split it off (the far mode held 14-18 %):
#: a few stray slow hops (an interrupt, a refresh) above the far mode do not make a mode of their own
MODE_MIN_SHARE = 0.02
#: the noise target of a mode's (or a tier's) median over its batches: 4 batches of 2048 hops' far
#: mode spread 0.3-1.0 % on the H100 (GPU-9db59b7a, GPU-fd48deeb), 1024 hops' 0.9-3.1 % (GPU-ce7928d2)
MODE_NOISE = 0.05


def hop_modes(hops, *, min_gap: float = HOP_MODE_GAP, min_share: float = MODE_MIN_SHARE) -> tuple[list, list, tuple]:
    """(the near mode's hops, the far mode's, (low, high, gap)) of ``hops`` (in their order), split at
    their widest relative gap among splits that leave ``min_share`` of the hops on each side. Refused
    when that gap is under ``min_gap``: the hops are one mode and there is no far one to take."""
    hops = list(hops)
    lo, hi, gap = widest_gap(hops, min_side=max(2, math.ceil(min_share * len(hops))))
    if gap < min_gap:
        raise ValueError(f"the hops form one mode: their widest gap (at least {min_share:.0%} of {len(hops)} hops on "
                         f"each side), {lo:.1f} -> {hi:.1f} cycles, is {gap:.1%}, under {min_gap:.0%}; "
                         f"p10 {percentile(hops, 10):.1f}, p50 {percentile(hops, 50):.1f}, p90 {percentile(hops, 90):.1f}")
    return [h for h in hops if h < hi], [h for h in hops if h >= hi], (lo, hi, gap)


def far_mode_batches(hops, *, batches: int = MODE_BATCHES, min_gap: float = HOP_MODE_GAP) -> list[float]:
    """The far mode's median in each of ``batches`` interleaved batches of its hops (their median the
    fact, their spread its noise): the hops split once over all of them (:func:`hop_modes`), the far
    ones batched in the hops' order."""
    hops = list(hops)
    _, far, _ = hop_modes(hops, min_gap=min_gap)
    if len(far) < 2 * batches:
        raise ValueError(f"{len(far)} of {len(hops)} hops are in the far mode, too few for {batches} batches of 2 or more")
    return [percentile(far[b::batches], 50) for b in range(batches)]


def hop_modes_summary(hops, *, min_gap: float = HOP_MODE_GAP) -> dict:
    """What the report shows of the per-hop chase: p10 / p50 / p90 over hops, the widest gap, and where
    it splits two modes, the far share and each mode's range and median (reported, not facts: the near
    mode's median and p50 move with the allocation's slices, and p90 lies in the far mode only while
    the far share is over 10 %)."""
    hops = list(hops)
    out = {f"p{q}_cycles": round(percentile(hops, q), 2) for q in (10, 50, 90)}
    try:
        near, far, (lo, hi, gap) = hop_modes(hops, min_gap=min_gap)
    except ValueError as exc:
        return dict(out, modes=1, one_mode=str(exc))
    return dict(out, modes=2, widest_gap_cycles=[round(lo, 2), round(hi, 2), round(gap, 4)],
                far_share=round(len(far) / len(hops), 4),
                near_mode_cycles=[round(min(near), 2), round(percentile(near, 50), 2), round(max(near), 2)],
                far_mode_cycles=[round(min(far), 2), round(percentile(far, 50), 2), round(max(far), 2)])


def first_rise(points, reference: float, factor: float, after: int = 0) -> int | None:
    """The smallest footprint above ``after`` whose latency exceeds ``factor`` x ``reference``;
    ``points`` are (footprint, latency) pairs."""
    for f, lat in sorted(points):
        if f > after and lat > factor * reference:
            return f
    return None


def capacity_knees(points, sizes: CacheSizes, factor: float = 1.5) -> tuple[int | None, int | None]:
    """(L1 knee, L2 knee) of a latency-vs-footprint sweep: where latency first exceeds ``factor``
    times the smallest footprint's (L1), then ``factor`` times the median of the points that can only
    be L2 hits (L2)."""
    pts = sorted(points)
    l1_knee = first_rise(pts, pts[0][1], factor)
    l2_lat = sorted(lat for f, lat in pts if level_of(f, sizes) == "l2")
    if l1_knee is None or not l2_lat:
        return l1_knee, None
    return l1_knee, first_rise(pts, l2_lat[len(l2_lat) // 2], factor, after=4 * sizes.l1_max_bytes)


def plot_sweep(points, sizes: CacheSizes, path, title: str):
    """Latency per hop against footprint (log x), the L1 and L2 sizes marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = sorted(points)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([f / KIB for f, _ in pts], [c for _, c in pts], "o-", ms=3)
    for x, label in ((sizes.l1_min_bytes, "L1 (largest smem carve-out)"), (sizes.l1_max_bytes, "L1 + smem"),
                     (sizes.l2_bytes, "L2")):
        ax.axvline(x / KIB, ls="--", lw=0.8, color="grey")
        ax.text(x / KIB, ax.get_ylim()[1] * 0.95, " " + label, rotation=90, va="top", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("footprint (KiB), one node per 128-byte line, random cycle")
    ax.set_ylabel("cycles per hop (ld.global.ca)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_hops(hops_by_level: dict, path, title: str):
    """Histograms of per-hop latencies, one per level."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(hops_by_level), figsize=(4 * len(hops_by_level), 3.2), squeeze=False)
    for ax, (level, hops) in zip(axes[0], hops_by_level.items()):
        ax.hist(hops, bins=60)
        ax.set_xlabel(f"{level}: cycles per hop")
    axes[0][0].set_ylabel("hops")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------
# An L2 hit's latency, line by line. An access is served by the L2 slice that owns its line, and which
# slice (near or far partition, nearer or farther on the crossbar) depends on the physical address the
# allocation got: one line per process read 278.9, 312.97, 277.7 cycles (global atomics, H200,
# 2026-11-24), a single 16-byte cp.async.cg 304 then 317 (H100, 2026-11-25). And 64 CTAs reading their
# own lines at once read 278.5 in one process and 283-287 in the next (the same H100): their requests
# meet on the crossbar. So such a fact is measured on L2_LINES lines of one L2_SPREAD_BYTES buffer, one
# line per measurement by one warp (the kernel gets the buffer from that line on), and asserted as the
# lowest tier's median (near_group_batches). The lines are L2_LINE_STRIDE apart, an odd number of
# 128-byte lines (4095), so their addresses run through every low bit pattern instead of the few a
# power-of-two stride gives, and they land in many slices of both partitions.
L2_SPREAD_BYTES = 32 * MIB
L2_LINES = 64
L2_LINE_STRIDE = 4095 * 128  # 524160 bytes: 64 lines cover 31.5 MiB of the 32 MiB buffer
#: percentiles over lines reported beside the fact: near partition, far partition
NEAR_Q, FAR_Q = 10, 90
#: interleaved batches of lines: the lowest tier's median in each; their spread is the fact's noise
NEAR_BATCHES = 4
#: the batches' spread: 0.34-1.22 % in six measurements of the global atomics on the H100 (GPU-7ebe9dba,
#: 2026-11-25; 275.4-276.1 cycles distinct, 339.7-341.2 same address). Splitting at the midpoint of p10
#: and p90 took two tiers and read 3.3-4.0 %; the 10th percentile of 8 lines, 3.4 % (2026-11-24).
NEAR_NOISE = 0.02
#: each line's measurement: a chain on one line is steady to 0.02 % (H200), so a few launches settle it
LINE_STOP = StopRule(noise_target=0.01, min_samples=5, max_samples=20, time_budget_s=0.3)


def l2_line_offsets() -> list[int]:
    """Byte offsets, in the L2_SPREAD_BYTES buffer, of the lines a line-by-line latency runs on."""
    return [k * L2_LINE_STRIDE for k in range(L2_LINES)]


def dram_line_offsets() -> list[int]:
    """Byte offsets, in the DRAM_SPREAD_BYTES buffer, of the lines the one-line chase's DRAM misses run on."""
    return [k * L2_LINE_STRIDE for k in range(DRAM_LINES)]


#: the buffer the line-by-line L2 facts run in, reserved as the GPU's runner starts (FactSpec.reserve,
#: pytest_gpuprops/reserved.py): which slices and partition each line lives in follows the buffer's physical
#: pages, and those follow the process's allocation history; a buffer allocated afresh for each line read the
#: same unit's copies and atomics up to 1.2 % apart from one process to the next (H100s, 2026-11-26/27)
L2_LINES_BUFFER = "l2_lines"
L2_LINES_RESERVE = (L2_LINES_BUFFER, lambda cp: L2_SPREAD_BYTES)
#: set while :func:`on_other_memory` measures: the lines then take a fresh allocation, not the reserved buffer
_other_memory = [False]


def line_by_line(cp, line: int):
    """The zeroed L2_SPREAD_BYTES buffer (uint32 words) from line ``line`` of l2_line_offsets() on: the
    reserved one (:data:`L2_LINES_RESERVE`), or a fresh one while :func:`on_other_memory` measures."""
    if _other_memory[0]:
        words = cp.zeros(L2_SPREAD_BYTES // 4, dtype=cp.uint32)
    else:
        words = reserved.buffer(cp, L2_LINES_BUFFER, L2_SPREAD_BYTES).view(cp.uint32)[:L2_SPREAD_BYTES // 4]
        words.fill(0)
    return words[l2_line_offsets()[line] // 4:]


def on_other_memory(measure):
    """``measure()`` while one more buffer of L2_SPREAD_BYTES is held: CuPy's memory pool then gives the
    lines' buffers other memory than the measurement before had (it took that back and would hand the
    same pages out again), so a re-measurement confirms a reading on another allocation's L2 slices and
    DRAM channels instead of repeating the first's. H100 GPU-4f098f2f, 2026-11-26: the near-partition
    atomics measured three times on one allocation read one batch spread three times (2.18, 2.15, 2.19 %
    against a 2 % target: NOISY confirmed). The lines take a fresh buffer each meanwhile, not the reserved one
    (:func:`line_by_line`); without CuPy (tests with given numbers) nothing more is held."""
    try:
        import cupy
        held = cupy.empty(L2_SPREAD_BYTES, dtype=cupy.uint8)
    except ImportError:
        held = None
    _other_memory[0] = True
    try:
        return measure()
    finally:
        _other_memory[0] = False
        del held


def near_tier_latency(gpuprops, name: str, spec_of_line, *, divisor: float, band: float = TIER_BAND) -> Measurement:
    """The lowest tier of an L2-hit latency over lines: ``spec_of_line(k)`` (k < L2_LINES) measured
    afresh for every line (stop rule LINE_STOP), then the median of the lowest tier (within ``band`` of
    the fastest line) in each of NEAR_BATCHES interleaved batches of it, as one measurement whose
    re-measurement measures every line again, on other memory (:func:`on_other_memory`). Its launch info
    holds every line's cycles and the NEAR_Q-th and FAR_Q-th percentiles over lines. ``band=math.inf``: every line (ALL_LINES)."""
    lines = [gpuprops.measure(f"{name} line at +{offset} B", spec_of_line(k), divisor=divisor, stop=LINE_STOP)
             for k, offset in enumerate(l2_line_offsets())]
    cycles = [m.median for m in lines]
    m = Measurement.given(
        name, near_group_batches(cycles, NEAR_BATCHES, band=band), noise_target=NEAR_NOISE,
        overhead_cycles=lines[0].overhead_cycles, sm_clock_mhz=lines[0].sm_clock_mhz,
        throttle=sorted({t for line in lines for t in line.throttle}), kernel=lines[0].kernel,
        launch=dict(lines[0].launch, buffer_bytes=L2_SPREAD_BYTES, lines=L2_LINES, line_stride_bytes=L2_LINE_STRIDE,
                    batches=NEAR_BATCHES,
                    **{f"p{q}_over_lines_cycles": round(percentile(cycles, q), 3) for q in (NEAR_Q, FAR_Q)},
                    line_cycles=[round(c, 3) for c in cycles], **clock_beside_info([m.launch for m in lines])))
    m.remeasure = lambda: on_other_memory(
        lambda: near_tier_latency(gpuprops, name, spec_of_line, divisor=divisor, band=band))
    return m


#: near_tier_latency's band for a copy of many lines: it waits for the slowest line's slice, so its
#: latency over lines is one tier (1 KiB bulk copies on the H200, 2026-11-25: 312-357 cycles over 64
#: lines), and the lowest-tier cut would fall inside it; every line is taken but a low tier of copies
#: whose every line is near (:func:`upper_tier`)
ALL_LINES = math.inf


#: how near_tier_latency measures, for method texts (ALL_LINES_TEXT: with band ALL_LINES)
RESERVED_TEXT = "reserved as the GPU's runner starts"
ALL_LINES_TEXT = (f"on each of {L2_LINES} lines {L2_LINE_STRIDE} B apart in a {L2_SPREAD_BYTES >> 20} MiB buffer {RESERVED_TEXT} "
                  "(in L2), one line per measurement (the copy starting there); the median over lines in each "
                  f"of {NEAR_BATCHES} interleaved batches, the median of those (a copy of many lines waits for "
                  "its slowest slice, so the lines form one tier), without a low tier of copies whose every line "
                  f"is near (under a gap of at least {UPPER_TIER_GAP:.0%} in the lower half of the lines)")
NEAR_TIER_TEXT = (f"on each of {L2_LINES} lines {L2_LINE_STRIDE} B apart in a {L2_SPREAD_BYTES >> 20} MiB buffer {RESERVED_TEXT} "
                  f"(in L2), one line per measurement; the lowest tier: lines within {TIER_BAND:.0%} of the "
                  f"fastest, their median in each of {NEAR_BATCHES} interleaved batches of lines, the median of "
                  "those (the slower tiers are reported, not asserted)")


# ----------------------------------------------------------------------------------------------
# A chase that stays on one line (kernels/global_chase.cu: the line holds its own address), measured
# line by line over the same L2_LINES lines. With ld.global.cg every hop is an L2 hit, and with
# DISCARD=1 one launch times one DRAM miss of the line. The L2 hits are no fact: a load repeated on
# one line is served near whatever slice owns it (64 lines read 253.0 .. 307.0 cycles on the H100,
# widest gap 4 %, one tier, GPU-2bbcd972, 2026-11-26), so they say nothing the random chase's near mode
# does not; they are each line's reference for its DRAM miss (a miss not COLD_MIN_RATIO x the line's
# hit was not evicted). One reading per line, shared; a re-measurement reads every line again.
#
# The DRAM misses form two tiers: 535 .. 785 cycles over 64 lines, the widest gap 589 -> 723 (22.8 %)
# on GPU-9db59b7a and 590 -> 679 (15.1 %) on GPU-fd48deeb (H100, driver 580.159.04, CUDA 13.0,
# 2026-11-26; p10 550 / 557, median 588 / 634, p90 770 / 775). The median over lines falls in either
# tier or in the gap (an interleaved batch's median read 576.5 .. 742), so it is no fact. The report
# keeps the two tiers (:func:`dram_tiers`: split at the misses' widest relative gap where it is at least
# DRAM_TIER_GAP with at least DRAM_TIER_MIN_LINES lines on each side).

# Within each tier the misses form levels of their own, which lines a process's allocation puts in each
# set by its addresses: on H100 GPU-41edd6a1 (2026-11-26) the near tier's 31 lines read 535-559 cycles
# (15 of them) and 577-600 (16) in one process, 533-552 (20) and 572-593 (11) in the next, so the tier's
# median read 567.5, then 550.25. An order statistic jumps a level with the allocation: the median of the
# quarter of the lines with the lowest misses (the facts until 2026-11-26 night) held there but moved 4.6 %
# on GPU-b842806c (548.5 against 574-575). Each tier's mean weighs its levels by the lines they hold, so
# it moves by the share of lines that change level, not by a level's whole step: over eight units of both
# SKUs (38 whole-suite processes, driver 580.159.04, CUDA 13.0, 2026-11-26) a unit's near-tier mean moved
# at most 1.90 % (the quarter's median 4.62 %), its far-tier mean 2.56 % (2.97 %).

# So the one-line chase runs on DRAM_LINES lines, four times the L2 facts' L2_LINES, over a buffer four times
# as large (the same stride): a tier's mean moves by the share of its lines on each level, and that share,
# the allocation's, spreads as one over the square root of the lines a tier holds (about 32 of 64 lines,
# 128 of 256). Over those 38 processes the 64-line tier means moved up to 1.90 % (near) and 2.56 % (far)
# on one unit; a quarter of that spread's variance is half its range.
#: the one-line chase's lines (its DRAM miss facts) and the buffer they lie in, L2_LINE_STRIDE apart
DRAM_LINES = 256
DRAM_SPREAD_BYTES = 128 * MIB

#: Statistic.lines of the one-line chase's facts (pytest_gpuprops.factspec.LINE_STATISTICS): the DRAM
#: misses of the near tier's lines (below the widest gap, :func:`dram_tiers`), those of the far tier's;
#: the fact is their mean
CHASE_LINE_STATISTICS = ("dram_near_tier_mean", "dram_far_tier_mean")
#: the noise target of a tier's mean over its lines: the lines' spread within a tier is the tier's levels
#: (up to 3.8 % in the near tier and 4.8 % in the far one over those 38 processes), not the measurement's
#: noise, which each line's own stop rule (DRAM_LINE_STOP) bounds
DRAM_TIER_NOISE = 0.08
#: a DRAM reading of a line must exceed its L2-hit reading by this factor, or the line was not evicted:
#: a line still in L2 reads its L2 hit (each line's readings are steady to 0.02 %), and a DRAM access
#: (row activation and column read behind the L2 miss) adds far more than 10 %
COLD_MIN_RATIO = 1.10
#: one DRAM miss per launch: its latency varies launch to launch more than a chain of hits does
DRAM_LINE_STOP = StopRule(noise_target=0.01, min_samples=11, max_samples=41, time_budget_s=0.5)
#: the least relative gap between the DRAM misses' tiers: two thirds of the narrowest split seen (15.1 %,
#: GPU-fd48deeb), 2.5 x the widest gap of a one-tier distribution seen (4 %: the one-line chase's L2
#: hits; the random chase's DRAM hops 2.6-3.1 %)
DRAM_TIER_GAP = 0.10
#: the least lines a DRAM tier of the report holds (the H100's tiers each held about half the 64 lines:
#: the median over lines, 588 and 634, lay at the gap); a few stray slow lines above the rest make no tier
DRAM_TIER_MIN_LINES = 8


def widest_gap(values, *, min_side: int = 1) -> tuple[float, float, float]:
    """(low, high, high / low - 1) of the two consecutive sorted ``values`` farthest apart relatively,
    among the splits that leave at least ``min_side`` values on each side (so a few stray slow values
    cannot make the widest gap their own)."""
    xs = sorted(values)
    if len(xs) < 2 * max(min_side, 1):
        raise ValueError(f"{len(xs)} values have no gap with {min_side} or more on each side")
    if xs[0] <= 0:
        raise ValueError(f"the values must be positive latencies; the smallest is {xs[0]}")
    pairs = list(zip(xs, xs[1:]))[max(min_side, 1) - 1:len(xs) - max(min_side, 1)]
    lo, hi = max(pairs, key=lambda p: p[1] / p[0])
    return lo, hi, hi / lo - 1


def dram_tiers(misses, *, min_gap: float = DRAM_TIER_GAP, min_lines: int = DRAM_TIER_MIN_LINES) -> tuple[list, list, tuple]:
    """(the indices of the near tier's lines, those of the far tier's, (low, high, gap)) of the lines'
    DRAM ``misses``, split at their widest relative gap among the splits that leave ``min_lines`` lines
    on each side. Refused (one tier) when that gap is under ``min_gap``, naming a wider gap that left
    too few lines on a side where there is one."""
    misses = list(misses)
    lo, hi, gap = widest_gap(misses, min_side=min_lines)
    if gap < min_gap:
        any_lo, any_hi, any_gap = widest_gap(misses)
        side = min(sum(c <= any_lo for c in misses), sum(c >= any_hi for c in misses))
        wider = (f"; the widest gap of all, {any_lo:.1f} -> {any_hi:.1f} ({any_gap:.1%}), leaves {side} lines on a "
                 f"side, under {min_lines}" if any_gap >= min_gap else "")
        raise ValueError(f"the DRAM misses form one tier: their widest gap with {min_lines} or more of "
                         f"{len(misses)} lines on each side, {lo:.1f} -> {hi:.1f} cycles, is {gap:.1%}, under "
                         f"{min_gap:.0%}{wider}; p10 {percentile(misses, 10):.1f}, p50 {percentile(misses, 50):.1f}, "
                         f"p90 {percentile(misses, 90):.1f}")
    return [k for k, c in enumerate(misses) if c < hi], [k for k, c in enumerate(misses) if c >= hi], (lo, hi, gap)


def line_statistic(kind: str, hits, misses=None) -> list[float]:
    """The values (their mean the fact, their spread within the tier its noise) of the chase-line statistic
    ``kind`` (:data:`CHASE_LINE_STATISTICS`) over the lines' DRAM ``misses`` (one per line of ``hits``, same
    order): the misses of the near tier's lines (``dram_near_tier_mean``) or the far tier's
    (``dram_far_tier_mean``), split by :func:`dram_tiers`, in line order. Misses of one tier are refused
    (:func:`dram_tiers` says why): the fact is a tier's."""
    hits = list(hits)
    if kind not in CHASE_LINE_STATISTICS:
        raise ValueError(f"chase-line statistic {kind!r}: expected one of {CHASE_LINE_STATISTICS}")
    if misses is None or len(misses) != len(hits):
        raise ValueError(f"{kind} needs one DRAM reading per line ({len(hits)}), got "
                         f"{None if misses is None else len(misses)}")
    misses = list(misses)
    near, far, _ = dram_tiers(misses)
    return [misses[k] for k in (near if kind == "dram_near_tier_mean" else far)]


def not_cold(hits, misses, ratio: float = COLD_MIN_RATIO) -> list[str]:
    """The lines whose DRAM reading is not ``ratio`` x their L2-hit reading (they were not evicted, or
    the timed load was not waited for), as text; empty when every miss was cold."""
    return [f"line {k}: DRAM {m:.1f} vs L2 hit {h:.1f} cycles" for k, (h, m) in enumerate(zip(hits, misses))
            if m < ratio * h]


def over_lines_summary(hits, misses=None) -> dict:
    """What the report shows of a chase-line reading: every line's L2 hit and the percentiles over
    lines; each line's DRAM miss, its percentiles and, split into tiers (:func:`dram_tiers`), the gap,
    each tier's lines, share and (min, median, max), or why the misses are one tier."""
    out = {"line_cycles": [round(c, 3) for c in hits],
           **{f"p{q}_over_lines_cycles": round(percentile(hits, q), 3) for q in (10, 50, 90)}}
    lo, hi, gap = widest_gap(hits)
    out["widest_gap_cycles"] = [round(lo, 3), round(hi, 3), round(gap, 4)]
    if misses is None:
        return out
    misses = list(misses)
    out["dram_line_cycles"] = [round(c, 3) for c in misses]
    out.update({f"dram_p{q}_over_lines_cycles": round(percentile(misses, q), 3) for q in (10, 50, 90)})
    try:
        near, far, (lo, hi, gap) = dram_tiers(misses)
    except ValueError as exc:
        return dict(out, dram_tiers=1, dram_one_tier=str(exc))

    def span(lines):
        cycles = [misses[k] for k in lines]
        return [round(min(cycles), 3), round(percentile(cycles, 50), 3), round(max(cycles), 3)]
    return dict(out, dram_tiers=2, dram_widest_gap_cycles=[round(lo, 3), round(hi, 3), round(gap, 4)],
                dram_near_lines=near, dram_far_lines=far, dram_far_share=round(len(far) / len(misses), 4),
                dram_near_cycles=span(near), dram_far_cycles=span(far))


_CHASE_LINES: dict = {}


def chase_line_readings(gpuprops, fact, *, fresh: bool = False):
    """(each line's L2-hit Measurement, each line's DRAM-miss Measurement) of the one-line chase
    ``fact`` launches (``fact.launch(line, miss=...)``), read once per GPU and shared; ``fresh`` reads
    every line again (a re-measurement)."""
    import dataclasses as dc
    out = []
    for miss in (False, True):
        each = dc.replace(fact, launch=lambda line, miss=miss: fact.launch(line, miss=miss))
        build = each.build()
        key = (gpuprops.gpu.index, build.source, build.kernel, tuple(sorted(build.defines.items())))
        if fresh or key not in _CHASE_LINES:
            what = "DRAM miss" if miss else "L2 hit"
            _CHASE_LINES[key] = [
                gpuprops.measure(f"one-line chase, {what}, line at +{offset} B", each.kernel(k), divisor=each.per(),
                                 stop=DRAM_LINE_STOP if miss else LINE_STOP)
                for k, offset in enumerate(dram_line_offsets())]
        out.append(_CHASE_LINES[key])
    return out[0], out[1]


def chase_line_measurement(gpuprops, fact, *, fresh: bool = False) -> Measurement:
    """``fact`` (a one-line chase's, its ``statistic.lines`` one of :data:`CHASE_LINE_STATISTICS`) as
    one measurement: line_statistic over the shared line readings (the tier's misses its values, their mean
    the reading), every
    line's cycles and the tiers in its launch info. Refused where a line's miss was not cold
    (:func:`not_cold`), the lines' misses then in the error."""
    kind = fact.statistic.lines
    hits, misses = chase_line_readings(gpuprops, fact, fresh=fresh)
    hit_cycles = [m.median for m in hits]
    miss_cycles = [m.median for m in misses]
    warm = not_cold(hit_cycles, miss_cycles)
    if warm:
        raise ValueError(f"{fact.name}: {len(warm)} of {len(hits)} lines' DRAM reading is under {COLD_MIN_RATIO} x "
                         "the line's L2 hit (the line was not evicted, or the stop read did not wait for the timed "
                         "load: check the DISCARD build's SASS, pytest hwtests -m static -k dram_latency): "
                         + "; ".join(warm[:8]))
    try:
        values = line_statistic(kind, hit_cycles, miss_cycles)
    except ValueError as exc:
        raise ValueError(f"{fact.name}: {exc}; the lines' DRAM misses: "
                         + ", ".join(f"{c:.1f}" for c in miss_cycles)) from exc
    first = misses[0]
    m = Measurement.given(
        fact.name, values, noise_target=DRAM_TIER_NOISE, center="mean",
        overhead_cycles=first.overhead_cycles, sm_clock_mhz=first.sm_clock_mhz,
        throttle=sorted({t for m in hits + misses for t in m.throttle}), kernel=first.kernel,
        launch=dict(first.launch, buffer_bytes=DRAM_SPREAD_BYTES, lines=DRAM_LINES, line_stride_bytes=L2_LINE_STRIDE,
                    tier_lines=len(values), statistic=kind, **over_lines_summary(hit_cycles, miss_cycles),
                    **clock_beside_info([m.launch for m in hits + misses])))
    m.remeasure = lambda: on_other_memory(lambda: chase_line_measurement(gpuprops, fact, fresh=True))
    return m


CHASE_LINE_TEXT = (f"on each of {DRAM_LINES} lines {L2_LINE_STRIDE} B apart in a {DRAM_SPREAD_BYTES >> 20} MiB buffer "
                   f"{RESERVED_TEXT}, "
                   "one line per measurement, a chase that stays on the line (it holds its own address)")

#: the kernel of the one-line chase
CHASE_LINE_SOURCE = "global_chase.cu"


def is_chase_line(fact) -> bool:
    """Whether ``fact`` is measured line by line with the one-line chase (its build is global_chase.cu's):
    its lines are read by :func:`chase_line_measurement`, not near_tier_latency."""
    return fact.statistic.lines is not None and fact.build().source == CHASE_LINE_SOURCE


# ----------------------------------------------------------------------------------------------
# The ld.global.cg chase against its footprint, 1 MiB to 4 x L2, hop by hop: whether an L2 hit's
# latency, or the share of hops served by the near partition, changes once the footprint passes half
# the L2 (one partition's capacity). A reported sweep, not a fact: what the L2 does past half of it
# (does each partition keep only its own lines, or copies of the far one's too?) is not documented, so
# no value can be said from first principles; only that misses past the L2 are slower than hits.

#: the sweep's first footprint: 8 x the largest L1, far below half the L2 of any sm_80 .. sm_90 GPU
CG_SWEEP_START = 1 * MIB
#: single-hop launches per footprint: the hops' percentiles and near share
CG_SWEEP_HOPS = 256


def near_threshold(hops, *, band: float = TIER_BAND) -> float | None:
    """The latency that splits near-partition hops from far ones: the midpoint of the hops' widest
    relative gap, or None where that gap is no wider than ``band`` (the hops form one tier)."""
    lo, hi, gap = widest_gap(hops)
    return (lo + hi) / 2 if gap > band else None


def sweep_row(footprint: int, hops, threshold: float | None) -> dict:
    """One footprint of the cg sweep: its hops' percentiles and mean, and the share of hops at or under
    ``threshold`` (None without one)."""
    hops = list(hops)
    share = None if threshold is None else round(sum(h <= threshold for h in hops) / len(hops), 4)
    return {"footprint": footprint, "hops": len(hops), "mean_cycles": round(sum(hops) / len(hops), 2),
            **{f"p{q}_cycles": round(percentile(hops, q), 2) for q in (10, 50, 90)}, "near_share": share}


def past_half_l2(rows, sizes: CacheSizes) -> dict:
    """The sweep's rows up to half the L2 (one partition's worth) against those between half and all of
    it: each group's median of the rows' 10th-percentile hop (the near hops' latency), mean hop and
    near share (None for a group without rows or shares). The median hop is left out: with about half
    the hops in each partition it falls in either tier."""
    def summary(group):
        shares = [r["near_share"] for r in group if r["near_share"] is not None]
        out = {"rows": len(group)}
        for key in ("p10_cycles", "mean_cycles"):
            out[key] = round(percentile([r[key] for r in group], 50), 2) if group else None
        out["near_share"] = round(percentile(shares, 50), 4) if shares else None
        return out
    half = sizes.l2_bytes // 2
    return {"up_to_half_l2": summary([r for r in rows if r["footprint"] <= half]),
            "half_to_whole_l2": summary([r for r in rows if half < r["footprint"] <= sizes.l2_bytes])}


def sweep_table(rows) -> str:
    """The sweep as one line of text: footprint in MiB, the hops' p10, mean and p90, near share."""
    def share(r):
        return "-" if r["near_share"] is None else f"{r['near_share']:.0%}"
    return "; ".join(f"{r['footprint'] / MIB:.3g} MiB: p10 {r['p10_cycles']:.0f}, mean {r['mean_cycles']:.0f}, "
                     f"p90 {r['p90_cycles']:.0f}, near {share(r)}" for r in rows)
