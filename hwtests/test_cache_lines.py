"""sm_90's sectors and lines (hwtests/specs_lines.py has the launches, the method and how a sweep is read):

* ``l1_sector_bytes``: the bytes one 8-byte ld.global.ca brings into L1 (a chase in pairs of loads in one
  line, the second's offset swept);
* ``l2_dram_fill_bytes``: the bytes one 8-byte ld.global.cg's DRAM miss brings into L2 (the same in L2);
* ``l1_line_bytes``: the L1's allocation unit (its capacity against the nodes' stride).

Each value is read from a sweep, quantised to its grid; the sweep goes to the JSON report (the
measurement's ``launch``) and a plot. A failing value is confirmed by fresh sweeps, as every fact is.
The builds are checked without a GPU by test_static_cache_capacity.py."""

from __future__ import annotations

import pytest
import specs_lines as sl
from sweeps import SWEEP, given, plateau_dicts, read_sweep, sweep

from pytest_gpuprops import facts as gp_facts

pytestmark = pytest.mark.gpu
KIB = sl.KIB
#: what one DRAM miss fills is the GPU model's memory system's (its L2 and memory controllers): record mode
#: files it under the GPU's section; the L1's sector and line are the SM's
gp_facts.register_gpu_scoped("l2_dram_fill_bytes")


def measure_pairs(gpuprops, name: str):  # pragma: no cover  (GPU only)
    cache, footprint, warm = sl.PAIR_FACTS[name]
    points = [(d, gpuprops.measure(f"{name} pair chase, second load {d} B in", sl.pair_fact_chase(name, d),
                                   divisor=sl.PAIR_UNROLL, stop=SWEEP).median) for d in sl.PAIR_OFFSETS]
    for d, c in points:
        gpuprops.plot_point(name, offset=d, cycles=c)
    value, info = read_sweep(sl.first_missed_offset, points, name)
    m = given(name, [float(value)], "bytes", sl.pair_fact_chase(name, sl.PAIR_OFFSETS[0]),
              dict(info, plateaus=plateau_dicts(points), footprint=footprint, warm=warm),
              gpuprops.runner.session_sm_clock_mhz(), noise_target=0.0)
    m.remeasure = lambda: measure_pairs(gpuprops, name)
    return m


PAIR_METHOD = {
    "l1_sector_bytes": (f"ld.global.ca pointer chase (global_chase.cu CACHE=0) in pairs over {sl.PAIR_L1_FOOTPRINT // 2**20} "
                        "MiB of 128-byte lines, read once on the host side first (every line in L2, none in L1)"),
    "l2_dram_fill_bytes": (f"ld.global.cg pointer chase (global_chase.cu CACHE=1) in pairs over "
                           f"{sl.PAIR_DRAM_FOOTPRINT // 2**20} MiB of 128-byte lines, then as many bytes of other "
                           "writes (no line in L2)"),
}


@pytest.mark.fact(lambda name: name)
@pytest.mark.parametrize("name", list(sl.PAIR_FACTS))
def test_bytes_one_load_brings(gpuprops, name):
    gpuprops.fact(name)  # a fact this GPU has no value for skips here, before the sweep
    m = measure_pairs(gpuprops, name)
    gpuprops.check(name, m, method=(
        f"{PAIR_METHOD[name]}: the lines in one random cycle, each visited at its first word and then at the word "
        f"d bytes in; one warp, {sl.PAIR_UNROLL} timed hops a launch, launches going on through the cycle; cycles a "
        f"hop for d in {', '.join(map(str, sl.PAIR_OFFSETS))}; the value is the first d that reads over the midpoint of "
        f"the smallest d's level and the sweep's top (at least {sl.PAIR_MISS_RISE} x it), {sl.LINE} where every d "
        f"reads within {sl.sc.PLATEAU_BAND:.0%} of the smallest's"))


def measure_line(gpuprops):  # pragma: no cover  (GPU only)
    knees, sweeps = {}, {}
    for stride in sl.LINE_STRIDES:
        points = sweep(gpuprops, f"L1 capacity chase, a node every {stride} B", lambda f, s=stride: sl.line_chase(s, f),
                       sl.LINE_FOOTPRINTS)
        for f, c in points:
            gpuprops.plot_point(sl.LINE_FACT, stride=stride, footprint_kib=f / KIB, cycles=c)
        knees[stride] = read_sweep(sl.sc.l1_capacity, points, f"{sl.LINE_FACT} at stride {stride}").reach
        sweeps[str(stride)] = {f"{f / KIB:g}": round(c, 2) for f, c in points}
    value = read_sweep(lambda _: sl.line_bytes(knees), None, sl.LINE_FACT)
    m = given(sl.LINE_FACT, [float(value)], "bytes", sl.line_chase(sl.LINE_STRIDES[0], sl.LINE_FOOTPRINTS[-1]),
              dict(capacity_kib={str(s): k / KIB for s, k in knees.items()}, sweep_kib=sweeps,
                   carveout=sl.LINE_CARVEOUT.name), gpuprops.runner.session_sm_clock_mhz(), noise_target=0.0)
    m.remeasure = lambda: measure_line(gpuprops)
    return m


@pytest.mark.fact(sl.LINE_FACT)
def test_l1_line_bytes(gpuprops):
    gpuprops.fact(sl.LINE_FACT)
    m = measure_line(gpuprops)
    c = sl.LINE_CARVEOUT
    gpuprops.check(sl.LINE_FACT, m, method=(
        f"ld.global.ca capacity chase (l1_capacity_chase.cu CACHE=0), one 8-byte node every s bytes for s in "
        f"{', '.join(map(str, sl.LINE_STRIDES))}, one random cycle, one warp, {sl.sc.CAP_UNROLL} timed hops after one "
        f"untimed walk; {c.shared_mem // KIB} KiB of dynamic shared memory, carve-out hint {c.hint} %; footprints "
        f"4 .. {sl.LINE_FOOTPRINTS[-1] // KIB} KiB (2 KiB steps from 12); each stride's capacity the last footprint of "
        f"its L1-hit plateau; the value is the largest stride whose capacity is the densest stride's (within "
        f"{sl.LINE_GRID // KIB} KiB), the next stride's being twice it"))
