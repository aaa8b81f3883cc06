"""The memory hierarchy's line-by-line facts (:data:`FACTS`, pytest_gpuprops.factspec.FactSpec): the
DRAM miss of each of memory_levels.DRAM_LINES lines, by a chase that stays on the line
(kernels/global_chase.cu; the line holds its own address), its two tiers' medians. The GPU test is
test_memory_hierarchy.py's, the static region checks test_static_chains.py's.

No far tier for loads repeated on one line. Chased on itself with ld.global.cg, each of 64 lines
read 253.0 .. 307.0 cycles, its widest gap 273.8 -> 284.8 (4 %), one tier, median 274.9 (H100
GPU-2bbcd972, driver 580.159.04, CUDA 13.0, 2026-11-26), while the random chase's hops over L2/8 split
into a near mode (median 266-267) and a far one (447-449), 36-38 % apart (GPU-ce7928d2, same day). A
load repeated on one line is served near whatever slice owns the line (a copy in the near
partition), so the one-line chase measures no far-partition hit and its L2 hits are no fact: the
L2 hit's far mode is the per-hop chase's (test_memory_hierarchy.py test_l2_hop_far_mode). The
one-line hits stay as each line's reference for its DRAM miss.

The DRAM miss (DISCARD=1): one ld.global.cg of the line after a warm load and discard.global.L2,
its value read before the stop read (a build that left it unread read 2.0 cycles for every line; the
static check asks for the read). Read so, the 64 lines' misses form two tiers (H100 GPU-9db59b7a and
GPU-fd48deeb, driver 580.159.04, CUDA 13.0, 2026-11-26): 535 .. 785 cycles, the widest gap 589 -> 723
(22.8 %) and 590 -> 679 (15.1 %). Their median over lines was no fact (588 on one unit, 634 in the
gap on the other, a batch's median 576.5 .. 742: it falls in either tier), and each tier's median was
not steady either (a tier holds levels of its own, which lines land in each set by the allocation:
memory_levels.py says how far it moved), nor the median of the quarter of the lines with the lowest
or highest misses, so the facts are each tier's mean: over the near tier's lines (dram_latency_near_cycles)
and over the far tier's (dram_latency_far_cycles), read on memory_levels.DRAM_LINES (256) lines of a
128 MiB buffer so that the allocation's share of lines on each level averages out (memory_levels.py:
the 64-line means moved up to 2.56 % between processes on one unit); both tiers' lines, the far share and the gap
(memory_levels.dram_tiers) are in the launch info. They are
the GPU model's (its L2, crossbar, memory and clocks): record mode files them per GPU model.

The other facts of the family (l1_hit_latency_cycles, dram_latency_cycles, the per-hop percentiles and
far mode, the capacity knees) stay tests of test_memory_hierarchy.py: their footprints come from the
sizes the device reports (memory_levels.footprint), which a spec's launch, declared before any device is
known, cannot take."""

import memory_levels as ml

from pytest_gpuprops import reserved
from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.region_rules import Region

ARCH = "sm_90"
GPU = "gpu"
#: kernels/global_chase.cu CACHE=1's load on sm_80 .. sm_90 (specs.CHASE_CACHE["cg"])
CG_LOAD = "LDG.E.64.STRONG.GPU"
#: dependent hops per launch of the L2-hit chase: 256 hits of 260-520 cycles, 70-140 us per launch
LINE_CHASE_UNROLL = 256


#: the DRAM_SPREAD_BYTES buffer every one-line chase runs in, reserved as the GPU's runner starts (FactSpec.reserve,
#: pytest_gpuprops/reserved.py) and kept for the session: line k is then the same physical line in its L2-hit and
#: its DRAM-miss readings, so each DRAM miss is compared with its own line's L2 hit, and the same pages in every
#: process (a buffer allocated where the first chase began lay where the tests before it had left the pool)
SPREAD_BUFFER = "dram_lines"
SPREAD_RESERVE = (SPREAD_BUFFER, lambda cp: ml.DRAM_SPREAD_BYTES)


def spread_buffer(cp):
    """The session's DRAM_SPREAD_BYTES buffer (64-bit words) on the current device."""
    return reserved.buffer(cp, SPREAD_BUFFER, ml.DRAM_SPREAD_BYTES)[:ml.DRAM_SPREAD_BYTES // 8]


def line_chase(line: int, miss: bool = False) -> KernelSpec:
    """The chase that stays on line ``line`` of memory_levels.dram_line_offsets() (in the session's
    spread buffer): LINE_CHASE_UNROLL dependent ld.global.cg of it, one warm hop first (an L2 hit
    each); or (``miss``) one ld.global.cg of it after a warm load and discard.global.L2 (a DRAM miss,
    the page's translation cached). The line is the argument: one build for every line."""
    import numpy as np
    offset = ml.dram_line_offsets()[line]

    def args(cp):
        words = spread_buffer(cp)
        address = words.data.ptr + offset
        words[offset // 8] = np.uint64(address)  # the line holds its own address
        cursor = cp.zeros(2, dtype=cp.uint64)
        cursor[0] = np.uint64(address)
        cp.cuda.runtime.deviceSynchronize()
        return words[offset // 8:], cursor, np.int32(1)

    defines = {"CACHE": 1, "UNROLL": 1, "DISCARD": 1} if miss else {"CACHE": 1, "UNROLL": LINE_CHASE_UNROLL}
    return KernelSpec("global_chase.cu", "global_chase", defines, grid=1, block=32, args=args, clock_beside=True)


def _miss(line: int, miss: bool = True) -> KernelSpec:
    return line_chase(line, miss)


#: the timed region of the DRAM miss: the one load, then the LOP3 that reads its value (the xor into
#: the warm loads' sink) before the stop read
MISS_REGION = Region((CG_LOAD,), steps="UNROLL", trailing=("LOP3.LUT",))


#: the DRAM miss facts: name -> (Statistic.lines, which tier's lines are taken)
DRAM_FACTS = {
    "dram_latency_near_cycles": ("dram_near_tier_mean", "near"),
    "dram_latency_far_cycles": ("dram_far_tier_mean", "far"),
}


def _facts() -> list[FactSpec]:
    return [FactSpec(
        name, _miss, MISS_REGION, scope=GPU, statistic=Statistic(lines=kind), reserve=SPREAD_RESERVE,
        method=f"one ld.global.cg {ml.CHASE_LINE_TEXT}, after a warm load and discard.global.L2 of it (a DRAM miss, "
               f"its page's translation cached), its value read before the stop read; each line's median over "
               f"launches, refused unless {ml.COLD_MIN_RATIO} x the line's L2 hit (the same line chased on itself); "
               f"the lines of the {side} tier (the misses split at their widest gap, at least "
               f"{ml.DRAM_TIER_GAP:.0%} with {ml.DRAM_TIER_MIN_LINES} or more of the {ml.DRAM_LINES} lines on each side), "
               f"their mean (the lines' spread within the tier its noise)")
        for name, (kind, side) in DRAM_FACTS.items()]


FACTS: list[FactSpec] = _facts()
