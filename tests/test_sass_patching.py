"""The sass package's patcher (sass/patching.py): round trips checked by disassembly on five
arches, patched words compared with words assembled by hand from the encoding, instructions of other
forms planted by hand into a real kernel, the register bound read off the listing by a regex of this
file, register-field edits on FFMAs planted with known registers (odd ones, RZ), every refusal with
its message in full, and what prefetch and prefetch_patches read for the patches after them."""

import re
import struct

import pytest
from gp_testing import PATCH_ARCHES
from test_sass_cubin import (
    J_CODE,
    K_CODE,
    elf,
    two_kernels,  # noqa: F401  (a fixture)
    two_kernels_by_hand,
)
from test_sass_encoding import ffma_words
from test_sass_listing import A, batch, fresh, nv, reading, stats  # noqa: F401  (fresh, nv: fixtures)

from pytest_gpuprops import sass
from pytest_gpuprops.sass import RZ, ControlCode, Edit, Instruction

# ----------------------------------------------------------------------------------------------
# round trips on five arches, and every refusal


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


def test_a_patched_cubin_reads_as_its_bytes_parsed_afresh(regbank):
    """patch() carries the original's ELF reading over to the patched bytes (the code is all that
    changed): a fresh parse of those bytes reads the same kernels, offsets, registers and code."""
    cubin, ins, scratch = regbank
    res = sass.patch(cubin, "regbank_ffma", sass.ffma_operand_edits(ins, 9, 11, 13, 1) + sass.timing_edits(ins),
                     scratch=scratch)
    sass.clear_memo()  # no memo: the ELF is parsed again
    parsed = sass.Cubin(res.cubin, cubin.arch)
    carried = cubin.spliced("regbank_ffma", parsed.text("regbank_ffma"))
    assert carried.data == res.cubin and carried.kernels == parsed.kernels and carried.arch == parsed.arch
    assert [i.text for i in parsed.instructions("regbank_ffma")] == [i.text for i in res.instructions]
    with pytest.raises(sass.SassError, match="must keep the kernel's size"):
        cubin.spliced("regbank_ffma", parsed.text("regbank_ffma")[:-16])


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

    monkeypatch.setattr(sass.patching, "_plan_one", lying)
    with pytest.raises(sass.PatchRefused, match="intended"):
        sass.patch(cubin, "regbank_ffma", sass.ffma_operand_edits(ins, 8, 10, 16, 0)[:1], scratch=scratch)


LOW41 = (1 << 41) - 1
K = "regbank_ffma"


@pytest.fixture(scope="module")
def kernel(build):
    cubin = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    return cubin, cubin.instructions(K)


@pytest.fixture(scope="module", params=["sm_90", "sm_86"])
def kernel_on(request, build, kernel):
    """The same kernel on two arches (sm_90 shared with ``kernel``)."""
    if request.param == "sm_90":
        return kernel
    cubin = build("regbank_ffma.cu", request.param, NFFMA=8)
    return cubin, cubin.instructions(K)


def _rd(i):
    return int(i.operands[0][1:])


def _highest_named_register(ins):
    """Independent of sass.usable_registers: every R<n> operand token, modifiers and brackets stripped."""
    top = -1
    for i in ins:
        for op in i.operands:
            for tok in re.split(r"[\[\]+,\s|-]+", op):
                m = re.fullmatch(r"R(\d+)(\.\w+)*", tok)
                if m:
                    top = max(top, int(m.group(1)))
    return top


def _planted(cubin, offset, lo, hi):
    """The cubin with the instruction at ``offset`` of the kernel replaced by (lo, hi)."""
    k = cubin.kernel(K)
    at = k.text_offset + offset
    return sass.Cubin(cubin.data[:at] + sass.join_words(lo, hi) + cubin.data[at + 16:], cubin.arch, name="planted")


def _word_at(data, cubin, offset):
    at = cubin.kernel(K).text_offset + offset
    return sass.split_words(data[at:at + 16])


# ----------------------------------------------------------------------------------------------
# what a patch writes, byte for byte


