"""The sass package's encoding (sass/encoding.py): control codes and instructions. Control
words copied from real listings (the seeds' notes), every field at its boundaries and round-tripped
by hypothesis, FFMA instructions assembled by hand from the encoding and read back by nvdisasm."""

import pytest
from gp_testing import PATCH_ARCHES
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_gpuprops import sass
from pytest_gpuprops.sass import RZ, ControlCode, Instruction

LOW41 = (1 << 41) - 1

# ----------------------------------------------------------------------------------------------
# control codes: words from real listings

# hi word, (stall, yield, write sb, read sb, wait mask, reuse), as the listing prints it
SEED_WORDS = [
    (0x020F5E0000001804, (15, True, 5, None, 0b100000, 0), "[B-----5:R-:W5:Y:S15]"),   # HMMA
    (0x000FD20000000000, (9, True, None, None, 0, 0), "[B------:R-:W-:Y:S09]"),        # NOP
    (0x060F700000001804, (8, False, 5, None, 0b100000, 0b01), "[B-----5:R-:W5:-:S08]"),  # reuse A
    (0x000FC20000000000, (1, True, None, None, 0, 0), "[B------:R-:W-:Y:S01]"),
    (0x0C0F700000001804, (8, False, 5, None, 0, 0b11), "[B------:R-:W5:-:S08]"),       # reuse A and B
    (0x0E0FE20000000007, (1, False, None, None, 0b100000, 0b11), "[B-----5:R-:W-:-:S01]"),  # FFMA R7, R36.reuse..
    (0x00016400081EE900, (2, False, 5, 0, 0, 0), "[B------:R0:W5:-:S02]"),              # LDG.E.SYS
    (0x00FE220000000A00, (1, False, 0, None, 0b001111, 0), "[B0123--:R-:W0:-:S01]"),    # LDC.64 after stores
]


@pytest.mark.parametrize("hi, fields, text", SEED_WORDS)
def test_seed_words_decode(hi, fields, text):
    c = ControlCode.decode(hi)
    assert (c.stall, c.yield_flag, c.write_barrier, c.read_barrier, c.wait_mask, c.reuse) == fields
    assert str(c) == text


@pytest.mark.parametrize("hi, fields, text", SEED_WORDS)
def test_seed_words_encode(hi, fields, text):
    c = ControlCode(*fields)
    assert c.apply(hi & LOW41) == hi
    assert c.bits() == hi >> 41


@given(stall=st.integers(0, 15), y=st.booleans(), wb=st.one_of(st.none(), st.integers(0, 5)),
       rb=st.one_of(st.none(), st.integers(0, 5)), wait=st.integers(0, 63), reuse=st.integers(0, 15),
       low=st.integers(0, LOW41))
@example(stall=15, y=False, wb=5, rb=5, wait=63, reuse=15, low=LOW41)
@example(stall=0, y=True, wb=None, rb=None, wait=0, reuse=0, low=0)
@example(stall=0, y=True, wb=0, rb=0, wait=0, reuse=0, low=LOW41)
@example(stall=15, y=False, wb=None, rb=None, wait=0b100000, reuse=0b1000, low=1 << 40)
def test_round_trip_at_the_field_boundaries(stall, y, wb, rb, wait, reuse, low):
    c = ControlCode(stall, y, wb, rb, wait, reuse)
    hi = c.apply(low)
    assert ControlCode.decode(hi) == c
    assert hi & LOW41 == low
    assert hi >> 41 == c.bits() < 1 << 23
    # written over a word whose control bits are all set, the old ones are gone
    assert c.apply(low | ~LOW41 & (1 << 64) - 1) == hi


def test_bit_positions_one_field_at_a_time():
    base = ControlCode(0, False, None, None, 0, 0).bits()  # wb = rb = 7, yield bit 1
    assert base == (1 << 4) | (7 << 5) | (7 << 8)
    assert ControlCode(5, False, None, None, 0, 0).bits() == base | 5
    assert ControlCode(0, True, None, None, 0, 0).bits() == base & ~(1 << 4)
    assert ControlCode(0, False, 2, None, 0, 0).bits() == base & ~(7 << 5) | (2 << 5)
    assert ControlCode(0, False, None, 3, 0, 0).bits() == base & ~(7 << 8) | (3 << 8)
    assert ControlCode(0, False, None, None, 0b010001, 0).bits() == base | (0b010001 << 11)
    assert ControlCode(0, False, None, None, 0, 0b0101).bits() == base | (0b0101 << 17)


