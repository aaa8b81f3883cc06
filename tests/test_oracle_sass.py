"""The sass layer against independent oracles: control words copied from real listings (the seeds'
notes), FFMA instructions assembled by hand from the encoding and read back by nvdisasm, .nv.info
records and ELF flags written byte by byte, and timed-region rules on hand-made instruction lists."""

import io
import os
import random
import stat
import struct
import sys
import textwrap

import pytest
from elftools.elf.elffile import ELFFile
from gp_testing import PATCH_ARCHES
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.sass import RZ, ControlCode, Edit, Instruction

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


LISTING = textwrap.dedent("""\
    \t.target\tsm_90
    //--------------------- .text.first      --------------------------
    \t.section\t.text.first,"ax",@progbits
    first:
            /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
                                                                                    /* 0x000fe20000000800 */
    .L_x_1:
            /*0010*/               @P0   EXIT ;                                     /* 0x000000000000094d */
                                                                                    /* 0x000fea0003800000 */
            /*0020*/                   NOP ;                                        /* 0x0000000000007918 */
    //--------------------- .text.second     --------------------------
    \t.section\t.text.second,"ax",@progbits
            /*0000*/                   BRA `(.L_x_2) ;                              /* 0xfffffff000007947 */
                                                                                    /* 0x000fc0000383ffff */
    """)


def test_listing_parse_by_hand():
    got = sass._parse_listing(LISTING)
    assert list(got) == ["first", "second"]
    assert got["first"] == [Instruction(0, "LDC R1, c[0x0][0x28]", 0x00000A00FF017B82, 0x000FE20000000800),
                            Instruction(0x10, "@P0 EXIT", 0x94D, 0x000FEA0003800000)]  # the NOP has no hi word
    assert got["second"] == [Instruction(0, "BRA `(.L_x_2)", 0xFFFFFFF000007947, 0x000FC0000383FFFF)]


def test_raw_listing_has_one_unnamed_section():
    body = LISTING.split("first:\n", 1)[1].split("//---", 1)[0]
    assert [i.offset for i in sass._parse_listing(body)[""]] == [0, 0x10]


def test_empty_section_is_listed_empty():
    assert sass._parse_listing('\t.section\t.text.k,"ax",@progbits\n') == {"k": []}


@pytest.mark.parametrize("arch, name", [("sm_75", "SM75"), ("sm_90", "SM90"), ("sm_90a", "SM90a"),
                                        ("sm_100f", "SM100f")])
def test_nvdisasm_arch_names(arch, name):
    assert sass.nvdisasm_arch(arch) == name


@pytest.mark.parametrize("arch", ["compute_90", "sm90", "sm_90b", "SM_90"])
def test_nvdisasm_arch_refuses_other_spellings(arch):
    with pytest.raises(sass.SassError, match="cannot map arch"):
        sass.nvdisasm_arch(arch)


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
    got = sass.disassemble_raw(code, arch)
    assert [i.text for i in got] == [text for _, text in HAND]
    assert [(i.offset, i.lo, i.hi) for i in got] == [(16 * n, lo, hi) for n, (lo, hi) in enumerate(words)]
    assert all(i.opcode_bits == sass.FFMA_RRRR_OPCODE for i in got)


def test_hand_assembled_modifiers_and_other_forms():
    lo, hi = ffma_words(7, 36, 34, 7)
    forms = [(lo, hi | 1 << 8), (lo | 1 << 63, hi), (lo, hi | 1 << 16),
             ((lo & ~0xFFF) | 0x823, hi), ((lo & ~0xFFF) | 0xA23, hi)]
    got = sass.disassemble_raw(b"".join(sass.join_words(a, b) for a, b in forms), "sm_90")
    assert [i.text for i in got] == ["FFMA R7, -R36, R34, R7", "FFMA R7, R36, -R34, R7", "FFMA.FTZ R7, R36, R34, R7",
                                     "FFMA R7, R36, 4.7644147787043780411e-44, R7", "FFMA R7, R36, c[0x0][0x0], R7"]


