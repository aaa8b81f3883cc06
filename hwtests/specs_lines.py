"""Sectors and lines of sm_90's caches: the launches and the pure functions that read them
(hwtests/test_cache_lines.py runs them; tests/test_cache_lines_method.py checks every function here
without a GPU).

* ``l1_sector_bytes``: how much of a line one 8-byte load brings into L1. A pointer chase in pairs
  (kernels/global_chase.cu CACHE=0, ld.global.ca): the cycle visits lines in a random order and in each
  line first the word at offset 0, then the word ``offset`` bytes in. The lines (PAIR_L1_FOOTPRINT) are
  many times the largest L1 and are read once on the host side first, so each pair's first load misses L1
  and hits L2; its second hits L1 where the first brought that byte in, else goes to L2 again. The
  cycles a hop, swept over the offset, step up at the first offset the first load did not bring: the
  sector's size (where no offset steps, the whole line came).
* ``l2_dram_fill_bytes``: the same in L2 from DRAM (CACHE=1, ld.global.cg): PAIR_DRAM_FOOTPRINT of lines,
  then that many bytes of other writes, so each pair's first load misses L2; its second hits L2 where
  the miss filled that byte, else misses too.
* ``l1_line_bytes``: the L1's allocation unit, from its capacity (l1_capacity_chase.cu, one 8-byte node
  every ``stride`` bytes, at the 228 KiB shared-memory carve-out): where nodes are closer than a line,
  a footprint fills whole lines and the capacity read in bytes is the L1's; where they are farther apart,
  each node holds a line of its own and the footprint that fits grows with the stride. The line is the
  largest stride whose capacity is the densest stride's, proven by the next stride's capacity being
  twice it (a set-indexing conflict could only lower that, never double it).

A pair sweep is one step from a hit level (:func:`first_missed_offset`); the line's sweeps are L1 capacity
sweeps (specs_caches.l1_capacity).
"""

from __future__ import annotations

import itertools
import statistics

import specs_caches as sc

from pytest_gpuprops.factspec import SweepSpec
from pytest_gpuprops.kernel_spec import KernelSpec

KIB, MIB, LINE = sc.KIB, sc.MIB, sc.LINE
#: the chases' timed hops per launch (128 pairs)
PAIR_UNROLL = sc.CAP_UNROLL
#: the second load's offsets into the line: 8 B apart up to 64, then 96 and 120 (the line's last word)
PAIR_OFFSETS = (8, 16, 24, 32, 40, 48, 56, 64, 96, 120)
#: the L1 pair chase's lines: 32 x the largest sm_90 L1 (256 KiB), a sixth of the smallest sm_90 L2 (50 MiB)
PAIR_L1_FOOTPRINT = 8 * MIB
#: the DRAM pair chase's lines, and the other writes after them: 8 x the largest sm_90 L2 (60 MiB, H200)
PAIR_DRAM_FOOTPRINT = 512 * MIB
#: a pair sweep steps where its second load stops hitting: a pair's hop from 164.6-181.4 to 282.8-327.6 cycles
#: in the L1 sweep (an L2 hit and an L1 hit, then two L2 hits), from 474.8-496.8 to 669.6-697.3 in the DRAM
#: one (four H100s, 2026-11-27: 1.4-1.9 x); a sweep whose top is not this far above its start never stepped
PAIR_MISS_RISE = 1.2
#: the line sweeps: strides (a node every stride bytes) and the footprints of each, at the 228 KiB carve-out
#: (L1 20 KiB on the H100, l1_capacity_kib_smem228), so that twice the L1 still lies in the window
LINE_STRIDES = (64, 128, 256)
LINE_CARVEOUT = sc.CARVEOUTS["smem228"]
LINE_FOOTPRINTS = tuple(k * KIB for k in (4, 8) + tuple(range(12, 81, 2)))
#: two capacities are one when they differ by at most a grid step (their reaches are quantised to it)
LINE_GRID = 2 * KIB

#: fact -> (the chase's CACHE define, footprint, warm): "l2" reads the lines once on the host side, "evict"
#: writes as many bytes of another buffer after laying them out
PAIR_FACTS = {"l1_sector_bytes": (0, PAIR_L1_FOOTPRINT, "l2"),
              "l2_dram_fill_bytes": (1, PAIR_DRAM_FOOTPRINT, "evict")}
LINE_FACT = "l1_line_bytes"
_PAIR_OPCODE = {0: "LDG.E.64.STRONG.SM", 1: "LDG.E.64.STRONG.GPU"}


def pair_offsets(n_lines: int, offset: int, seed: int = 0):
    """Byte offsets of the pair chase's nodes in visiting order (numpy int64): the lines in one random
    order, each visited at 0 then at ``offset``."""
    import numpy as np
    if n_lines < 2:
        raise ValueError(f"a pair chase needs at least 2 lines, not {n_lines}")
    if offset % 8 or not 8 <= offset < LINE:
        raise ValueError(f"offset {offset}: expected a multiple of 8 bytes in 8 .. {LINE - 8}, inside the line")
    lines = np.random.default_rng(seed).permutation(n_lines).astype(np.int64) * LINE
    return np.stack([lines, lines + offset], axis=1).reshape(-1)