def test_register_and_reuse_patch_writes_the_hand_assembled_words(kernel_on):
    cubin, ins = kernel_on
    t = _body(ins)[0]
    rd, old = _rd(t), t.control
    res = sass.patch(cubin, K, [Edit(t.offset, regs=(None, 8, 10, 16), reuse=0b011, stall=1, yield_flag=False)],
                     scratch={rd})
    want = ffma_words(rd, 8, 10, 16, ControlCode(1, False, old.write_barrier, old.read_barrier, old.wait_mask, 0b011))
    assert _word_at(res.cubin, cubin, t.offset) == want
    # every other byte of the ELF is as it was
    at = cubin.kernel(K).text_offset + t.offset
    assert res.cubin[:at] == cubin.data[:at] and res.cubin[at + 16:] == cubin.data[at + 16:]
    (before, after), = res.changed
    assert before == t and (after.lo, after.hi) == want and after.text == f"FFMA R{rd}, R8.reuse, R10.reuse, R16"
    assert res.kernel == K and [i.offset for i in res.instructions] == [i.offset for i in ins]
    assert res.diff_lines() == ["- " + before.line(), "+ " + after.line()]


def test_control_only_patch_keeps_the_operand_bits(kernel):
    cubin, ins = kernel
    start, region, stop = sass.timed_region(ins)
    other = next(i for i in region if i.base_opcode not in ("FFMA", "BRA"))
    res = sass.patch(cubin, K, [Edit(other.offset, stall=7, read_barrier=3, write_barrier=None, wait_mask=0b100001,
                                     yield_flag=True)])
    lo, hi = _word_at(res.cubin, cubin, other.offset)
    assert lo == other.lo
    assert hi == (other.hi & LOW41) | (ControlCode(7, True, None, 3, 0b100001, other.control.reuse).bits() << 41)
    assert res.changed[0][1].text == other.text