# ----------------------------------------------------------------------------------------------
# .nv.info records and ELF flags, byte by byte


def test_nvinfo_records_by_hand():
    data = (b"\x04\x2f\x08\x00" + struct.pack("<II", 3, 40)      # SVAL REGCOUNT: sym 3, 40 registers
            + b"\x03\x1b\xff\x00"                                 # HVAL: 2 bytes
            + b"\x01\x0a\x00\x00" + b"\x02\x0b\x01\x00"           # NVAL, BVAL
            + b"\x04\x1c\x08\x00" + struct.pack("<II", 0x70, 0x90)  # EXIT offsets
            + b"\x07\x99\x00\x00" + b"\x04\x2f\x08\x00" + struct.pack("<II", 1, 1))  # unknown format: stop
    assert list(sass._iter_nvinfo(data)) == [(0x2F, struct.pack("<II", 3, 40)), (0x1B, b"\xff\x00"),
                                             (0x0A, b"\x00\x00"), (0x0B, b"\x01\x00"),
                                             (0x1C, struct.pack("<II", 0x70, 0x90))]
    assert list(sass._iter_nvinfo(b"")) == [] and list(sass._iter_nvinfo(b"\x04")) == []


@pytest.mark.parametrize("flags, arch", [
    (0x6005A04, "sm_90"),          # ABI v2: SM in bits 8..15 (a CUDA 13 sm_90 cubin's flags)
    (0x6005604, "sm_86"),
    (0x4B00, "sm_75"), (0x8200, "sm_130"),
    (0x00500050, "sm_80"),         # older ABI: SM in bits 0..7
    (0x0000004B, "sm_75"),
    (0x5A56, "sm_90"),             # both plausible: bits 8..15 win
    (0x4A4A, "unknown"), (0x8383, "unknown"), (0, "unknown"),
])
def test_arch_from_flags(flags, arch):
    assert sass.Cubin._arch_from_flags(flags) == arch


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_90"])
def test_arch_is_read_from_the_cubin_when_not_given(build, arch):
    data = build("clock_overhead.cu", arch).data
    assert sass.Cubin(data).arch == arch
    assert sass.Cubin(data, arch="sm_89").arch == "sm_89"  # given wins


def _section(data, name):
    elf = ELFFile(io.BytesIO(data))
    for idx, sec in enumerate(elf.iter_sections()):
        if sec.name == name:
            return elf, idx, sec
    raise KeyError(name)


def _with_sh_info(data, name, value):
    """``data`` with section ``name``'s sh_info (offset 44 of an ELF64 section header) set to value."""
    elf, idx, _ = _section(data, name)
    at = elf["e_shoff"] + idx * elf["e_shentsize"] + 44
    return data[:at] + struct.pack("<I", value) + data[at + 4:]


def _with_regcount(data, sym, new, attr=0x2F):
    """``data`` with the .nv.info REGCOUNT record of symbol ``sym`` given ``new`` registers (or, with
    another ``attr``, turned into a record of that attribute)."""
    _, _, sec = _section(data, ".nv.info")
    rec = b"\x04\x2f\x08\x00" + struct.pack("<I", sym)
    start = sec["sh_offset"]
    at = data.index(rec, start, start + sec["sh_size"])
    patched = bytes([4, attr, 8, 0]) + struct.pack("<II", sym, new)
    return data[:at] + patched + data[at + 12:]


def _symbol_index(data, name):
    elf = ELFFile(io.BytesIO(data))
    return next(i for i, s in enumerate(elf.get_section_by_name(".symtab").iter_symbols()) if s.name == name)