@pytest.mark.parametrize("fields, message", [
    (dict(stall=16), "stall=16 out of range 0..15"), (dict(stall=-1), "stall=-1"),
    (dict(wait_mask=64), "wait_mask=64 out of range 0..63"), (dict(wait_mask=-1), "wait_mask=-1"),
    (dict(reuse=16), "reuse=16 out of range 0..15"), (dict(reuse=-1), "reuse=-1"),
    (dict(write_barrier=6), "write_barrier=6 out of range: scoreboards are 0..5"),
    (dict(write_barrier=7), "write_barrier=7"), (dict(write_barrier=-1), "write_barrier=-1"),
    (dict(read_barrier=6), "read_barrier=6 out of range"), (dict(read_barrier=-1), "read_barrier=-1"),
])
def test_out_of_range_fields_are_refused(fields, message):
    base = dict(stall=0, yield_flag=False, write_barrier=None, read_barrier=None, wait_mask=0, reuse=0)
    base.update(fields)
    with pytest.raises(sass.PatchRefused, match=message):
        ControlCode(**base).bits()


def test_in_range_edges_are_accepted():
    ControlCode(15, False, 5, 0, 63, 15).bits()
    ControlCode(0, True, 0, 5, 0, 0).bits()


@pytest.mark.parametrize("code, text", [
    (ControlCode(0, False, None, None, 0b101010, 0), "[B-1-3-5:R-:W-:-:S00]"),
    (ControlCode(12, True, 0, 3, 0b000001, 7), "[B0-----:R3:W0:Y:S12]"),
    (ControlCode(3, False, 4, 0, 0b111111, 0), "[B012345:R0:W4:-:S03]"),
])
def test_notation(code, text):
    assert str(code) == text


# ----------------------------------------------------------------------------------------------
# words and instructions


def test_words_are_little_endian():
    raw = bytes(range(16))
    assert sass.split_words(raw) == (0x0706050403020100, 0x0F0E0D0C0B0A0908)
    assert sass.join_words(0x0706050403020100, 0x0F0E0D0C0B0A0908) == raw


def test_instruction_fields_by_hand():
    i = Instruction(0x1a0, "@!P0 FFMA.FTZ R1, R2.reuse, -R3, R4", 0x0000000302017223 | 0x1234 << 48,
                    0x0E0FE20000000004)
    assert (i.predicate, i.opcode, i.base_opcode) == ("@!P0", "FFMA.FTZ", "FFMA")
    assert i.operands == ["R1", "R2.reuse", "-R3", "R4"]
    assert i.opcode_bits == 0x223 and i.control == ControlCode.decode(0x0E0FE20000000004)
    assert i.raw == sass.join_words(i.lo, i.hi)
    bare = Instruction(0x10, "EXIT", 0x794D, 0x000FEA0003800000)
    assert (bare.predicate, bare.opcode, bare.base_opcode, bare.operands) == ("", "EXIT", "EXIT", [])
    pred_only = Instruction(0x20, "@P0 EXIT", 0x94D, 0)
    assert (pred_only.predicate, pred_only.opcode, pred_only.operands) == ("@P0", "EXIT", [])


def test_instruction_line_exactly():
    i = Instruction(0x30, "FFMA R7, R36.reuse, R34.reuse, R7", 0x0000002224077223, 0x0E0FE20000000007)
    assert i.line() == ("[B-----5:R-:W-:-:S01]  /*0030*/  " + "FFMA R7, R36.reuse, R34.reuse, R7 ;".ljust(52)
                        + " /* 0x0000002224077223 0x0e0fe20000000007 */")
    long = Instruction(0x12340, "X " + "R1, " * 20, 0, 0)
    assert "/*12340*/" in long.line()


# ----------------------------------------------------------------------------------------------
# FFMA assembled by hand, read back by nvdisasm


def ffma_words(rd, ra, rb, rc, ctrl=ControlCode(1, False, None, None, 0, 0), mods=0):
    """FFMA Rd, Ra, Rb, Rc from the encoding: opcode 0x223, predicate PT (7) in lo bits 12-14, Rd lo
    16-23, Ra lo 24-31, Rb lo 32-39, Rc hi 0-7, control hi 41-63."""
    lo = 0x223 | (7 << 12) | (rd << 16) | (ra << 24) | (rb << 32)
    return lo, (rc | mods | ctrl.bits() << 41)


def _name(r):
    return "RZ" if r == RZ else f"R{r}"


