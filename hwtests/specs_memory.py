"""The memory hierarchy's line-by-line facts (:data:`FACTS`, one pytest_gpuprops.factspec.FactSpec each):
an L2 hit and a DRAM miss of each of memory_levels.L2_LINES lines, by a chase that stays on the line
(kernels/global_chase.cu; the line holds its own address, so every load's address is the value the
last one loaded). The GPU test is test_memory_hierarchy.py's, the static region checks
test_static_chains.py's.

Which L2 slice serves a line, and so whether the near or the far partition, depends on the physical
address the line got (memory_levels.py, near_tier_latency's notes), so one chase over many lines mixes
both (the random chase's hops: ~259 cycles near, 440 and more far on the H100, 2026-11-21). Measured
line by line, each line's latency is one number, the lines fall in tiers, and each fact is a statistic
over them: the near (lowest) tier's median, the far (highest) tier's, the median and the 90th
percentile over lines; and each line's DRAM miss, grouped by the line's L2 tier. All are the GPU
model's (its L2, its crossbar, its memory and clocks): record mode files them per GPU model.

The other facts of the family (l1_hit_latency_cycles, dram_latency_cycles, the per-hop percentiles, the
capacity knees) stay tests of test_memory_hierarchy.py: their footprints come from the sizes the
device reports (memory_levels.footprint), which a spec's launch, declared before any device is
known, cannot take."""

import memory_levels as ml

from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.region_rules import Region

ARCH = "sm_90"
GPU = "gpu"
#: kernels/global_chase.cu CACHE=1's load on sm_80 .. sm_90 (specs.CHASE_CACHE["cg"])
CG_LOAD = "LDG.E.64.STRONG.GPU"
#: dependent hops per launch of the L2-hit chase: 256 hits of 260-520 cycles, 70-140 us per launch
LINE_CHASE_UNROLL = 256


#: device id -> the L2_SPREAD_BYTES buffer every one-line chase runs in, kept for the session: line k is
#: then the same physical line in its L2-hit and its DRAM-miss readings (a fresh allocation per
#: measurement could land elsewhere), so each DRAM miss is grouped by its own line's L2 tier
_SPREAD: dict = {}


def spread_buffer(cp):
    """The session's L2_SPREAD_BYTES buffer (64-bit words) on the current device."""
    device = cp.cuda.runtime.getDevice()
    if device not in _SPREAD:
        _SPREAD[device] = cp.zeros(ml.L2_SPREAD_BYTES // 8, dtype=cp.uint64)
    return _SPREAD[device]


def line_chase(line: int, miss: bool = False) -> KernelSpec:
    """The chase that stays on line ``line`` of memory_levels.l2_line_offsets() (in the session's
    spread buffer): LINE_CHASE_UNROLL dependent ld.global.cg of it, one warm hop first (an L2 hit
    each); or (``miss``) one ld.global.cg of it after a warm load and discard.global.L2 (a DRAM miss,
    the page's translation cached). The line is the argument: one build for every line."""
    import numpy as np
    offset = ml.l2_line_offsets()[line]

    def args(cp):
        words = spread_buffer(cp)
        address = words.data.ptr + offset
        words[offset // 8] = np.uint64(address)  # the line holds its own address
        cursor = cp.zeros(2, dtype=cp.uint64)
        cursor[0] = np.uint64(address)
        cp.cuda.runtime.deviceSynchronize()
        return words[offset // 8:], cursor, np.int32(1)

    defines = {"CACHE": 1, "UNROLL": 1, "DISCARD": 1} if miss else {"CACHE": 1, "UNROLL": LINE_CHASE_UNROLL}
    return KernelSpec("global_chase.cu", "global_chase", defines, grid=1, block=32, args=args)


def _hit(line: int, miss: bool = False) -> KernelSpec:
    return line_chase(line, miss)


def _miss(line: int, miss: bool = True) -> KernelSpec:
    return line_chase(line, miss)


#: the one-line chase's L2 hit facts: name -> (Statistic.lines, what is taken)
L2_HIT_FACTS = {
    "l2_hit_latency_near_cycles": ("near_tier", f"the lowest tier (lines within {ml.TIER_BAND:.0%} of the fastest)"),
    "l2_hit_latency_far_cycles": ("far_tier", "the highest tier (the lines above the widest relative gap "
                                              "between the lines' latencies)"),
    "l2_hit_latency_median_cycles": ("all_lines", "every line"),
    "l2_hit_latency_p90_cycles": ("p90_over_lines", "every line, the 90th percentile"),
}
#: the DRAM miss facts: name -> (Statistic.lines, the L2 tier whose lines are taken)
DRAM_FACTS = {
    "dram_latency_near_cycles": ("dram_near_tier", "near"),
    "dram_latency_far_cycles": ("dram_far_tier", "far"),
}
BATCHES_TEXT = f"its median in each of {ml.NEAR_BATCHES} interleaved batches of those lines, the median of those"


def _facts() -> list[FactSpec]:
    chase = Region((CG_LOAD,), steps="UNROLL")
    out = [FactSpec(
        name, _hit, chase, scope=GPU, statistic=Statistic(lines=kind),
        method=f"ld.global.cg chase {ml.CHASE_LINE_TEXT}: {LINE_CHASE_UNROLL} dependent hits per launch "
               f"after one warm hop, cycles per hop, each line's median over launches; {what}, "
               + ("the value of each batch" if kind == "p90_over_lines" else BATCHES_TEXT))
        for name, (kind, what) in L2_HIT_FACTS.items()]
    out += [FactSpec(
        name, _miss, chase, scope=GPU, statistic=Statistic(lines=kind),
        method=f"one ld.global.cg {ml.CHASE_LINE_TEXT}, after a warm load and discard.global.L2 of it (a "
               f"DRAM miss, its page's translation cached), each line's median over launches, refused unless "
               f"{ml.COLD_MIN_RATIO} x its L2 hit (cold); the lines of the {tier} L2 tier (the one-line chase's "
               f"hits, as l2_hit_latency_{tier}_cycles), " + BATCHES_TEXT)
        for name, (kind, tier) in DRAM_FACTS.items()]
    return out


FACTS: list[FactSpec] = _facts()