def test_fields_left_out_of_an_edit_keep_their_values(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    res = sass.patch(cubin, K, [Edit(t.offset, stall=3)])
    c = res.changed[0][1].control
    old = t.control
    assert (c.stall, c.yield_flag, c.write_barrier, c.read_barrier, c.wait_mask, c.reuse) == \
        (3, old.yield_flag, old.write_barrier, old.read_barrier, old.wait_mask, old.reuse)
    assert res.changed[0][1].text == t.text  # reuse flags as compiled are kept


def test_none_in_regs_keeps_that_register(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    ra, rb, rc = (int(o.split(".")[0][1:]) for o in t.operands[1:])
    res = sass.patch(cubin, K, [Edit(t.offset, regs=(None, None, 9, None), reuse=0, yield_flag=False)])
    assert res.changed[0][1].text == f"FFMA R{_rd(t)}, R{ra}, R9, R{rc}"


def test_rz_sources_encode_as_255(kernel):
    cubin, ins = kernel
    t = _body(ins)[1]
    res = sass.patch(cubin, K, [Edit(t.offset, regs=(None, RZ, RZ, RZ), reuse=0, yield_flag=False)])
    lo, hi = _word_at(res.cubin, cubin, t.offset)
    assert (lo >> 24) & 0xFF == 0xFF and (lo >> 32) & 0xFF == 0xFF and hi & 0xFF == 0xFF
    assert res.changed[0][1].text == f"FFMA R{_rd(t)}, RZ, RZ, RZ"


# ----------------------------------------------------------------------------------------------
# instructions of other forms, planted by hand


def test_ffma_with_a_modifier_keeps_it(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    lo, hi = ffma_words(_rd(t), 1, 2, 3, ControlCode(1, False, None, None, 0, 0), mods=1 << 16)  # .FTZ
    planted = _planted(cubin, t.offset, lo, hi)
    res = sass.patch(planted, K, [Edit(t.offset, regs=(None, 4, 5, 6), reuse=0b001)])
    after = res.changed[0][1]
    assert after.text == f"FFMA.FTZ R{_rd(t)}, R4.reuse, R5, R6"
    assert after.hi & (1 << 16) and after.hi & 0xFF == 6


def test_predicated_ffma_keeps_its_predicate(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    lo, hi = ffma_words(_rd(t), 1, 2, 3)
    planted = _planted(cubin, t.offset, lo & ~(0xF << 12), hi)  # predicate P0
    assert planted.instructions(K)[ins.index(t)].text == f"@P0 FFMA R{_rd(t)}, R1, R2, R3"
    res = sass.patch(planted, K, [Edit(t.offset, regs=(None, 4, 5, 6))])
    assert res.changed[0][1].text == f"@P0 FFMA R{_rd(t)}, R4, R5, R6"


@pytest.mark.parametrize("form, why", [
    (lambda lo, hi: (lo, hi | 1 << 8), "-R1"),                      # negated A
    (lambda lo, hi: (lo | 1 << 62, hi), "|R2|"),                    # absolute B
    (lambda lo, hi: ((lo & ~0xFFF) | 0x823, hi), "immediate B"),
    (lambda lo, hi: ((lo & ~0xFFF) | 0xA23, hi), "constant B"),
])
def test_ffma_forms_whose_register_fields_are_not_encoded_here_are_refused(kernel, form, why):
    cubin, ins = kernel
    t = _body(ins)[0]
    planted = _planted(cubin, t.offset, *form(*ffma_words(_rd(t), 1, 2, 3)))
    with pytest.raises(sass.PatchRefused, match="register and reuse fields are encoded only for plain FFMA"):
        sass.patch(planted, K, [Edit(t.offset, regs=(None, 4, 5, 6))])
    with pytest.raises(sass.PatchRefused, match="only for plain FFMA"):
        sass.patch(planted, K, [Edit(t.offset, reuse=0b001, yield_flag=False)])
    sass.patch(planted, K, [Edit(t.offset, stall=2)])  # control bits can still be set


def test_register_edits_on_other_opcodes_name_the_opcode(kernel):
    cubin, ins = kernel
    other = next(i for i in sass.timed_region(ins)[1] if i.base_opcode == "ISETP")
    with pytest.raises(sass.PatchRefused, match=f"this is opcode 0x{other.opcode_bits:03x}"):
        sass.patch(cubin, K, [Edit(other.offset, reuse=1, yield_flag=False)])


def test_an_instruction_listed_in_nvinfo_is_never_patched(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    exits = sorted(o for o in cubin.kernel(K).protected_offsets
                   if next(i for i in ins if i.offset == o).base_opcode == "EXIT")
    # rewrite the EXIT offsets record of .nv.info.regbank_ffma by hand so it lists the FFMA
    rec = b"\x04\x1c" + struct.pack("<H", 4 * len(exits)) + struct.pack(f"<{len(exits)}I", *exits)
    new = b"\x04\x1c" + struct.pack("<H", 4 * len(exits)) + struct.pack(f"<{len(exits)}I", t.offset, *exits[1:])
    assert cubin.data.count(rec) == 1
    listed = sass.Cubin(cubin.data.replace(rec, new), cubin.arch)
    assert t.offset in listed.kernel(K).protected_offsets
    with pytest.raises(sass.PatchRefused, match=rf"{K}\+0x{t.offset:04x} \(FFMA .*listed in \.nv\.info\.{K} or "
                                                "relocated"):
        sass.patch(listed, K, [Edit(t.offset, stall=2)])


@pytest.mark.parametrize("opcode", ["BRA", "EXIT"])
def test_control_flow_is_never_patched(kernel, opcode):
    cubin, ins = kernel
    i = next(i for i in ins if i.base_opcode == opcode and i.offset not in cubin.kernel(K).protected_offsets) \
        if opcode == "BRA" else next(i for i in ins if i.base_opcode == opcode)
    with pytest.raises(sass.PatchRefused, match="control-flow instructions are never patched"):
        sass.patch(cubin, K, [Edit(i.offset, stall=2)])


# ----------------------------------------------------------------------------------------------
# registers: the bound is the highest register the code names, not the allocated count


def test_register_bound_is_read_off_the_listing(kernel_on):
    cubin, ins = kernel_on
    top = _highest_named_register(ins)
    count = cubin.kernel(K).register_count
    assert 0 < top < count - 1  # the hardware reserves the top of the allocation (R70/R71 of 72 on sm_90)
    t = _body(ins)[0]
    for slot in range(1, 4):
        ok = [None, None, None, None]
        ok[slot] = top
        sass.patch(cubin, K, [Edit(t.offset, regs=tuple(ok), reuse=0, yield_flag=False)])
        for bad in (top + 1, count - 1, count, -1):
            regs = [None, None, None, None]
            regs[slot] = bad
            with pytest.raises(sass.PatchRefused, match=rf"R{bad} in slot {'dABC'[slot]} is outside the registers "
                                                        rf"this kernel's code uses \(R0\.\.R{top}; register count "
                                                        rf"{count}"):
                sass.patch(cubin, K, [Edit(t.offset, regs=tuple(regs), reuse=0, yield_flag=False)])
    with pytest.raises(sass.PatchRefused, match=rf"R{top + 1} in slot d"):
        sass.patch(cubin, K, [Edit(t.offset, regs=(top + 1, 1, 2, 3))], scratch={top + 1})


def test_usable_registers_by_hand():
    info = sass.KernelInfo("k", 0, 0, 72, frozenset())
    listing = [Instruction(0, "LDG.E R69, desc[UR6][R2.64+0x800]", 0, 0), Instruction(16, "FFMA RZ, R3, R4, R5", 0, 0),
               Instruction(32, "UMOV UR90, URZ", 0, 0)]
    assert sass.usable_registers(listing, info) == 70
    assert sass.usable_registers(listing[1:], info) == 6
    assert sass.usable_registers(listing, sass.KernelInfo("k", 0, 0, 40, frozenset())) == 40
    assert sass.usable_registers([Instruction(0, "EXIT", 0, 0)], info) == 0


# ----------------------------------------------------------------------------------------------
# destinations: only the current one or the designated scratch registers


def test_without_scratch_only_the_current_destination_may_be_written(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    rd = _rd(t)
    live = 0 if rd != 0 else 1
    with pytest.raises(sass.PatchRefused, match=rf"writing R{live} would clobber a live register; only the "
                                                rf"designated scratch register\(s\) \[{rd}\] may be written"):
        sass.patch(cubin, K, [Edit(t.offset, regs=(live, 1, 2, 3))])
    with pytest.raises(sass.PatchRefused, match="clobber"):
        sass.patch(cubin, K, [Edit(t.offset, regs=(RZ, 1, 2, 3))])
    res = sass.patch(cubin, K, [Edit(t.offset, regs=(rd, 1, 2, 3))])
    assert res.changed[0][1].text.startswith(f"FFMA R{rd}, R1")


def test_with_scratch_the_destination_must_be_one_of_them(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    rd = _rd(t)
    other = next(r for r in range(1, 30) if r != rd)
    res = sass.patch(cubin, K, [Edit(t.offset, regs=(other, 1, 2, 3))], scratch={other, 31})
    assert res.changed[0][1].text.startswith(f"FFMA R{other}, R1")
    # the current destination is not writable unless it is scratch too
    with pytest.raises(sass.PatchRefused, match=rf"writing R{rd} .* \[{other}, 31\] may be written"):
        sass.patch(cubin, K, [Edit(t.offset, regs=(None, 1, 2, 3))], scratch={other, 31})
    with pytest.raises(sass.PatchRefused, match="clobber"):
        sass.patch(cubin, K, [Edit(t.offset, regs=(None, 1, 2, 3))], scratch=set())
    sass.patch(cubin, K, [Edit(t.offset, regs=(None, 1, 2, 3))], scratch={rd})


def test_regs_must_be_four(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match=r"regs must be \(Rd, Ra, Rb, Rc\), got \[1, 2, 3\]"):
        sass.patch(cubin, K, [Edit(t.offset, regs=(1, 2, 3))])


# ----------------------------------------------------------------------------------------------
# reuse flags: never on RZ, never hidden by yield


@pytest.mark.parametrize("regs, reuse, slot", [((None, RZ, 9, 11), 0b001, "A"), ((None, 8, RZ, 11), 0b010, "B"),
                                               ((None, 8, 9, RZ), 0b100, "C"), ((None, RZ, RZ, RZ), 0b110, "B")])
def test_rz_cannot_be_marked_reuse(kernel, regs, reuse, slot):
    cubin, ins = kernel
    t = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match=rf"RZ cannot be marked \.reuse \(slot {slot}\)"):
        sass.patch(cubin, K, [Edit(t.offset, regs=regs, reuse=reuse, yield_flag=False)])


def test_rz_next_to_a_reused_register_is_fine(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    res = sass.patch(cubin, K, [Edit(t.offset, regs=(None, RZ, 9, 11), reuse=0b110, yield_flag=False)])
    assert res.changed[0][1].text.endswith("RZ, R9.reuse, R11.reuse")


def test_reuse_with_yield_is_refused(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match="reuse flags are ignored .* clear yield"):
        sass.patch(cubin, K, [Edit(t.offset, regs=(None, 1, 2, 3), reuse=1, yield_flag=True)])
    # yield set as compiled and not cleared by the edit
    y = _planted(cubin, t.offset, *ffma_words(_rd(t), 1, 2, 3, ControlCode(2, True, None, None, 0, 0)))
    with pytest.raises(sass.PatchRefused, match="reuse flags are ignored"):
        sass.patch(y, K, [Edit(t.offset, reuse=0b001)])
    assert sass.patch(y, K, [Edit(t.offset, reuse=0b001, yield_flag=False)]).changed[0][1].text.endswith(
        "R1.reuse, R2, R3")
    sass.patch(y, K, [Edit(t.offset, regs=(None, 4, 5, 6))])  # no reuse: yield may stay


def test_setting_yield_alone_would_hide_reuse_flags(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    reused = _planted(cubin, t.offset, *ffma_words(_rd(t), 1, 2, 3, ControlCode(2, False, None, None, 0, 0b011)))
    with pytest.raises(sass.PatchRefused, match="setting yield would hide its reuse flags"):
        sass.patch(reused, K, [Edit(t.offset, yield_flag=True)])
    res = sass.patch(reused, K, [Edit(t.offset, stall=5)])
    assert res.changed[0][1].text == f"FFMA R{_rd(t)}, R1.reuse, R2.reuse, R3"
    plain = _planted(cubin, t.offset, *ffma_words(_rd(t), 1, 2, 3))
    sass.patch(plain, K, [Edit(t.offset, yield_flag=True)])


# ----------------------------------------------------------------------------------------------
# edits that name no instruction, or one twice


def test_offsets_between_instructions_and_double_edits(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match=rf"{K} has no instruction at offset 0x{t.offset + 4:04x}"):
        sass.patch(cubin, K, [Edit(t.offset + 4, stall=1)])
    with pytest.raises(sass.PatchRefused, match="no instruction at offset"):
        sass.patch(cubin, K, [Edit(cubin.kernel(K).text_size, stall=1)])
    with pytest.raises(sass.PatchRefused, match=rf"{K}\+0x{t.offset:04x} is edited twice in one patch"):
        sass.patch(cubin, K, [Edit(t.offset, stall=1), Edit(ins[0].offset, stall=1), Edit(t.offset, stall=1)])


# ----------------------------------------------------------------------------------------------
# verification


def _i(off, text, lo=0x100, hi=0x200):
    return Instruction(off, text, lo, hi)


def test_verify_by_hand():
    before = [_i(0, "A"), _i(16, "B"), _i(32, "C")]
    after = [_i(0, "A"), _i(16, "B2", lo=0x999), _i(32, "C")]
    changed = sass._verify(before, after, {16: (0x999, 0x200, "B2")}, "k")
    assert changed == [(before[1], after[1])]


@pytest.mark.parametrize("after, planned, message", [
    ([_i(0, "A"), _i(16, "B2", lo=0x999)], {16: (0x999, 0x200, "B2")},
     "k: the patched code no longer disassembles instruction for instruction"),
    ([_i(0, "A"), _i(16, "B2", lo=0x999), _i(48, "C")], {16: (0x999, 0x200, "B2")}, "instruction for instruction"),
    ([_i(0, "A"), _i(16, "B2", lo=0x998), _i(32, "C")], {16: (0x999, 0x200, "B2")},
     r"k\+0x0010: patched instruction reads 'B2' .* intended 'B2' .*; refused"),
    ([_i(0, "A"), _i(16, "B2", lo=0x999, hi=0x201), _i(32, "C")], {16: (0x999, 0x200, "B2")}, "patched instruction"),
    ([_i(0, "A"), _i(16, "B3", lo=0x999), _i(32, "C")], {16: (0x999, 0x200, "B2")}, "reads 'B3'"),
    ([_i(0, "A"), _i(16, "B2", lo=0x999), _i(32, "C", hi=0x1200)], {16: (0x999, 0x200, "B2")},
     r"k\+0x0020: an instruction outside the patch changed \('C' -> 'C'\); refused"),
    ([_i(0, "A", lo=0x101), _i(16, "B2", lo=0x999), _i(32, "C")], {16: (0x999, 0x200, "B2")}, "outside the patch"),
    ([_i(0, "A"), _i(16, "B2", lo=0x999), _i(32, "C'")], {16: (0x999, 0x200, "B2")}, r"\('C' -> \"C'\"\)"),
])
def test_verify_refuses(after, planned, message):
    before = [_i(0, "A"), _i(16, "B"), _i(32, "C")]
    with pytest.raises(sass.PatchRefused, match=message):
        sass._verify(before, after, planned, "k")


def test_verify_across_listing_modes_compares_words_not_text():
    before = [_i(0, "BRA 0x40"), _i(16, "B")]
    moved = [_i(0, "BRA 0x1040"), _i(16, "B2", lo=0x7)]
    planned = {16: (0x7, 0x200, "B2")}
    assert len(sass._verify(before, moved, planned, "k", same_listing_mode=False)) == 1
    with pytest.raises(sass.PatchRefused, match="outside the patch"):
        sass._verify(before, moved, planned, "k")
    with pytest.raises(sass.PatchRefused, match="outside the patch"):
        sass._verify(before, [_i(0, "BRA 0x1040", lo=1), moved[1]], planned, "k", same_listing_mode=False)


def _corrupting_plan(monkeypatch, victim_offset):
    """A planner that also changes an instruction it does not report: verification must notice."""
    real = sass._plan

    def plan(cubin, kernel, *rest, **kw):
        text, planned = real(cubin, kernel, *rest, **kw)
        lo, hi = sass.split_words(text[victim_offset:victim_offset + 16])
        hi = ControlCode.decode(hi).__class__(**{**ControlCode.decode(hi).__dict__,
                                                 "stall": (ControlCode.decode(hi).stall + 1) % 16}).apply(hi)
        return text[:victim_offset] + sass.join_words(lo, hi) + text[victim_offset + 16:], planned

    monkeypatch.setattr(sass.patching, "_plan", plan)


def test_a_change_outside_the_plan_is_refused(kernel, monkeypatch):
    cubin, ins = kernel
    t0, t1 = _body(ins)[:2]
    _corrupting_plan(monkeypatch, t1.offset)
    with pytest.raises(sass.PatchRefused, match=rf"{K}\+0x{t1.offset:04x}: an instruction outside the patch changed"):
        sass.patch(cubin, K, [Edit(t0.offset, stall=2)])
    with pytest.raises(sass.PatchRefused, match="outside the patch changed"):
        sass.patch_many(cubin, K, [[Edit(t0.offset, stall=2)]])


# ----------------------------------------------------------------------------------------------
# patch_many


def test_patch_many_equals_patch_variant_by_variant(kernel):
    cubin, ins = kernel
    t0, t1 = _body(ins)[:2]
    variants = [[Edit(t0.offset, stall=2)], [Edit(t1.offset, regs=(None, 1, 2, 3), reuse=1, yield_flag=False)],
                [Edit(t0.offset, stall=4), Edit(t1.offset, wait_mask=1)], []]
    many = sass.patch_many(cubin, K, variants)
    for got, edits in zip(many, variants):
        one = sass.patch(cubin, K, edits)
        assert got.cubin == one.cubin and got.kernel == K
        assert [(b.offset, a.lo, a.hi, a.text) for b, a in got.changed] == \
            [(b.offset, a.lo, a.hi, a.text) for b, a in one.changed]
        assert [(i.offset, i.lo, i.hi) for i in got.instructions] == [(i.offset, i.lo, i.hi) for i in one.instructions]
    assert many[3].changed == [] and many[3].cubin == cubin.data
    assert sass.patch_many(cubin, K, []) == []


def test_patch_many_refuses_a_bad_variant(kernel):
    cubin, ins = kernel
    t0 = _body(ins)[0]
    with pytest.raises(sass.PatchRefused, match="clobber"):
        sass.patch_many(cubin, K, [[Edit(t0.offset, stall=2)], [Edit(t0.offset, regs=(0 if _rd(t0) else 1, 1, 2, 3))]])
    sass.patch_many(cubin, K, [[Edit(t0.offset, regs=(5, 1, 2, 3))]], scratch={5})


# ----------------------------------------------------------------------------------------------
# register fields on FFMAs planted by hand with known registers (odd ones, RZ):
# each field's old bits cleared, RZ among the operands, the live destination, the refusal texts


PLAIN = ControlCode(2, False, None, None, 0, 0)


@pytest.fixture(scope="module")
def odd(kernel):
    """The kernel with its first body FFMA replaced by FFMA R5, R7, R9, R11 (every field's low bit set)."""
    cubin, ins = kernel
    t = _body(ins)[0]
    return _planted(cubin, t.offset, *ffma_words(5, 7, 9, 11, PLAIN)), t.offset


def test_every_register_field_is_cleared_before_it_is_written(odd):
    """Odd registers to even ones: a field whose old bits are not all cleared reads as another register."""
    cubin, at = odd
    res = sass.patch(cubin, K, [Edit(at, regs=(4, 6, 8, 10))], scratch={4})
    assert _word_at(res.cubin, cubin, at) == ffma_words(4, 6, 8, 10, PLAIN)
    assert res.changed[0][1].text == "FFMA R4, R6, R8, R10"


def test_all_ones_fields_to_small_registers(odd):
    """RZ (255, every bit set) in every source field, then R0..R2: nothing of the 255s may stay."""
    cubin, at = odd
    rz = sass.patch(cubin, K, [Edit(at, regs=(None, RZ, RZ, RZ))], scratch={5})
    back = sass.patch(sass.Cubin(rz.cubin, cubin.arch), K, [Edit(at, regs=(None, 0, 1, 2))], scratch={5})
    assert _word_at(back.cubin, cubin, at) == ffma_words(5, 0, 1, 2, PLAIN)


def test_rz_among_the_current_operands_is_read_as_rz(kernel):
    """An FFMA that already reads RZ: a reuse-only edit keeps RZ where it is."""
    cubin, ins = kernel
    t = _body(ins)[0]
    planted = _planted(cubin, t.offset, *ffma_words(5, RZ, 9, RZ, PLAIN))
    res = sass.patch(planted, K, [Edit(t.offset, reuse=0b010)])
    assert res.changed[0][1].text == "FFMA R5, RZ, R9.reuse, RZ"
    assert _word_at(res.cubin, cubin, t.offset) == ffma_words(5, RZ, 9, RZ, ControlCode(2, False, None, None, 0, 0b010))


@pytest.mark.parametrize("regs", [(7, 5, 9, 11),   # the new destination was the old Ra; the old Rd moves to Ra
                                  (9, 7, 5, 11)])  # the new destination was the old Rb
def test_without_scratch_the_live_destination_is_the_old_rd(odd, regs):
    """Without scratch only the compiled destination (R5) may be written, whatever the sources are."""
    cubin, at = odd
    with pytest.raises(sass.PatchRefused) as e:
        sass.patch(cubin, K, [Edit(at, regs=regs)])
    assert str(e.value) == (f"{K}+{at:#06x} (FFMA R5, R7, R9, R11): writing R{regs[0]} would clobber a live "
                            "register; only the designated scratch register(s) [5] may be written")


def test_register_bound_message_in_full(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    usable = sass.usable_registers(ins, cubin.kernel(K))
    with pytest.raises(sass.PatchRefused) as e:
        sass.patch(cubin, K, [Edit(t.offset, regs=(None, usable, 1, 2))])
    count = cubin.kernel(K).register_count
    assert str(e.value) == (f"{K}+{t.offset:#06x} ({t.text}): R{usable} in slot A is outside the registers this "
                            f"kernel's code uses (R0..R{usable - 1}; register count {count}, of which the top ones "
                            f"are reserved: reading them traps); use R0..R{usable - 1} or RZ")


def test_reuse_with_yield_message_in_full(odd):
    cubin, at = odd
    with pytest.raises(sass.PatchRefused) as e:
        sass.patch(cubin, K, [Edit(at, reuse=0b001, yield_flag=True)])
    assert str(e.value) == (f"{K}+{at:#06x} (FFMA R5, R7, R9, R11): reuse flags are ignored (and not printed) on "
                            "an instruction with the yield flag set; clear yield (yield_flag=False) to use reuse")


# ----------------------------------------------------------------------------------------------
# one kernel of several


def test_patching_one_kernel_of_several(two_kernels):  # noqa: F811
    cubin = sass.Cubin(two_kernels["sm_90"], "sm_90")
    name = "small"  # not the first kernel in the file
    assert next(iter(cubin.kernels)) != name
    first = next(i for i in cubin.instructions(name) if i.offset not in cubin.kernel(name).protected_offsets
                 and i.base_opcode not in sass._CONTROL_FLOW)
    one = sass.patch(cubin, name, [Edit(first.offset, stall=9)])
    (many,) = sass.patch_many(cubin, name, [[Edit(first.offset, stall=9)]])
    assert many.cubin == one.cubin and many.changed[0][1].control.stall == 9
    k = cubin.kernel(name)
    assert sass.Cubin(one.cubin, "sm_90").text(name) != cubin.text(name)
    assert sass.Cubin(one.cubin, "sm_90").text("big") == cubin.text("big")
    assert one.cubin[:k.text_offset] == cubin.data[:k.text_offset]


# ----------------------------------------------------------------------------------------------
# prefetch and prefetch_patches: what they read is what the calls after them find


def test_prefetch_reads_every_kernel_of_every_cubin(nv):  # noqa: F811
    cubins = [sass.Cubin(two_kernels_by_hand()), sass.Cubin(elf([("m", A, b"", [])]))]
    assert sass.prefetch(cubins) == 3
    assert sorted(nv) == batch(K_CODE + J_CODE + A)
    assert [cb.instructions(n) for cb in cubins for n in cb.kernels] == [reading(c) for c in (K_CODE, J_CODE, A)]
    assert len(nv) == 2 and stats()["disassembled"] == 3


def test_prefetch_patches_reads_the_patched_codes_a_patch_then_needs(nv):  # noqa: F811
    cubin = sass.Cubin(two_kernels_by_hand())
    to_r10 = [Edit(0, regs=(10, None, None, None))]  # R10 only as scratch
    refused = [Edit(0x10, regs=(10, None, None, None))]  # not an FFMA
    reqs = [(cubin, "k", refused, {10}), (cubin, "k", to_r10, {10}), (cubin, "j", [Edit(0, stall=3)], None)]
    assert sass.prefetch_patches(reqs) == 2
    read = len(nv)
    done = sass.patch(cubin, "k", to_r10, scratch={10})
    assert done.instructions[0].text == "FFMA R10, R2, R3, R12"
    assert sass.patch(cubin, "j", [Edit(0, stall=3)]).instructions[0].control.stall == 3
    assert len(nv) == read  # nothing read again