TWO_KERNELS = """
extern "C" __global__ void small(float* o) { o[threadIdx.x] = 1.0f; }
extern "C" __global__ void big(float* o, const float* in) {
    float r[40];
#pragma unroll
    for (int i = 0; i < 40; ++i) r[i] = in[i * 32 + threadIdx.x];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 40; ++i) s += r[i] * r[(i * 7) % 40];
    o[threadIdx.x] = s;
}
extern "C" __device__ int vprintf(const char*, const char*);
extern "C" __global__ void pf(int x) { vprintf("%d\\n", (const char*)&x); }
"""


@pytest.fixture(scope="module")
def two_kernels(tmp_path_factory, cache_dir):
    src = tmp_path_factory.mktemp("two") / "two.cu"
    src.write_text(TWO_KERNELS)
    return {arch: compile_cuda(src, arch, cache_dir=cache_dir).cubin for arch in ("sm_86", "sm_90")}


def test_register_count_agrees_with_the_section_header_where_that_is_filled(two_kernels):
    data = two_kernels["sm_86"]
    cubin = sass.Cubin(data)
    for name in ("small", "big"):
        _, _, sec = _section(data, f".text.{name}")
        assert sec["sh_info"] >> 24 > 0
        assert cubin.kernel(name).register_count == sec["sh_info"] >> 24 == cubin.nvinfo_register_count(name)
    assert cubin.kernel("big").register_count > cubin.kernel("small").register_count


def test_register_count_comes_from_nvinfo_when_the_header_says_zero(two_kernels):
    data = two_kernels["sm_90"]
    for name in ("small", "big"):
        assert _section(data, f".text.{name}")[2]["sh_info"] >> 24 == 0  # CUDA 13 leaves it empty on sm_90
    # written by hand into .nv.info: each kernel's own record is the one read
    edited = _with_regcount(_with_regcount(data, _symbol_index(data, "big"), 77), _symbol_index(data, "small"), 13)
    cubin = sass.Cubin(edited)
    assert cubin.kernel("big").register_count == 77 == cubin.nvinfo_register_count("big")
    assert cubin.kernel("small").register_count == 13 == cubin.nvinfo_register_count("small")


def test_register_count_falls_back_to_the_header_without_an_nvinfo_record(two_kernels):
    data = two_kernels["sm_90"]
    sym = _symbol_index(data, "big")
    edited = _with_sh_info(_with_regcount(data, sym, 77, attr=0x7E), ".text.big", (40 << 24) | 10)
    cubin = sass.Cubin(edited)
    assert cubin.nvinfo_register_count("big") is None
    assert cubin.kernel("big").register_count == 40
    # and .nv.info wins where both are there and disagree
    both = _with_sh_info(_with_regcount(data, sym, 77), ".text.big", (40 << 24) | 10)
    assert sass.Cubin(both).kernel("big").register_count == 77


def test_exit_offsets_in_nvinfo_are_protected(two_kernels):
    cubin = sass.Cubin(two_kernels["sm_90"])
    for name in ("small", "big"):
        exits = {i.offset for i in cubin.instructions(name) if i.base_opcode == "EXIT"}
        assert exits and exits <= cubin.kernel(name).protected_offsets


@pytest.mark.parametrize("arch, rel", [("sm_86", b".rel"), ("sm_90", b".rela")])
def test_relocated_instructions_are_protected(two_kernels, arch, rel):
    """A relocation section renamed by hand to apply to pf's code: its offsets (0 and 8 here, the
    format string's address) protect the instruction each falls in."""
    data = two_kernels[arch]
    entries = [(r["r_offset"]) for r in _section(data, rel.decode() + ".nv.constant4")[2].iter_relocations()]
    assert sorted(entries) == [0, 8]
    old = rel + b".nv.constant4\x00"
    new = (rel + b".text.pf\x00").ljust(len(old), b"\x00")
    _, _, names = _section(data, ".shstrtab")
    a, b = names["sh_offset"], names["sh_offset"] + names["sh_size"]
    assert data[a:b].count(old) == 1
    cubin = sass.Cubin(data[:a] + data[a:b].replace(old, new) + data[b:], arch)
    assert cubin.kernel("pf").protected_offsets >= {0} and 8 not in cubin.kernel("pf").protected_offsets
    first = cubin.instructions("pf")[0]
    assert first.offset == 0 and first.base_opcode not in sass._CONTROL_FLOW
    with pytest.raises(sass.PatchRefused, match="listed in .nv.info.pf or relocated"):
        sass.patch(cubin, "pf", [Edit(0, stall=3)])