HAND = [  # (rd, ra, rb, rc, reuse, yield) -> text
    ((7, 36, 34, 7, 0b011, False), "FFMA R7, R36.reuse, R34.reuse, R7"),
    ((0, 1, 2, 3, 0, False), "FFMA R0, R1, R2, R3"),
    ((254, 253, 252, 251, 0b100, False), "FFMA R254, R253, R252, R251.reuse"),
    ((5, RZ, 9, 11, 0b100, False), "FFMA R5, RZ, R9, R11.reuse"),
    ((RZ, 8, RZ, RZ, 0b001, False), "FFMA RZ, R8.reuse, RZ, RZ"),
    ((9, 8, 10, 16, 0b111, False), "FFMA R9, R8.reuse, R10.reuse, R16.reuse"),
    ((9, 8, 10, 16, 0b011, True), "FFMA R9, R8, R10, R16"),  # yield set: reuse is not printed
]


@pytest.mark.parametrize("arch", PATCH_ARCHES)
def test_hand_assembled_ffma_reads_back(arch):
    words = [ffma_words(rd, ra, rb, rc, ControlCode(2, y, None, None, 0, reuse))
             for (rd, ra, rb, rc, reuse, y), _ in HAND]
    code = b"".join(sass.join_words(lo, hi) for lo, hi in words)
    # nvdisasm's listing of these bytes, through the listing cache (keyed by the bytes and the nvdisasm
    # build, checked word for word against the code when read): a warm run starts no nvdisasm
    # (disassemble_raw itself is test_sass_listing.py's)
    got = sass.code_listings([code], arch)[0]
    assert [i.text for i in got] == [text for _, text in HAND]
    assert [(i.offset, i.lo, i.hi) for i in got] == [(16 * n, lo, hi) for n, (lo, hi) in enumerate(words)]
    assert all(i.opcode_bits == sass.FFMA_RRRR_OPCODE for i in got)


def test_hand_assembled_modifiers_and_other_forms():
    lo, hi = ffma_words(7, 36, 34, 7)
    forms = [(lo, hi | 1 << 8), (lo | 1 << 63, hi), (lo, hi | 1 << 16),
             ((lo & ~0xFFF) | 0x823, hi), ((lo & ~0xFFF) | 0xA23, hi)]
    got = sass.code_listings([b"".join(sass.join_words(a, b) for a, b in forms)], "sm_90")[0]
    assert [i.text for i in got] == ["FFMA R7, -R36, R34, R7", "FFMA R7, R36, -R34, R7", "FFMA.FTZ R7, R36, R34, R7",
                                     "FFMA R7, R36, 4.7644147787043780411e-44, R7", "FFMA R7, R36, c[0x0][0x0], R7"]


def test_words_are_unsigned():
    assert sass.split_words(b"\xff" * 16) == ((1 << 64) - 1, (1 << 64) - 1)
    lo, hi = sass.split_words(sass.join_words(0x8000000000000000, 0x020F5E0000001804 | 1 << 63))
    assert lo == 1 << 63 and hi >> 63 == 1


# ----------------------------------------------------------------------------------------------
# control codes round-tripped through apply/decode


@given(stall=st.integers(0, 15), y=st.booleans(), wb=st.one_of(st.none(), st.integers(0, 5)),
       rb=st.one_of(st.none(), st.integers(0, 5)), wait=st.integers(0, 63), reuse=st.integers(0, 15),
       low=st.integers(0, (1 << 41) - 1))
def test_control_code_encode_decode_round_trip(stall, y, wb, rb, wait, reuse, low):
    c = sass.ControlCode(stall, y, wb, rb, wait, reuse)
    hi = c.apply(low)
    assert sass.ControlCode.decode(hi) == c
    assert hi & ((1 << 41) - 1) == low  # the operand bits are untouched


def test_control_code_notation():
    c = sass.ControlCode(stall=4, yield_flag=False, write_barrier=None, read_barrier=0, wait_mask=0b1, reuse=0)
    assert str(c) == "[B0-----:R0:W-:-:S04]"


def test_an_instructions_decoded_fields_are_computed_once_and_kept():
    from pytest_gpuprops.sass import encoding
    calls = []
    real = encoding.ControlCode.decode.__func__
    ins = Instruction(0x10, "@!PT FFMA.FTZ R1, R2, R3, R4", 0x223, 0x000FC00000000004)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(encoding.ControlCode, "decode", classmethod(lambda cls, hi: calls.append(hi) or real(cls, hi)))
        assert ins.control is ins.control and calls == [0x000FC00000000004]
    assert (ins.predicate, ins.opcode, ins.base_opcode) == ("@!PT", "FFMA.FTZ", "FFMA")
    assert ins.__dict__["opcode"] == "FFMA.FTZ"  # kept on the instance, found there from now on
    assert Instruction.opcode.__doc__.startswith("Full mnemonic")
