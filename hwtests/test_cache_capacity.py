"""sm_90 cache capacities by latency-vs-footprint sweeps (hwtests/specs_caches.py has the launches and
how a sweep is read; its ``L1_FACTS`` and ``CONST_FACTS`` declare the capacities as sweep specs, the two
constant facts read from one sweep):

* ``l1_capacity_kib_<carve-out>``: the L1 data cache's capacity at shared-memory carve-outs 0, 100 and
  228 KiB (ld.global.ca chase, one node per 128-byte line); the carve-out the driver took is checked
  on the GPU (the function's attributes read back, the occupancy the launch's shared memory allows)
  and goes to the report with the sweep;
* ``const_l1_capacity_bytes``, ``const_l15_capacity_bytes``: the constant cache's first level and the
  capacity of the level behind it where the 64 KiB bank reaches past it (it skips, saying so, where it
  does not); that level's latency is test_dpx_atomics_const.py's ``const_l15_hit_latency_cycles``;
* ``tlb_no_step_to_half_memory_stride<s>m``: a chase with one node per 2 MiB (32 MiB) keeps one
  latency from a few pages to half the free memory: no TLB level's reach ends within it (a condition:
  on the H100 no step showed up to 40 GiB, so there is no reach to record, only its lower bound);
* ``tlb_no_step_to_16g_2m_pages_out_of_order``: the same over 2 MiB pages mapped out of physical order
  (pytest_gpuprops/vmm.py), so no translation covers two of them: 2 MiB is the smallest page device memory
  can be mapped with on sm_90 (the allocation granularity), and no TLB level's reach in such pages ends
  within 16 GiB.

Each fact's value is the sweep's reach, quantised to its grid; the sweep (footprint -> cycles per hop),
the plateaus and the step go to the JSON report (the measurement's ``launch``) and a plot. A failing
value is confirmed by fresh sweeps, as every fact is, and so is a sweep that cannot be read. The sweeps'
builds are checked without a GPU by test_static_cache_capacity.py.
"""

from __future__ import annotations

import fact_tests
import pytest
import specs_caches as sc
from sweeps import TLB_SWEEP, sweep

KIB, MIB = sc.KIB, sc.MIB
# ----------------------------------------------------------------------------------------------
# L1 per carve-out


@pytest.mark.gpu
@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.sweep_params(sc.L1_FACTS))
def test_l1_capacity_per_carveout(gpuprops, fact, benchmark):
    fact_tests.measure_sweep_and_check(gpuprops, fact, benchmark)


# ----------------------------------------------------------------------------------------------
# the constant cache


@pytest.mark.gpu
@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.sweep_params(sc.CONST_FACTS))
def test_constant_cache_levels(gpuprops, fact, benchmark):
    fact_tests.measure_sweep_and_check(gpuprops, fact, benchmark)


# ----------------------------------------------------------------------------------------------
# TLB reach


