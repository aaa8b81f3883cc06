"""The sass package's timed regions (sass/region.py): the rules on hand-made instruction lists,
planted kernels that break the clean-region invariant, and the timing patch (both clock reads wait
on every scoreboard) that makes the fact kernels pass it."""

from pathlib import Path

import pytest
from gp_testing import KERNELS

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.sass import ControlCode, Edit, Instruction
from pytest_gpuprops.timing import UncleanRegion, build_for_timing

# ----------------------------------------------------------------------------------------------
# the two clock reads


def test_timed_region_needs_exactly_two_clock_reads(build):
    ins = build("clock_overhead.cu", "sm_90").instructions("clock_overhead")
    start, between, stop = sass.timed_region(ins)
    assert between == [] and "SR_CLOCKLO" in start.text  # two back-to-back reads: nothing between
    with pytest.raises(sass.SassError, match="exactly 2 clock reads"):
        sass.timed_region([i for i in ins if i is not stop])


# ----------------------------------------------------------------------------------------------
# timed regions on hand-made instruction lists

Y = ControlCode(1, True, None, None, 0, 0)


def ins(offset, text, *, sets_w=None, sets_r=None, waits=0):
    return Instruction(offset, text, 0, ControlCode(1, False, sets_w, sets_r, waits, 0).apply(0))


def program(*body, start_waits=0, stop_waits=0, before=(), after=()):
    """before..., start clock read, body..., stop clock read, after...: offsets 0x10 apart."""
    seq = [*before, ("CS2R R2, SR_CLOCKLO", dict(waits=start_waits)), *body,
           ("CS2R R4, SR_CLOCKLO", dict(waits=stop_waits)), *after]
    return [ins(16 * n, text, **kw) for n, (text, kw) in enumerate(seq)]


def test_timed_region_by_hand():
    p = program(("FFMA R1, R1, R1, R1", {}), ("S2R R9, SR_CLOCKHI", {}), ("NOP", {}))
    start, region, stop = sass.timed_region(p)
    assert (start.offset, stop.offset) == (0, 0x40) and [i.offset for i in region] == [0x10, 0x20, 0x30]
    assert [i.text for i in sass.clock_reads(p)] == ["CS2R R2, SR_CLOCKLO", "S2R R9, SR_CLOCKHI", "CS2R R4, SR_CLOCKLO"]
    with pytest.raises(sass.SassError, match="found 3: CS2R R2, SR_CLOCKLO; CS2R R4, SR_CLOCKLO; CS2R R6, "):
        sass.timed_region(p + [ins(0x50, "CS2R R6, SR_CLOCKLO")])
    with pytest.raises(sass.SassError, match="found 0"):
        sass.timed_region([ins(0, "NOP")])


def test_a_load_before_the_start_that_the_region_waits_on_is_a_hazard():
    p = program(("FFMA R1, R7, R7, R1", dict(waits=0b100)), before=[("LDG.E R7, [R2]", dict(sets_w=2))])
    (problem,) = sass.region_hazards(p)
    assert problem == ("/*0020*/ FFMA R1, R7, R7, R1 waits on scoreboard 2, set before the start clock read by "
                       "/*0000*/ LDG.E R7, [R2]: its latency lands in the region")
    # the start read waiting on it, or an earlier wait, clears it
    assert sass.region_hazards(program(("FFMA R1, R7, R7, R1", dict(waits=0b100)), start_waits=0b100,
                                       before=[("LDG.E R7, [R2]", dict(sets_w=2))])) == []
    assert sass.region_hazards(program(("FFMA R1, R7, R7, R1", dict(waits=0b100)),
                                       before=[("LDG.E R7, [R2]", dict(sets_w=2)),
                                               ("IADD3 R3, R7, 1", dict(waits=0b100))])) == []
    # a read scoreboard counts like a write scoreboard; the last setter is named
    p = program(("STS [R1], R8", dict(waits=0b1)),
                before=[("STS [R0], R8", dict(sets_r=0)), ("STS [R0+4], R8", dict(sets_r=0))])
    (problem,) = sass.region_hazards(p)
    assert "scoreboard 0," in problem and "by /*0010*/ STS [R0+4], R8" in problem


def test_only_the_first_wait_inside_the_region_is_reported():
    p = program(("FFMA R1, R7, R7, R1", dict(waits=0b100)), ("FFMA R2, R7, R7, R2", dict(waits=0b100)),
                before=[("LDG.E R7, [R2]", dict(sets_w=2))])
    assert len(sass.region_hazards(p)) == 1


