"""Clean timed regions: the invariant fails on planted kernels that break it, and the timing patch
(both clock reads wait on every scoreboard) is what makes the fact kernels pass it."""

from pathlib import Path

import pytest
from gp_testing import KERNELS

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.measure import KernelSpec, UncleanRegion, build_for_timing

PLANTED = Path(__file__).parent / "planted"
ARCHES = ["sm_80", "sm_86", "sm_90"]


def _cubin(path, arch, cache_dir, **defines):
    c = compile_cuda(path, arch, defines, cache_dir=cache_dir, include_dirs=[KERNELS])
    return sass.Cubin(c.cubin, arch, name=path.name)


@pytest.mark.parametrize("arch", ARCHES)
def test_a_load_landing_in_the_region_is_found_and_the_start_wait_removes_it(arch, cache_dir):
    cubin = _cubin(PLANTED / "dirty_start.cu", arch, cache_dir)
    ins = cubin.instructions("dirty_start")
    start, region, stop = sass.timed_region(ins)
    # as compiled, the first FFMA waits on the LDG's scoreboard: the hazard is named
    problems = sass.region_hazards(ins)
    assert len(problems) == 1 and "set before the start clock read by" in problems[0] and "LDG" in problems[0]
    first_wait = next(b for b in range(6) if region[0].control.wait_mask >> b & 1)
    assert f"scoreboard {first_wait}," in problems[0]
    # the old mechanism (only the stop read waits) leaves it
    stop_only = sass.patch(cubin, "dirty_start", [sass.Edit(stop.offset, wait_mask=0x3F)])
    assert sass.region_hazards(stop_only.instructions) == problems
    # the timing patch removes it, and a launch build passes
    _, patched = build_for_timing(cubin, KernelSpec("dirty_start.cu", "dirty_start", region={"FFMA": 16}))
    assert sass.region_hazards(patched) == []


@pytest.mark.parametrize("arch", ARCHES)
def test_a_result_the_stop_read_does_not_wait_for_is_found(arch, build):
    cubin = build("smem_latency_ld.cu", arch, UNROLL=4)
    ins = cubin.instructions("smem_latency_ld")
    start, region, stop = sass.timed_region(ins)
    last_lds = [i for i in region if i.base_opcode == "LDS"][-1]
    # the stop read made to wait on nothing: the last LDS's result may land after the region
    unwaited = sass.patch(cubin, "smem_latency_ld", [sass.Edit(start.offset, wait_mask=0x3F),
                                                     sass.Edit(stop.offset, wait_mask=0)])
    problems = sass.region_hazards(unwaited.instructions)
    assert any("stop clock read does not wait" in p and f"/*{last_lds.offset:04x}*/" in p for p in problems), problems


@pytest.mark.parametrize("arch", ARCHES)
def test_a_memory_access_the_fact_does_not_intend_is_refused(arch, cache_dir):
    cubin = _cubin(PLANTED / "load_inside.cu", arch, cache_dir)
    with pytest.raises(UncleanRegion, match=r"memory accesses the fact does not intend: (LDC.64, )?LDG"):
        build_for_timing(cubin, KernelSpec("load_inside.cu", "load_inside", region={"FFMA": 16}))


@pytest.mark.parametrize("arch", ARCHES)
def test_a_region_with_the_wrong_count_is_refused(arch, build):
    cubin = build("ffma.cu", arch, ILP=1, UNROLL=8)
    with pytest.raises(UncleanRegion, match=r"FFMA: 8 in the region, intended 9"):
        build_for_timing(cubin, KernelSpec("ffma.cu", "ffma", {"ILP": 1, "UNROLL": 8}, region={"FFMA": 9}))


def test_the_fact_kernels_had_the_hazard_before_the_start_wait(build):
    """The issue's finding, kept as a regression: ffma.cu on sm_90 as compiled times its input LDG."""
    ins = build("ffma.cu", "sm_90", ILP=1, UNROLL=256).instructions("ffma")
    assert any("LDG" in p for p in sass.region_hazards(ins))


def test_a_timing_patch_that_leaves_a_hazard_is_refused_with_every_hazard_named(cache_dir, monkeypatch):
    """The check after the timing patch is the guard on the patch itself: were the clock edits to
    make only the stop read wait (the old mechanism), the LDG landing in the region is refused, not
    timed."""
    cubin = _cubin(PLANTED / "dirty_start.cu", "sm_90", cache_dir)
    ins = cubin.instructions("dirty_start")
    _, _, stop = sass.timed_region(ins)
    monkeypatch.setattr(sass, "timing_edits", lambda instrs: [sass.Edit(stop.offset, wait_mask=0x3F)])
    hazards = sass.region_hazards(sass.patch(cubin, "dirty_start", [sass.Edit(stop.offset, wait_mask=0x3F)]).instructions)
    assert len(hazards) == 1 and "LDG" in hazards[0]
    with pytest.raises(UncleanRegion) as refused:
        build_for_timing(cubin, KernelSpec("dirty_start.cu", "dirty_start"))
    assert str(refused.value) == ("dirty_start (dirty_start.cu): the timed region is not clean after the timing "
                                  "patch:\n  " + hazards[0])
