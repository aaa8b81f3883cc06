"""The patcher: round trips checked by disassembly on five arches, and every refusal."""

import pytest
from gp_testing import PATCH_ARCHES

from pytest_gpuprops import sass


@pytest.fixture(params=PATCH_ARCHES)
def regbank(request, build):
    cubin = build("regbank_ffma.cu", request.param, NFFMA=8)
    ins = cubin.instructions("regbank_ffma")
    return cubin, ins, sass.ffma_destinations(ins)


def _body(ins):
    return [i for i in sass.timed_region(ins)[1] if i.base_opcode == "FFMA"]


def test_ffma_sources_reuse_and_stall_read_back_exactly(regbank):
    cubin, ins, scratch = regbank
    target = _body(ins)[0]
    rd = int(target.operands[0][1:])
    res = sass.patch(cubin, "regbank_ffma", [sass.Edit(target.offset, regs=(None, 8, 10, 16), reuse=0b011, stall=1,
                                                       yield_flag=False)], scratch=scratch)
    (before, after), = res.changed
    assert after.text == f"FFMA R{rd}, R8.reuse, R10.reuse, R16"
    assert str(after.control).endswith(":-:S01]") and after.control.reuse == 0b011
    assert before.offset == after.offset and res.cubin != cubin.data and len(res.cubin) == len(cubin.data)
    # the patched cubin is a cubin nvdisasm reads, and a second Cubin sees the same instruction
    assert sass.Cubin(res.cubin, cubin.arch).instructions("regbank_ffma")[ins.index(target)].text == after.text


def test_rz_and_slot_c_reuse(regbank):
    cubin, ins, scratch = regbank
    t = _body(ins)[1]
    res = sass.patch(cubin, "regbank_ffma", [sass.Edit(t.offset, regs=(None, sass.RZ, 9, 11), reuse=0b100,
                                                       yield_flag=False)], scratch=scratch)
    assert res.changed[0][1].text.endswith("RZ, R9, R11.reuse")


def test_patch_many_verifies_in_one_call_and_matches_single_patches(regbank):
    cubin, ins, scratch = regbank
    variants = [sass.ffma_operand_edits(ins, a, b, c, r) + sass.timing_edits(ins)
                for a, b, c, r in [(8, 10, 16, 0), (9, 9, 9, 3), (11, 13, 15, 1)]]
    many = sass.patch_many(cubin, "regbank_ffma", variants, scratch=scratch)
    one = sass.patch(cubin, "regbank_ffma", variants[1], scratch=scratch)
    assert many[1].cubin == one.cubin
    assert [a.text for _, a in many[1].changed] == [a.text for _, a in one.changed]
    assert len({m.cubin for m in many}) == 3


def test_sts_chain_reads_as_the_seeds_edit(build):
    for arch in PATCH_ARCHES:
        cubin = build("smem_latency_st.cu", arch, UNROLL=4)
        ins = cubin.instructions("smem_latency_st")
        res = sass.patch(cubin, "smem_latency_st", sass.chain_on_read_scoreboard(ins, "STS"))
        ctrl = [a.control for _, a in res.changed]
        sb = ctrl[0].read_barrier
        assert sb is not None and all(c.read_barrier == sb for c in ctrl)
        assert ctrl[0].wait_mask == 0 and all(c.wait_mask == 1 << sb for c in ctrl[1:]), arch


def test_both_clock_reads_wait_on_every_scoreboard(build):
    cubin = build("smem_latency_ld.cu", "sm_90", UNROLL=50)
    res = sass.patch(cubin, "smem_latency_ld", sass.timing_edits(cubin.instructions("smem_latency_ld")))
    start, _, stop = sass.timed_region(res.instructions)
    assert [a.offset for _, a in res.changed] == [start.offset, stop.offset]
    for _, after in res.changed:
        assert str(after.control).startswith("[B012345:") and after.text.startswith("CS2R")


def test_refuses_registers_the_kernel_does_not_use(regbank):
    cubin, ins, scratch = regbank
    usable = sass.usable_registers(ins, cubin.kernel("regbank_ffma"))
    with pytest.raises(sass.PatchRefused, match="outside the registers"):
        sass.patch(cubin, "regbank_ffma", sass.ffma_operand_edits(ins, usable, 1, 2, 0), scratch=scratch)


def test_refuses_writing_a_live_register(regbank):
    cubin, ins, scratch = regbank
    live = next(r for r in range(20) if r not in scratch)
    t = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match="clobber a live register"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(t.offset, regs=(live, 1, 2, 3))], scratch=scratch)


def test_refuses_reuse_hidden_by_yield(regbank):
    cubin, ins, scratch = regbank
    t = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match="yield"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(t.offset, regs=(None, 1, 2, 3), reuse=1, yield_flag=True)],
                   scratch=scratch)


def test_refuses_branches_exits_and_unencodable_instructions(regbank):
    cubin, ins, scratch = regbank
    bra = next(i for i in ins if i.base_opcode == "BRA")
    exit_ = next(i for i in ins if i.base_opcode == "EXIT")
    other = next(i for i in ins if i.base_opcode in ("LDG", "LDC", "S2R"))
    with pytest.raises(sass.PatchRefused, match="control-flow"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(bra.offset, stall=1)])
    with pytest.raises(sass.PatchRefused, match="control-flow|nv.info"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(exit_.offset, stall=1)])
    with pytest.raises(sass.PatchRefused, match="only for plain FFMA"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(other.offset, regs=(None, 1, 2, 3))])


def test_refuses_bad_offsets_double_edits_and_out_of_range_fields(regbank):
    cubin, ins, _ = regbank
    t = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match="no instruction at offset"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(t.offset + 8, stall=1)])
    with pytest.raises(sass.PatchRefused, match="twice"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(t.offset, stall=1), sass.Edit(t.offset, stall=2)])
    with pytest.raises(sass.PatchRefused, match="out of range"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(t.offset, stall=16)])
    with pytest.raises(sass.PatchRefused, match="scoreboards are 0..5"):
        sass.patch(cubin, "regbank_ffma", [sass.Edit(t.offset, read_barrier=6)])


def test_a_patch_that_does_not_read_back_is_refused(regbank, monkeypatch):
    """If the disassembly disagrees with the plan (here: a planner that claims another text), refuse."""
    cubin, ins, scratch = regbank
    real = sass._plan_one

    def lying(*a, **k):
        lo, hi, text = real(*a, **k)
        return lo, hi, text.replace("R8", "R9")

    monkeypatch.setattr(sass, "_plan_one", lying)
    with pytest.raises(sass.PatchRefused, match="intended"):
        sass.patch(cubin, "regbank_ffma", sass.ffma_operand_edits(ins, 8, 10, 16, 0)[:1], scratch=scratch)