def test_kernel_lookup(two_kernels):
    cubin = sass.Cubin(two_kernels["sm_86"], name="two.cubin")
    assert sorted(cubin.kernels) == ["big", "pf", "small"]
    with pytest.raises(sass.SassError, match=r"two.cubin has kernels \['big', 'pf', 'small'\]; say which one"):
        cubin.kernel()
    with pytest.raises(sass.SassError, match="two.cubin has no kernel 'x'; it has \\['big', 'pf', 'small'\\]"):
        cubin.text("x")
    big = cubin.kernel("big")
    assert cubin.text("big") == two_kernels["sm_86"][big.text_offset:big.text_offset + big.text_size]
    assert len(cubin.instructions("big")) * 16 == big.text_size


def test_a_cubin_without_kernels(two_kernels):
    data = two_kernels["sm_90"]
    # rename both .text.* sections in the section-name string table: no kernel is left
    blank = data.replace(b".text.big\x00", b".txet.big\x00").replace(b".text.small\x00", b".txet.small\x00")
    blank = blank.replace(b".text.pf\x00", b".txet.pf\x00")
    with pytest.raises(sass.SassError, match="has no kernel 'big'; it has none"):
        sass.Cubin(blank).kernel("big")


def test_not_a_cubin(tmp_path):
    with pytest.raises(sass.SassError, match=r"x.bin is not an ELF file \(first bytes b'MZ\\x90\\x00'\)"):
        sass.Cubin(b"MZ\x90\x00" + bytes(60), name="x.bin")
    with pytest.raises(sass.SassError, match="is not a readable ELF"):
        sass.Cubin(b"\x7fELF" + bytes(8))
    with pytest.raises(sass.SassError, match="does not exist"):
        sass.load_cubin(tmp_path / "nope.cubin")
    p = tmp_path / "k.cubin"
    p.write_bytes(b"\x7fELF" + bytes(8))
    with pytest.raises(sass.SassError, match=str(p)):
        sass.load_cubin(p)


def test_load_cubin_reads_the_file(build, tmp_path):
    p = tmp_path / "c.cubin"
    p.write_bytes(build("clock_overhead.cu", "sm_90").data)
    c = sass.load_cubin(p, arch="sm_90")
    assert c.name == str(p) and c.arch == "sm_90" and list(c.kernels) == ["clock_overhead"]


# ----------------------------------------------------------------------------------------------
# nvdisasm as the listing's source: a lying or failing nvdisasm is caught


FAKE = """#!{python}
import os, re, subprocess, sys
mode = os.environ["FAKE_NVDISASM_MODE"]
if mode == "fail":
    sys.stderr.write("nvdisasm error   : planted failure\\n")
    sys.exit(3)
out = subprocess.run([os.environ["REAL_NVDISASM"], *sys.argv[1:]], capture_output=True, text=True).stdout
if mode == "empty" and "--version" not in sys.argv:
    out = ""
if mode == "flip":
    # the first instruction's lo word: change its last digit
    m = re.search(r"/\\* 0x([0-9a-f]{{16}}) \\*/", out)
    w = m.group(1)
    out = out[:m.start(1)] + w[:-1] + ("0" if w[-1] != "0" else "1") + out[m.end(1):]
sys.stdout.write(out)
"""