def test_a_scoreboard_set_in_the_region_and_waited_there_is_no_hazard_at_either_end():
    p = program(("LDS R1, [R0]", dict(sets_w=1)), ("FFMA R2, R1, R1, R2", dict(waits=0b10)),
                before=[("LDG.E R7, [R2]", dict(sets_w=1))])
    # the region sets 1 itself before waiting on it: the earlier LDG's latency is not what it waits for
    assert sass.region_hazards(p) == []


def test_the_stop_read_must_wait_on_what_the_region_left_pending():
    p = program(("LDS R1, [R0]", dict(sets_w=1)), ("LDS R3, [R0]", dict(sets_w=4)))
    assert sass.region_hazards(p) == [
        "the stop clock read does not wait on scoreboard 1, set inside the region by /*0010*/ LDS R1, [R0]: "
        "its result may land after the region ends",
        "the stop clock read does not wait on scoreboard 4, set inside the region by /*0020*/ LDS R3, [R0]: "
        "its result may land after the region ends"]
    ok = program(("LDS R1, [R0]", dict(sets_w=1)), ("LDS R3, [R0]", dict(sets_w=4)), stop_waits=0b10010)
    assert sass.region_hazards(ok) == []
    half = program(("LDS R1, [R0]", dict(sets_w=1)), ("LDS R3, [R0]", dict(sets_w=4)), stop_waits=0b10)
    assert len(sass.region_hazards(half)) == 1 and "scoreboard 4" in sass.region_hazards(half)[0]


def test_timing_edits_wait_on_everything_at_both_reads():
    p = program(("FFMA R1, R1, R1, R1", {}), before=[("NOP", {})])
    assert sass.timing_edits(p) == [Edit(0x10, wait_mask=0x3F), Edit(0x30, wait_mask=0x3F)]


def test_free_scoreboard_by_hand():
    p = program(("STS [R0], R1", dict(sets_r=0)), ("STS [R0+4], R1", dict(sets_r=0)),
                before=[("LDG R1, [R2]", dict(sets_w=1)), ("LDS R1, [R2]", dict(sets_r=2, waits=0b1000))])
    sts = [i for i in p if i.base_opcode == "STS"]
    assert sass.free_scoreboard(p, sts) == 0           # scoreboard 0 is only the chain's own
    assert sass.free_scoreboard(p) == 4                # 0, 1, 2 set and 3 waited on
    # every scoreboard used somewhere: fall back to one that nothing else inside the region uses
    busy = program(("STS [R0], R1", dict(sets_r=0)), ("FFMA R1, R1, R1, R1", dict(sets_w=1)),
                   before=[("X", dict(sets_w=b)) for b in range(6)])
    assert sass.free_scoreboard(busy, [busy[7]]) == 0 and sass.free_scoreboard(busy) == 2
    full = program(*[("X", dict(sets_w=b)) for b in range(6)])
    with pytest.raises(sass.PatchRefused, match="every scoreboard 0..5 is used in the timed region"):
        sass.free_scoreboard(full)


def test_chain_on_read_scoreboard_by_hand():
    p = program(("STS [R0], R1", {}), ("FFMA R1, R1, R1, R1", {}), ("STS [R0+4], R1", {}), ("STS.64 [R0+8], R2", {}),
                before=[("STS [R9], R9", dict(sets_r=0))], after=[("STS [R9], R9", dict(sets_r=1))])
    assert sass.chain_on_read_scoreboard(p, "STS") == [Edit(0x20, read_barrier=2, wait_mask=0),
                                                      Edit(0x40, read_barrier=2, wait_mask=0b100),
                                                      Edit(0x50, read_barrier=2, wait_mask=0b100)]
    both = sass.chain_on_read_scoreboard(p, ("STS", "FFMA"))
    assert [e.offset for e in both] == [0x20, 0x30, 0x40, 0x50]
    with pytest.raises(sass.PatchRefused, match="no LDS/LDSM in the timed region to chain"):
        sass.chain_on_read_scoreboard(p, ("LDS", "LDSM"))


def test_ffma_edits_and_destinations_by_hand():
    p = program(("FFMA R10, R1, R2, R10", {}), ("IADD3 R3, R3, 1, RZ", {}), ("FFMA R12, R1, R2, R12", {}),
                before=[("FFMA R99, R1, R1, R1", {})], after=[("FFMA R98, R1, R1, R1", {})])
    assert sass.ffma_destinations(p) == {10, 12}
    assert sass.ffma_operand_edits(p, 8, 9, 16, 0b11) == [
        Edit(0x20, regs=(None, 8, 9, 16), reuse=0b11, stall=1, yield_flag=False),
        Edit(0x40, regs=(None, 8, 9, 16), reuse=0b11, stall=1, yield_flag=False)]
    assert sass.ffma_operand_edits(p, 8, 9, 16, 0, stall=4)[0].stall == 4