def fill_pair_cycle(xp, words, base_address: int, n_lines: int, offset: int, seed: int = 0) -> int:
    """Lay :func:`pair_offsets` out as one cycle in ``words`` (64-bit words of array module ``xp`` at
    device address ``base_address``): each node holds the address of the node after it, the last the
    first's. Returns the first node's address."""
    import numpy as np
    if n_lines * LINE > words.size * 8:
        raise ValueError(f"{n_lines} lines need {n_lines * LINE} bytes; the buffer has {words.size * 8}")
    visit = pair_offsets(n_lines, offset, seed)
    nxt = (np.uint64(base_address) + np.roll(visit, -1).astype(np.uint64))
    words[xp.asarray(visit // 8)] = xp.asarray(nxt)
    return int(base_address + int(visit[0]))


def pair_chase(cache: int, footprint: int, offset: int, warm: str) -> KernelSpec:
    """global_chase.cu (CACHE ``cache``) over ``footprint`` bytes of lines in pairs (:func:`fill_pair_cycle`),
    warmed as PAIR_FACTS says; launches go on through the cycle (the kernel's cursor)."""
    if footprint % LINE:
        raise ValueError(f"footprint {footprint} is not whole {LINE}-byte lines")
    if warm not in ("l2", "evict"):
        raise ValueError(f"warm must be l2 or evict, not {warm!r}")
    n_lines = footprint // LINE

    def args(cp):  # pragma: no cover  (GPU only)
        chain = cp.zeros(footprint // 8, dtype=cp.uint64)
        cursor = cp.full(1, fill_pair_cycle(cp, chain, chain.data.ptr, n_lines, offset), dtype=cp.uint64)
        if warm == "l2":
            int(chain.sum())  # every line read once: in L2, not in L1, when the chase starts
        else:
            junk = cp.empty(footprint // 4, dtype=cp.uint32)
            junk.fill(1)  # as many bytes of other writes: the chain's lines leave L2
            del junk
        cp.cuda.runtime.deviceSynchronize()
        return chain, cursor, cp.int32(0)

    return KernelSpec("global_chase.cu", "global_chase", {"CACHE": cache, "UNROLL": PAIR_UNROLL}, grid=1, block=32,
                      args=args, region={_PAIR_OPCODE[cache]: PAIR_UNROLL})


def pair_fact_chase(name: str, offset: int) -> KernelSpec:
    cache, footprint, warm = PAIR_FACTS[name]
    return pair_chase(cache, footprint, offset, warm)


def line_chase(stride: int, footprint: int) -> KernelSpec:
    """The L1 capacity chase with a node every ``stride`` bytes, at LINE_CARVEOUT."""
    return sc.capacity_chase(0, footprint, stride, shared_mem=LINE_CARVEOUT.shared_mem, carveout=LINE_CARVEOUT.hint)


# ----------------------------------------------------------------------------------------------
# reading the sweeps


def first_missed_offset(points) -> tuple[int, dict]:
    """A pair sweep's (offset, cycles a hop) read: the first offset whose second load no longer hits,
    with what it was read from. The hit level is the smallest offset's (that word lies in whatever the
    first load brought); an offset misses where it reads over the midpoint of that level and the sweep's
    top. Where every offset is within PLATEAU_BAND of the hit level, the first load brought the whole
    line: LINE. Refused: a top above that band but under PAIR_MISS_RISE x the hit level (no hit turned
    into a miss, yet not flat), or a hit again after the first miss (not one step)."""
    pts = sc.check_sweep(points)
    hit, top = pts[0][1], max(c for _, c in pts)
    info = dict(hit_cycles=round(hit, 2), sweep={str(f): round(c, 2) for f, c in pts})
    if top <= (1 + sc.PLATEAU_BAND) * hit:
        return LINE, dict(info, step="none: every offset hit")
    if top < PAIR_MISS_RISE * hit:
        raise sc.SweepError(f"the sweep climbs from {hit:.1f} to {top:.1f} cycles a hop, under {PAIR_MISS_RISE} x: "
                            f"no second load went from a hit to a miss; {sc.table(pts)}")
    mid = (hit + top) / 2
    missed = [f for f, c in pts if c > mid]
    after = [f for f, _ in pts if f >= missed[0]]
    if missed != after:
        raise sc.SweepError(f"offsets hit again after the first miss at {missed[0]} B ({sorted(set(after) - set(missed))}): "
                            f"not one step; {sc.table(pts)}")
    return missed[0], dict(info, miss_cycles=round(statistics.median(c for f, c in pts if f in missed), 2))


def line_bytes(knees: dict[int, int], grid: int = LINE_GRID) -> int:
    """The L1 line from the capacities (bytes, each a sweep's reach) at each stride: the largest stride
    whose capacity is the densest stride's (within ``grid``), the next stride's being twice it. Refused:
    fewer than two strides, no stride past the line (every capacity one: the line is the largest stride
    or longer), a next capacity that is not twice (set conflicts or a stride that is no power of two)."""
    strides = sorted(knees)
    if len(strides) < 2:
        raise sc.SweepError(f"capacities at {strides}: at least two strides needed")
    base = knees[strides[0]]
    same = list(itertools.takewhile(lambda s: abs(knees[s] - base) <= grid, strides))
    line = same[-1]
    if line == strides[-1]:
        raise sc.SweepError(f"one capacity at every stride ({_knees_text(knees)}): the line is {line} B or longer; "
                            "add a longer stride")
    after = strides[strides.index(line) + 1]
    want = base * after // line
    if abs(knees[after] - want) > 2 * grid:
        raise sc.SweepError(f"at stride {after} the capacity is {knees[after]} B, not {want} B ({after} / {line} x "
                            f"{base}): {_knees_text(knees)}")
    return line


def _knees_text(knees: dict[int, int]) -> str:
    return ", ".join(f"stride {s} B: {k / KIB:g} KiB" for s, k in sorted(knees.items()))


def read_line(points) -> tuple[int, dict]:
    """The line sweeps' (``((stride, footprint), cycles)``) read: each stride's L1 capacity
    (specs_caches.l1_capacity), then :func:`line_bytes`; the capacities in KiB with it."""
    by_stride: dict[int, list] = {}
    for (stride, footprint), cycles in points:
        by_stride.setdefault(stride, []).append((footprint, cycles))
    knees = {}
    for stride, sweep in by_stride.items():
        try:
            knees[stride] = sc.l1_capacity(sweep).reach
        except sc.SweepError as exc:
            raise sc.SweepError(f"at stride {stride} B: {exc}") from exc
    return line_bytes(knees), {"capacity_kib": {str(s): k / KIB for s, k in sorted(knees.items())}}


# ----------------------------------------------------------------------------------------------
# the facts

_OFFSETS_TEXT = ", ".join(map(str, PAIR_OFFSETS))
_PAIR_READ_TEXT = (f"the lines in one random cycle, each visited at its first word and then at the word d bytes in; one "
                   f"warp, {PAIR_UNROLL} timed hops a launch, launches going on through the cycle; cycles a hop for d in "
                   f"{_OFFSETS_TEXT}; the value is the first d that reads over the midpoint of the smallest d's level "
                   f"and the sweep's top (at least {PAIR_MISS_RISE} x it), {LINE} where every d reads within "
                   f"{sc.PLATEAU_BAND:.0%} of the smallest's")
_PAIR_WHERE = {
    "l1_sector_bytes": (f"ld.global.ca pointer chase (global_chase.cu CACHE=0) in pairs over {PAIR_L1_FOOTPRINT >> 20} MiB "
                        "of 128-byte lines, read once on the host side first (every line in L2, none in L1)"),
    "l2_dram_fill_bytes": (f"ld.global.cg pointer chase (global_chase.cu CACHE=1) in pairs over {PAIR_DRAM_FOOTPRINT >> 20} "
                           "MiB of 128-byte lines, then as many bytes of other writes (no line in L2)"),
}
_LINE_METHOD = (
    f"ld.global.ca capacity chase (l1_capacity_chase.cu CACHE=0), one 8-byte node every s bytes for s in "
    f"{', '.join(map(str, LINE_STRIDES))}, one random cycle, one warp, {sc.CAP_UNROLL} timed hops after one untimed "
    f"walk; {LINE_CARVEOUT.shared_mem // KIB} KiB of dynamic shared memory, carve-out hint {LINE_CARVEOUT.hint} %; "
    f"footprints 4 .. {LINE_FOOTPRINTS[-1] // KIB} KiB (2 KiB steps from 12); each stride's capacity the last footprint "
    f"of its L1-hit plateau; the value is the largest stride whose capacity is the densest stride's (within "
    f"{LINE_GRID // KIB} KiB), the next stride's being twice it")

#: the sweeps' facts (hwtests/test_cache_lines.py tests them, tools/fact_specs.py lists them). What one DRAM
#: miss fills is the GPU model's memory system's (its L2 and memory controllers); the L1's sector and line the SM's
FACTS: list[SweepSpec] = [
    *(SweepSpec(name, lambda d, name=name: pair_fact_chase(name, d), PAIR_OFFSETS, first_missed_offset,
                method=f"{_PAIR_WHERE[name]}: {_PAIR_READ_TEXT}", unit="bytes", divisor=PAIR_UNROLL,
                scope="gpu" if name == "l2_dram_fill_bytes" else "arch", x_names=("offset",))
      for name in PAIR_FACTS),
    SweepSpec(LINE_FACT, lambda x: line_chase(*x), tuple((s, f) for s in LINE_STRIDES for f in LINE_FOOTPRINTS),
              read_line, method=_LINE_METHOD, unit="bytes", divisor=sc.CAP_UNROLL, x_names=("stride", "footprint")),
]