@pytest.fixture(scope="module")
def tlb_buffer(gpu):  # pragma: no cover  (GPU only)
    """One buffer for every TLB sweep point: at most half the free memory (cudaMemGetInfo)."""
    import cupy
    with cupy.cuda.Device(gpu.index):
        free, total = cupy.cuda.runtime.memGetInfo()
        nbytes = sc.tlb_buffer_bytes(free)
        buf = cupy.empty(nbytes // 8, dtype=cupy.uint64)
        yield buf, free, total
        del buf
        cupy.get_default_memory_pool().free_all_blocks()


def tlb_sweep(gpuprops, buffer, stride: int):  # pragma: no cover  (GPU only)
    """A fresh TLB sweep at ``stride`` over ``buffer`` (each judgement of the condition sweeps anew)."""
    words = buffer[0]
    points = sweep(gpuprops, f"TLB chase stride {stride >> 20} MiB", lambda f: sc.tlb_chase(f, stride, buffer=words),
                   sc.tlb_footprints(stride, words.size * 8), stop=TLB_SWEEP)
    for f, c in points:
        gpuprops.plot_point(f"tlb_stride{stride >> 20}m", footprint_mib=f / MIB, cycles=c)
    return points


def tlb_chase_text(stride: int) -> str:
    return (
        f"ld.global.cg chase (l1_capacity_chase.cu CACHE=1) over blocks {stride >> 20} MiB apart, one random cycle, "
        f"one warp, {sc.CAP_UNROLL} timed hops after one untimed walk over the cycle; page i's first node "
        f"(i x {sc.TLB_SKEW}) mod {min(stride, sc.TLB_PAGE) >> 20} MiB into it (off one L2 set); where the pages "
        f"are fewer than {sc.TLB_MIN_NODES}, several nodes a page, spread over its first "
        f"{min(stride, sc.TLB_PAGE) >> 20} MiB, so the hops average over {sc.TLB_MIN_NODES} L2 lines or more; "
        f"footprints {sc.TLB_STRIDES[stride][1]} per octave from {sc.TLB_STRIDES[stride][0] >> 20} MiB")


TLB_HOLDS = (f"holds where the sweep has no step (plateaus within {sc.PLATEAU_BAND:.0%}, steps over {sc.STEP_RISE:.0%}): "
             "no TLB level's reach ends within it")


@pytest.mark.gpu
@pytest.mark.fact(lambda name: name)
@pytest.mark.parametrize("name", list(sc.TLB_FACTS))
def test_tlb_reach(gpuprops, tlb_buffer, name):
    stride = sc.TLB_FACTS[name]
    gpuprops.check_condition(name, lambda: sc.tlb_flat(tlb_sweep(gpuprops, tlb_buffer, stride)),
                             source=("measured on NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, 2026-11-26, unit "
                                     "GPU-2bbcd972: 276.2 .. 279.4 cycles a hop from 4 MiB (64 MiB) to 40256 MiB"),
                             method=(f"{tlb_chase_text(stride)} to half the free memory (cudaMemGetInfo; at most "
                                     f"{sc.TLB_MAX_BYTES >> 30} GiB); {TLB_HOLDS}"))


@pytest.mark.gpu
@pytest.mark.fact(sc.TLB_OUT_OF_ORDER_FACT)
def test_tlb_reach_over_pages_out_of_physical_order(gpuprops, gpu):  # pragma: no cover  (GPU only)
    """cudaMalloc's pages are physically in order, which an MMU may cover with one translation; these are
    mapped so that no two neighbours are (pytest_gpuprops/vmm.py), so the sweep reads the reach of 2 MiB
    translations. Its buffer is allocated inside the check, so a confirmation sweeps a fresh mapping."""
    import cupy

    from pytest_gpuprops import vmm
    name, stride = gpuprops.fact_name, 2 * MIB

    def judge():
        with cupy.cuda.Device(gpu.index):
            free, _ = cupy.cuda.runtime.memGetInfo()
            nbytes = min(sc.TLB_OUT_OF_ORDER_BYTES, free // 2) // stride * stride
            pages = vmm.PagesOutOfOrder(cupy, gpu.index, nbytes)
            with pages as words:
                if pages.page != stride:
                    return False, f"the allocation granularity is {pages.page} bytes, not 2 MiB: this condition is sm_90's"
                points = sweep(gpuprops, "TLB chase, pages out of order", lambda f: sc.tlb_chase(f, stride, buffer=words),
                               sc.tlb_footprints(stride, nbytes), stop=TLB_SWEEP)
            for f, c in points:
                gpuprops.plot_point("tlb_pages_out_of_order", footprint_mib=f / MIB, cycles=c)
            return sc.tlb_flat(points)
    gpuprops.check_condition(name, judge, source=(
        "measured on NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, 2026-11-27, unit GPU-6e1f9a28: 284 .. 298 "
        "cycles a hop from 4 MiB to 16384 MiB, as over cudaMalloc's buffer and over the same pages mapped in order"),
        method=(f"{tlb_chase_text(stride)} to {sc.TLB_OUT_OF_ORDER_BYTES >> 30} GiB (at most half the free memory), "
                "over 2 MiB pages of cuMemCreate mapped with cuMemMap so that virtual page i is physical page i x p mod n "
                "(p coprime to n, near n / 1.618: no two neighbours physically adjacent); " + TLB_HOLDS))