def test_region_opcodes_leave_padding_out():
    p = program(("FFMA R1, R1, R1, R1", {}), ("NOP", {}), ("@!PT LDS RZ, [RZ]", {}), ("@!UPT UMOV UR4, 0x1", {}),
                ("FFMA R2, R2, R2, R2", {}), ("@P0 FFMA.FTZ R3, R3, R3, R3", {}), ("@PT IADD3 R1, R1, 1, RZ", {}))
    assert sass.region_opcodes(p) == {"FFMA": 2, "FFMA.FTZ": 1, "IADD3": 1}
    assert sass.is_filler(p[2]) and sass.is_filler(p[3]) and sass.is_filler(p[4])
    assert not sass.is_filler(p[6]) and not sass.is_filler(p[7])


def test_region_mismatch_by_hand():
    p = program(("FFMA R1, R1, R1, R1", {}), ("FFMA R2, R2, R2, R2", {}), ("IADD3 R5, R5, 1, RZ", {}),
                ("ISETP.GE.AND P0, PT, R5, 8, PT", {}))
    assert sass.region_mismatch(p, {"FFMA": 2}, other_allowed=2) == []
    assert sass.region_mismatch(p, {"FFMA": 2}, other_allowed=1) == [
        "2 other instructions ({'IADD3': 1, 'ISETP.GE.AND': 1}); at most 1 intended"]
    assert sass.region_mismatch(p, {"FFMA": 3, "HMMA.16816.F32": 1}, other_allowed=2) == [
        "FFMA: 2 in the region, intended 3", "HMMA.16816.F32: 0 in the region, intended 1"]
    mem = program(("FFMA R1, R1, R1, R1", {}), ("LDG.E R2, [R4]", {}), ("STS [R0], R1", {}), ("ATOMS.ADD [R0], R1", {}))
    assert sass.region_mismatch(mem, {"FFMA": 1}, other_allowed=5) == [
        "memory accesses the fact does not intend: ATOMS.ADD, LDG.E, STS"]
    assert sass.region_mismatch(mem, {"FFMA": 1, "LDG.E": 1, "STS": 1, "ATOMS.ADD": 1}) == []


def test_a_chain_keeps_the_scoreboard_it_already_uses():
    # the STSs already chain on scoreboard 0 and nothing else uses it: it stays theirs
    p = program(("STS [R0], R1", dict(sets_r=0)), ("STS [R0+4], R1", dict(sets_r=0, waits=0b1)),
                before=[("LDG R1, [R2]", dict(sets_w=1))])
    assert [e.read_barrier for e in sass.chain_on_read_scoreboard(p, "STS")] == [0, 0]


def test_free_scoreboard_message_exactly():
    with pytest.raises(sass.PatchRefused, match="^every scoreboard 0..5 is used in the timed region; none is free to "
                                                "chain instructions on$"):
        sass.free_scoreboard(program(*[("X", dict(sets_w=b)) for b in range(6)]))


def test_a_scoreboard_the_start_read_itself_sets_is_not_a_leak():
    # a start read that sets scoreboard 3 (an S2UR-style read), waited on inside the region: that wait
    # is for the clock read, not for anything issued before it
    seq = [ins(0, "LDG R7, [R2]", sets_w=2), ins(16, "S2UR UR4, SR_CLOCKLO", sets_w=3, waits=0b100),
           ins(32, "IADD3 R1, UR4, 1, RZ", waits=0b1000), ins(48, "CS2R R4, SR_CLOCKLO")]
    assert sass.region_hazards(seq) == []


def test_region_mismatch_defaults_to_no_other_instructions_and_intended_zero_counts():
    p = program(("FFMA R1, R1, R1, R1", {}), ("IADD3 R5, R5, 1, RZ", {}))
    assert sass.region_mismatch(p, {"FFMA": 1}) == ["1 other instructions ({'IADD3': 1}); at most 0 intended"]
    assert sass.region_mismatch(p, {"FFMA": 1, "IADD3": 1, "LDG.E": 0}) == []


# ----------------------------------------------------------------------------------------------
# planted kernels, and the timing patch that cleans the fact kernels


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