@pytest.fixture
def fake_nvdisasm(tmp_path, monkeypatch, cache_dir):
    real = sass.find_nvdisasm()
    sass.nvdisasm_version()  # remember the real version before nvdisasm is replaced
    script = tmp_path / "nvdisasm"
    script.write_text(FAKE.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("REAL_NVDISASM", real)
    monkeypatch.setenv("GPUPROPS_NVDISASM", str(script))
    # a cubin nobody else has disassembled: a listing cache cannot answer for nvdisasm
    src = tmp_path / "salted.cu"
    src.write_text('extern "C" __global__ void salted(int* p) { p[threadIdx.x] = SALT; }\n')
    data = compile_cuda(src, "sm_90", {"SALT": random.randrange(1 << 30)}, cache_dir=cache_dir).cubin

    def run(mode):
        monkeypatch.setenv("FAKE_NVDISASM_MODE", mode)
        # listings are cached by the code's bytes (in memory and under $GPUPROPS_CACHE_DIR): each
        # mode must really ask the (fake) nvdisasm, so it gets an empty cache and an empty memory
        monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "listings" / mode))
        sass.clear_memo()
        return sass.Cubin(data, "sm_90", name="salted")
    yield run
    sass.clear_memo()


def test_listing_words_must_match_the_elf_bytes(fake_nvdisasm):
    assert fake_nvdisasm("pass").instructions("salted")
    with pytest.raises(sass.SassError, match=r"nvdisasm's words at 0x0000 of salted differ from the cubin's bytes"):
        fake_nvdisasm("flip").instructions("salted")


def test_an_empty_listing_is_an_error(fake_nvdisasm):
    with pytest.raises(sass.SassError, match="nvdisasm printed no instructions for kernel 'salted' of salted"):
        fake_nvdisasm("empty").instructions("salted")
    assert sass.disassemble_raw(sass.join_words(*ffma_words(1, 2, 3, 4)), "sm_90") == []


def test_a_failing_nvdisasm_is_reported_with_its_message(fake_nvdisasm):
    with pytest.raises(sass.SassError, match=r"nvdisasm \S+ failed on .*: nvdisasm error   : planted failure"):
        fake_nvdisasm("fail").instructions("salted")
    with pytest.raises(sass.SassError, match="planted failure"):
        sass.disassemble_raw(bytes(16), "sm_90")


def test_disassemble_raw_leaves_no_temporary_file(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sass.disassemble_raw(sass.join_words(*ffma_words(1, 2, 3, 4)), "sm_90")
    assert os.listdir(tmp_path) == []


def test_nvdisasm_from_the_environment_must_be_executable(tmp_path, monkeypatch):
    f = tmp_path / "nvdisasm"
    f.write_text("")
    monkeypatch.setenv("GPUPROPS_NVDISASM", str(f))
    with pytest.raises(sass.SassError, match=f"GPUPROPS_NVDISASM={f} is not an executable"):
        sass.find_nvdisasm()
    f.chmod(0o755)
    assert sass.find_nvdisasm() == str(f)


def test_nvdisasm_search_order(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUPROPS_NVDISASM", raising=False)
    pip = tmp_path / "site" / "nvidia" / "cu13" / "bin"
    pip.mkdir(parents=True)
    (pip / "nvdisasm").write_text("")
    (pip / "nvdisasm").chmod(0o755)
    monkeypatch.setattr(sass.sys, "path", [str(tmp_path / "site")])
    assert sass.find_nvdisasm() == str(pip / "nvdisasm")
    onpath = tmp_path / "bin"
    onpath.mkdir()
    (onpath / "nvdisasm").write_text("")
    (onpath / "nvdisasm").chmod(0o755)
    monkeypatch.setattr(sass.sys, "path", [])
    monkeypatch.setenv("PATH", str(onpath))
    assert sass.find_nvdisasm() == str(onpath / "nvdisasm")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sass.glob, "glob", lambda p: ["/usr/local/cuda-12.4/bin/nvdisasm",
                                                      "/usr/local/cuda-13.0/bin/nvdisasm"])
    assert sass.find_nvdisasm() == "/usr/local/cuda-13.0/bin/nvdisasm"


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


@pytest.mark.parametrize("layout", ["nvidia/cu13/bin", "nvidia/cuda_nvdisasm/bin", "nvidia/cu12/bin"])
def test_nvdisasm_from_each_pip_layout(tmp_path, monkeypatch, layout):
    monkeypatch.delenv("GPUPROPS_NVDISASM", raising=False)
    d = tmp_path / "site" / layout
    d.mkdir(parents=True)
    (d / "nvdisasm").write_text("")
    (d / "nvdisasm").chmod(0o755)
    monkeypatch.setattr(sass.sys, "path", [str(tmp_path / "empty"), str(tmp_path / "site")])
    assert sass.find_nvdisasm() == str(d / "nvdisasm")


VERSION = """#!/bin/sh
echo "nvdisasm: NVIDIA (R) CUDA disassembler"
echo "{line}"
{tail}
"""


@pytest.mark.parametrize("line, version", [("Cuda compilation tools, release 13.5, V13.5.37", "13.5"),
                                           ("Cuda compilation tools, release 12.10, V12.10.1", "12.10"),
                                           ("no release here", "unknown")])
def test_nvdisasm_version(tmp_path, monkeypatch, line, version):
    f = tmp_path / "nvdisasm"
    f.write_text(VERSION.format(line=line, tail=""))
    f.chmod(0o755)
    monkeypatch.setenv("GPUPROPS_NVDISASM", str(f))
    # the version is kept per binary (path, mtime, size), in memory and on disk: a fresh cache folder
    # and memo, so this stand-in's own answer is what is read
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "cache"))
    sass._nvdisasm_identity_of.cache_clear()
    try:
        assert sass.nvdisasm_version() == version
    finally:
        sass._nvdisasm_identity_of.cache_clear()


def test_a_failure_reported_on_stdout_only_is_still_reported(tmp_path, monkeypatch):
    f = tmp_path / "nvdisasm"
    f.write_text(VERSION.format(line="release 13.5", tail='case "$1" in --version) exit 0;; esac\n'
                                                         'echo "only on stdout"; exit 1'))
    f.chmod(0o755)
    monkeypatch.setenv("GPUPROPS_NVDISASM", str(f))
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "cache"))
    sass._nvdisasm_identity_of.cache_clear()
    try:
        with pytest.raises(sass.SassError, match=r"nvdisasm 13.5 failed on \S+\.bin: nvdisasm: NVIDIA \(R\) CUDA "
                                                 r"disassembler\nrelease 13.5\nonly on stdout"):
            sass.disassemble_raw(bytes(16), "sm_90")
    finally:
        sass._nvdisasm_identity_of.cache_clear()


def test_default_cubin_name_in_messages():
    with pytest.raises(sass.SassError, match="^<cubin> is not an ELF file"):
        sass.Cubin(b"nope")


def test_instructions_leave_no_temporary_file(build, tmp_path, monkeypatch):
    import tempfile
    data = build("clock_overhead.cu", "sm_90").data
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert sass.Cubin(data, "sm_90").instructions()
    assert os.listdir(tmp_path) == []


def test_words_are_unsigned():
    assert sass.split_words(b"\xff" * 16) == ((1 << 64) - 1, (1 << 64) - 1)
    lo, hi = sass.split_words(sass.join_words(0x8000000000000000, 0x020F5E0000001804 | 1 << 63))
    assert lo == 1 << 63 and hi >> 63 == 1


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


def test_load_cubin_passes_the_arch_on(build, tmp_path):
    p = tmp_path / "c.cubin"
    p.write_bytes(build("clock_overhead.cu", "sm_90").data)
    assert sass.load_cubin(p, arch="sm_90a").arch == "sm_90a" and sass.load_cubin(p).arch == "sm_90"


def test_patching_one_kernel_of_several(two_kernels):
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
