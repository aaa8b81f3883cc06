"""The sass package's listings (sass/listing.py): nvdisasm found, run and parsed, and the
listing cache. A listing parsed by hand; a stand-in nvdisasm that lies, prints nothing or fails; a
stand-in built from the bytes by rules written here, for how many nvdisasm runs a batch costs and
what each code's listing is; what the memo and the disk cache hold; and the cache seen from outside:
a hit is the listing of the same bytes, a bad entry is never trusted, a changed nvdisasm or arch
misses, and a warm run starts no nvdisasm at all."""

import collections
import hashlib
import json
import os
import random
import re
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap

import pytest
from test_sass_encoding import ffma_words

from pytest_gpuprops import cache, sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.sass import Instruction

# ----------------------------------------------------------------------------------------------
# listings parsed by hand; nvdisasm's arch names


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
# nvdisasm as the listing's source: a lying or failing nvdisasm is caught


FAKE = """#!{python}
import os, re, subprocess, sys
mode = os.environ["FAKE_NVDISASM_MODE"]
if mode == "fail":
    sys.stderr.write("nvdisasm error   : planted failure\\n")
    sys.exit(3)
if mode == "empty" and "--version" not in sys.argv:
    sys.exit(0)  # a listing of nothing (the real nvdisasm's, ~0.5 s, would be thrown away)
out = subprocess.run([os.environ["REAL_NVDISASM"], *sys.argv[1:]], capture_output=True, text=True).stdout
if mode == "flip":
    # the first instruction's lo word: change its last digit
    m = re.search(r"/\\* 0x([0-9a-f]{{16}}) \\*/", out)
    w = m.group(1)
    out = out[:m.start(1)] + w[:-1] + ("0" if w[-1] != "0" else "1") + out[m.end(1):]
sys.stdout.write(out)
"""


@pytest.fixture
def fake_nvdisasm(tmp_path, monkeypatch):
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
    # (compiled into a folder of the test: a salted entry in the shared cache would never be read again)
    data = compile_cuda(src, "sm_90", {"SALT": random.randrange(1 << 30)}, cache_dir=tmp_path / "cubins").cubin

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
    monkeypatch.setattr(sass.listing.sys, "path", [str(tmp_path / "site")])
    assert sass.find_nvdisasm() == str(pip / "nvdisasm")
    onpath = tmp_path / "bin"
    onpath.mkdir()
    (onpath / "nvdisasm").write_text("")
    (onpath / "nvdisasm").chmod(0o755)
    monkeypatch.setattr(sass.listing.sys, "path", [])
    monkeypatch.setenv("PATH", str(onpath))
    assert sass.find_nvdisasm() == str(onpath / "nvdisasm")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sass.listing.glob, "glob", lambda p: ["/usr/local/cuda-12.4/bin/nvdisasm",
                                                      "/usr/local/cuda-13.0/bin/nvdisasm"])
    assert sass.find_nvdisasm() == "/usr/local/cuda-13.0/bin/nvdisasm"


@pytest.mark.parametrize("layout", ["nvidia/cu13/bin", "nvidia/cuda_nvdisasm/bin", "nvidia/cu12/bin"])
def test_nvdisasm_from_each_pip_layout(tmp_path, monkeypatch, layout):
    monkeypatch.delenv("GPUPROPS_NVDISASM", raising=False)
    d = tmp_path / "site" / layout
    d.mkdir(parents=True)
    (d / "nvdisasm").write_text("")
    (d / "nvdisasm").chmod(0o755)
    monkeypatch.setattr(sass.listing.sys, "path", [str(tmp_path / "empty"), str(tmp_path / "site")])
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


def test_instructions_leave_no_temporary_file(build, tmp_path, monkeypatch):
    import tempfile
    data = build("clock_overhead.cu", "sm_90").data
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert sass.Cubin(data, "sm_90").instructions()
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# a missing nvdisasm


def test_nvdisasm_missing_says_which_package_installs_it(monkeypatch, build):
    cubin = build("clock_overhead.cu", "sm_90")
    monkeypatch.setenv("GPUPROPS_NVDISASM", "/nonexistent/nvdisasm")
    with pytest.raises(sass.SassError, match="GPUPROPS_NVDISASM"):
        sass.Cubin(cubin.data, "sm_90").instructions()
    monkeypatch.delenv("GPUPROPS_NVDISASM")
    monkeypatch.setattr(sass.listing.sys, "path", [])
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sass.listing.glob, "glob", lambda pattern: [])
    with pytest.raises(sass.SassError, match="pip install nvidia-cuda-nvdisasm"):
        sass.find_nvdisasm()


# ----------------------------------------------------------------------------------------------
# a stand-in nvdisasm built from the bytes: batches, rebasing, the memo and the disk cache


ARCH = "sm_90"
BUILD = "nvdisasm stand-in, release 99.1, V99.1.7"
SHIFT = sass._BASE_SHIFT

# ----------------------------------------------------------------------------------------------
# the stand-in nvdisasm: one 16-byte word -> one instruction, by these rules

OP, MOV, BRA, ODD, HIDE, FLIP, LIE = 0x01, 0x02, 0x47, 0x66, 0x77, 0x88, 0xEE


def word(kind, arg=0, hi=0):
    """A word of the stand-in's code: ``kind`` in lo bits 0-7, a signed 16-bit ``arg`` in lo bits 16-31."""
    return struct.pack("<QQ", kind | (arg & 0xFFFF) << 16, hi)


def reading(code, base=0):
    """What the stand-in prints for ``code`` loaded at ``base`` (only whole 16-byte words):

    * FFMA words (opcode 0x223) read ``FFMA Rd, Ra, Rb, Rc``; OP reads ``OP_01``; MOV a literal that
      does not depend on the address, ``MOV R1, 0x5``;
    * BRA a branch target, its own address plus ``arg`` (so it moves with ``base``);
    * ODD a literal that moves by half of ``base``: no rebasing explains it;
    * HIDE is not printed at all when ``base`` is not 0; FLIP is printed with another hi word there;
    * LIE is always printed with a lo word that is not its own."""
    out = []
    for pos in range(0, len(code) - 15, 16):
        lo, hi = struct.unpack_from("<QQ", code, pos)
        kind, arg = lo & 0xFF, ((lo >> 16) & 0xFFFF) - ((lo >> 16) & 0x8000) * 2
        at = base + pos
        if kind == HIDE and base:
            continue
        if lo & 0xFFF == 0x223:
            text = f"FFMA R{lo >> 16 & 0xFF}, R{lo >> 24 & 0xFF}, R{lo >> 32 & 0xFF}, R{hi & 0xFF}"
        elif kind == MOV:
            text = f"MOV R1, {hex(arg)}"
        elif kind == BRA:
            text = f"BRA {hex(at + arg)}"
        elif kind == ODD:
            text = f"ODD {hex(base // 2 + pos)}"
        else:
            text = f"OP_{kind:02x}"
        if kind == FLIP and base:
            hi ^= 1
        if kind == LIE:
            lo ^= 1 << 8
        out.append(Instruction(at, text, lo, hi))
    return out


@pytest.fixture
def nv(fresh, monkeypatch):  # noqa: F811
    """The stand-in in nvdisasm's place, fresh counters, a fixed nvdisasm build; the runs it is
    asked for, as (code, arch, base)."""
    calls = []

    def fake(code, arch, *, base=0):
        calls.append((bytes(code), arch, base))
        return reading(code, base)

    monkeypatch.setattr(sass.listing, "disassemble_raw", fake)
    monkeypatch.setattr(sass.listing, "stats", collections.Counter())
    monkeypatch.setattr(sass.listing, "nvdisasm_build", lambda: BUILD)
    monkeypatch.setattr(sass.listing, "nvdisasm_version", lambda: "99.1")
    return calls


def stats():
    return dict(sass.listing.stats)


def alone(*codes):
    return sorted((c, ARCH, 0) for c in codes)


def batch(blob, shift=SHIFT):
    return [(blob, ARCH, 0), (blob, ARCH, shift)]


# ----------------------------------------------------------------------------------------------
# _words_problem: hand-made listings of hand-made code

W = [struct.pack("<QQ", 0x1000 + n, 0x2000 + n) for n in range(4)]


def ins(offset, n, text="X"):
    lo, hi = struct.unpack("<QQ", W[n])
    return Instruction(offset, text, lo, hi)


_WORDS_CASES = {  # id: (listing, code, (offset, message) or None)
    "every-word": ([ins(0, 0), ins(16, 1), ins(32, 2)], W[0] + W[1] + W[2], None),
    "gaps-first-at-0": ([ins(0, 0), ins(32, 2)], W[0] + W[1] + W[2], None),
    "gaps-last-at-the-end": ([ins(16, 1), ins(48, 3)], W[0] + W[1] + W[2] + W[3], None),
    "empty": ([], b"", None),
    "out-of-order": ([ins(16, 0), ins(0, 0)], W[0] + W[0],
                     (0, "offset 0x0000 is out of order or outside the 32-byte code")),
    "repeated": ([ins(0, 0), ins(16, 1), ins(16, 1)], W[0] + W[1] + W[2],
                 (16, "offset 0x0010 is out of order or outside the 48-byte code")),
    "not-aligned-17": ([ins(0, 0), ins(17, 1)], W[0] + W[1],
                       (17, "offset 0x0011 is out of order or outside the 32-byte code")),
    "not-aligned-inside": ([ins(0, 0), ins(24, 1)], W[0] + W[1] + W[2] + W[3],
                           (24, "offset 0x0018 is out of order or outside the 64-byte code")),
    "past-the-end": ([ins(0, 0), ins(32, 1)], W[0] + W[1],
                     (32, "offset 0x0020 is out of order or outside the 32-byte code")),
    "half-a-word-left": ([ins(0, 0), ins(48, 3)], W[0] + W[1] + W[2] + W[3][:8],
                         (48, "offset 0x0030 is out of order or outside the 56-byte code")),
    "negative": ([ins(-16, 0)], W[0] + W[1], (-16, "offset -0x010 is out of order or outside the 32-byte code")),
    "word-differs": ([ins(0, 0), ins(16, 2), ins(32, 2)], W[0] + W[1] + W[2],
                     (16, "the words at 0x0010 differ from the code's bytes")),
    "word-differs-after-gap": ([ins(0, 0), ins(32, 1)], W[0] + W[1] + W[2],
                               (32, "the words at 0x0020 differ from the code's bytes")),
    "one-word-differs": ([ins(0, 1)], W[0], (0, "the words at 0x0000 differ from the code's bytes")),
}


@pytest.mark.parametrize("case", list(_WORDS_CASES))
def test_words_problem_by_hand(case):
    listing, code, problem = _WORDS_CASES[case]
    assert sass._words_problem(listing, code) == problem


# ----------------------------------------------------------------------------------------------
# _rebase_text


@pytest.mark.parametrize("at0, shifted, base, text", [
    ("X 0x5, 0x130 .Y", f"X 0x5, {hex(0x130 + SHIFT)} .Y", 0x100, "X 0x5, 0x30 .Y"),
    ("BRA 0x100", f"BRA {hex(0x100 + SHIFT)}", 0x100, "BRA 0x0"),        # a branch to the code's own start
    ("BRA 0xf0", f"BRA {hex(0xF0 + SHIFT)}", 0x100, None),               # into the code before it
    ("BRA 0x200", "BRA 0x300", 0x100, None),                             # moved, not by the shift
    ("X 0x5, 0x7", "X 0x5, 0x7", 0, "X 0x5, 0x7"),
    ("X 0x5", "Y 0x5", 0, None),
    ("X 0x5", "X 0x5, 0x6", 0, None),
])
def test_rebase_text_by_hand(at0, shifted, base, text):
    assert sass._rebase_text(at0, shifted, base) == text


# ----------------------------------------------------------------------------------------------
# _disassemble_codes: batches, rebasing, codes read again alone


def test_a_batch_is_two_runs_and_reads_each_code_as_alone(nv):
    codes = [word(OP) + word(MOV, 5),
             word(OP) + word(BRA, -16) + word(BRA, 16) + word(MOV, 5),  # back to its start; forward
             word(BRA, 0) + word(OP)]
    sass.listing.stats["nvdisasm_runs"] = 5  # counted on top of what was there
    got = sass._disassemble_codes(codes, ARCH)
    assert got == [reading(c) for c in codes]
    assert [i.text for i in got[1]] == ["OP_01", "BRA 0x0", "BRA 0x30", "MOV R1, 0x5"]
    assert [i.text for i in got[2]] == ["BRA 0x0", "OP_01"]
    assert sorted(nv) == batch(b"".join(codes))
    assert stats() == {"nvdisasm_runs": 7}


def test_one_code_is_one_run_at_address_zero(nv):
    sass.listing.stats["nvdisasm_runs"] = 5
    code = word(OP) + word(BRA, -16)
    assert sass._disassemble_codes([code], ARCH) == [reading(code)]
    assert nv == [(code, ARCH, 0)] and stats() == {"nvdisasm_runs": 6}


def test_codes_that_cannot_be_rebased_are_read_again_alone(nv):
    odd = word(OP) + word(ODD) + word(OP) + word(MOV, 5)  # a literal that moved by half the shift, then more
    clean = word(OP) + word(BRA, 16) + word(OP)    # read in the batch (right after a code read again)
    hidden = word(HIDE) + word(OP)                 # no twin in the shifted run
    flipped = word(OP) + word(FLIP)                # a twin with other words
    clean2 = word(MOV, 5)
    short = word(OP) + word(OP)[:8]                # last, half a word over: its one instruction is read
    codes = [odd, clean, hidden, flipped, clean2, short]
    sass.listing.stats["nvdisasm_runs"] = 5
    got = sass._disassemble_codes(codes, ARCH)
    assert got == [reading(c) for c in codes]
    assert [i.text for i in got[0]] == ["OP_01", "ODD 0x10", "OP_01", "MOV R1, 0x5"]
    assert len(got[5]) == 1
    assert sorted(nv) == sorted(batch(b"".join(codes)) + alone(odd, hidden, flipped))
    assert stats() == {"nvdisasm_runs": 5 + 2 + 3}


def test_a_code_after_one_of_another_size_is_read_again_alone(nv):
    short, after = word(OP)[:8], word(OP) + word(MOV, 5)
    got = sass._disassemble_codes([short, after, word(OP)], ARCH)
    assert got == [[], reading(after), reading(word(OP))]
    assert sorted(nv) == sorted(batch(short + after + word(OP)) + alone(short, after, word(OP)))


@pytest.mark.parametrize("sizes, runs", [
    ((10, 10, 11), [[0, 1, 2]]),                 # 496 bytes, under half the shift: one batch
    ((16, 16), [[0], [1]]),                      # 512 bytes: halves, one code each
    ((8, 8, 8, 8), [[0, 1], [2, 3]]),            # halves of two codes each: a batch each
    ((16, 8, 8), [[0], [1, 2]]),                 # an odd count: the first half is the smaller
])
def test_a_blob_of_half_the_shift_or_more_is_read_in_halves(nv, monkeypatch, sizes, runs):
    shift = 1 << 10
    monkeypatch.setattr(sass.listing, "_BASE_SHIFT", shift)
    codes = [b"".join(word(OP if k % 3 else BRA, -16 * (k % 4)) for k in range(n)) for n in sizes]
    got = sass._disassemble_codes(codes, ARCH)
    assert got == [reading(c) for c in codes]
    want = []
    for part in runs:
        blob = b"".join(codes[n] for n in part)
        want += batch(blob, shift) if len(part) > 1 else [(blob, ARCH, 0)]
    assert sorted(nv) == sorted(want)
    assert stats() == {"nvdisasm_runs": len(want)}


def test_the_real_nvdisasm_batch_reads_as_each_code_alone(fresh, monkeypatch):  # noqa: F811
    """nvdisasm itself, on hand-assembled words: a branch forward is rebased; a branch back past
    address 0 prints a negative address, which no shift explains, so that code is read alone."""
    ffma = sass.join_words(*ffma_words(1, 2, 3, 4))
    fwd = sass.join_words(0x7947, 0x000FC00003800000)                  # BRA to the next instruction
    back = sass.join_words(0xFFFFFFF000007947, 0x000FC0000383FFFF)     # BRA 0x1000 back from the next one
    codes = [ffma, ffma + fwd, back + ffma]
    (fresh / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(fresh / "tmp"))
    monkeypatch.setattr(sass.listing, "stats", collections.Counter())
    got = sass.code_listings(codes, ARCH)
    assert [[(i.offset, i.text) for i in listing] for listing in got] == [
        [(0, "FFMA R1, R2, R3, R4")], [(0, "FFMA R1, R2, R3, R4"), (0x10, "BRA 0x20")],
        [(0, "BRA -0xff0"), (0x10, "FFMA R1, R2, R3, R4")]]
    assert sass.listing.stats["nvdisasm_runs"] == 3 and os.listdir(fresh / "tmp") == []


# ----------------------------------------------------------------------------------------------
# code_listings: the memo, the disk cache, and what a miss costs


def key_of(code, arch=ARCH, build=BUILD):
    """The listing key written out by hand: SHA-256 over length-prefixed mode, format, arch, build
    and the code's SHA-256."""
    h = hashlib.sha256()
    for part in (b"raw@0", b"2", arch.encode(), build.encode(), hashlib.sha256(code).digest()):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def entry_of(root, code, arch=ARCH):
    return root / "sass" / "listings" / arch / f"{key_of(code, arch)}.json"


def payload_of(code, texts, arch=ARCH, offsets=None):
    """An entry as written by hand: nvdisasm's texts, their offsets where not every word was
    printed; the words themselves are the code's."""
    return {"mode": "raw@0", "format": 2, "arch": arch, "nvdisasm": BUILD,
            "code_sha256": hashlib.sha256(code).hexdigest(), "texts": texts, "offsets": offsets}


def texts_of(code):
    return [i.text for i in reading(code)]


A = word(OP) + word(BRA, -16)
B = word(MOV, 5) + word(OP) + word(BRA, -32)
C = word(OP, hi=7)


def test_a_miss_is_read_in_one_batch_and_kept_in_memory_and_on_disk(nv, fresh):  # noqa: F811
    assert sass.code_listings([A, B, A], ARCH) == [reading(A), reading(B), reading(A)]
    assert sorted(nv) == batch(A + B)  # a code asked for twice is read once
    assert stats() == {"disassembled": 2, "nvdisasm_runs": 2}
    for code in (A, B):
        assert cache.read_json(entry_of(fresh, code)) == payload_of(code, texts_of(code))
    assert sass._memo == {key_of(A): tuple(reading(A)), key_of(B): tuple(reading(B))}

    # in the same process: from memory, even with the disk cache gone
    for code in (A, B):
        entry_of(fresh, code).unlink()
    assert sass.code_listings([B, A, B], ARCH) == [reading(B), reading(A), reading(B)]
    assert len(nv) == 2 and stats() == {"disassembled": 2, "nvdisasm_runs": 2, "memo_hits": 2}

    # a new process: from the disk (B and A written back when read again), then from memory
    sass.clear_memo()
    assert sass.code_listings([A], ARCH) == [reading(A)]
    assert nv[2:] == [(A, ARCH, 0)] and stats() == {"disassembled": 3, "nvdisasm_runs": 3, "memo_hits": 2}
    sass.code_listings([B], ARCH)
    sass.clear_memo()
    assert sass.code_listings([A, B, A], ARCH) == [reading(A), reading(B), reading(A)]
    assert len(nv) == 4 and stats() == {"disassembled": 4, "nvdisasm_runs": 4, "memo_hits": 2, "disk_hits": 2}
    assert sass.code_listings([A, B], ARCH) == [reading(A), reading(B)]
    assert len(nv) == 4 and stats() == {"disassembled": 4, "nvdisasm_runs": 4, "memo_hits": 4, "disk_hits": 2}


def test_an_entry_written_by_hand_is_read_and_nvdisasm_is_not_started(nv, fresh):  # noqa: F811
    cache.write_json(entry_of(fresh, A), payload_of(A, ["BY HAND", "BY HAND TOO"]))
    got = sass.code_listings([A], ARCH)
    assert [(i.offset, i.text, i.raw) for i in got[0]] == [(0, "BY HAND", A[:16]), (16, "BY HAND TOO", A[16:])]
    assert nv == [] and stats() == {"disk_hits": 1}


def test_an_entry_of_some_of_the_words_reads_them_at_their_offsets(nv, fresh):  # noqa: F811
    code = word(OP) + word(MOV, 5) + word(OP, hi=7)
    cache.write_json(entry_of(fresh, code), payload_of(code, ["FIRST", "THIRD"], offsets=[0, 32]))
    got = sass.code_listings([code], ARCH)[0]
    assert [(i.offset, i.text, i.raw) for i in got] == [(0, "FIRST", code[:16]), (32, "THIRD", code[32:])]
    assert nv == []


def test_an_entry_is_written_dense_or_with_offsets_as_read(nv, fresh):  # noqa: F811
    """A listing of every word is stored without offsets; one that skips a word keeps them, and
    reads back equal to what nvdisasm printed."""
    code = word(OP) + word(MOV, 5) + word(OP, hi=7)
    listing = tuple(sass.Instruction(i.offset, i.text, i.lo, i.hi) for i in reading(code) if i.offset != 16)
    key = sass.listing_key(code, ARCH)
    sass.listing._disk_put(key, listing, code, ARCH, BUILD)
    assert cache.read_json(entry_of(fresh, code))["offsets"] == [0, 32]
    assert sass.listing._disk_get(key, code, ARCH, BUILD) == listing
    sass.listing._disk_put(key, tuple(reading(code)), code, ARCH, BUILD)
    assert cache.read_json(entry_of(fresh, code)) == payload_of(code, texts_of(code))
    assert sass.listing._disk_get(key, code, ARCH, BUILD) == tuple(reading(code))


@pytest.mark.parametrize("damage", [
    dict(mode="raw@1"), dict(format=1), dict(arch="sm_86"), dict(nvdisasm="nvdisasm 98.0"),
    dict(code_sha256=hashlib.sha256(B).hexdigest()),     # an entry of other bytes
    dict(texts=[]), dict(texts="OP_01"), dict(texts=[7]),  # no text, not a list, a text not a str
    dict(texts=["OP_01", "OP_01"]),                      # more texts than the code has words
    dict(offsets=[16]), dict(offsets=[8]), dict(offsets=[-16]),  # outside the code, between words
    dict(offsets=[False]), dict(offsets=[0.0]), dict(offsets=[0, 0]), dict(offsets={}),
    dict(instructions=[[0, "OP_01", 1, 1]]),             # the first layout (no texts)
])
def test_an_entry_of_another_kind_or_malformed_is_ignored_and_rewritten(nv, fresh, damage):  # noqa: F811
    code = word(OP, hi=1)
    assert texts_of(code) == ["OP_01"]
    entry = {**payload_of(code, texts_of(code)), **damage}
    if "instructions" in damage:
        del entry["texts"], entry["offsets"]
    cache.write_json(entry_of(fresh, code), entry)
    assert sass.code_listings([code], ARCH) == [reading(code)]
    assert nv == [(code, ARCH, 0)] and stats() == {"disassembled": 1, "nvdisasm_runs": 1}
    assert cache.read_json(entry_of(fresh, code)) == payload_of(code, texts_of(code))


def test_the_memo_keeps_the_most_recently_used(nv, fresh, monkeypatch):  # noqa: F811
    monkeypatch.setattr(sass.listing, "_MEMO_MAX", 2)
    for code in (A, B, A, C):  # A used again after B: B is the one forgotten for C
        sass.code_listings([code], ARCH)
    assert stats() == {"disassembled": 3, "nvdisasm_runs": 3, "memo_hits": 1}
    assert list(sass._memo) == [key_of(A), key_of(C)]
    assert sass.code_listings([C, A], ARCH) == [reading(C), reading(A)]
    assert sass.code_listings([B], ARCH) == [reading(B)]
    assert stats() == {"disassembled": 3, "nvdisasm_runs": 3, "memo_hits": 3, "disk_hits": 1}
    assert list(sass._memo) == [key_of(A), key_of(B)]


def test_a_listing_with_other_words_is_refused_and_kept_nowhere(nv, fresh):  # noqa: F811
    code = word(OP) + word(LIE) + word(OP)
    with pytest.raises(sass.ListingMismatch) as exc:
        sass.code_listings([code], ARCH)
    assert str(exc.value) == "nvdisasm 99.1 (sm_90): the words at 0x0010 differ from the code's bytes"
    assert exc.value.offset == 0x10
    assert sass._memo == {} and not entry_of(fresh, code).exists()


# ----------------------------------------------------------------------------------------------
# disassemble_raw: the command line


def test_disassemble_raw_runs_raw_mode_at_the_base_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def run(args, path):
        with open(path, "rb") as f:
            seen.append((args, f.read(), path))
        return ("        /*0000*/                   NOP ;                     /* 0x0000000000007918 */\n"
                "                                                             /* 0x000fc00000000000 */\n")

    monkeypatch.setattr(sass.listing, "_run_nvdisasm", run)
    code = bytes(range(32))
    nop = [Instruction(0, "NOP", 0x7918, 0x000FC00000000000)]
    assert sass.disassemble_raw(code, "sm_86") == nop
    assert sass.disassemble_raw(code, "sm_90a", base=SHIFT) == nop
    assert [(a, c) for a, c, _ in seen] == [(["-b", "SM86", "-hex"], code),
                                           (["-b", "SM90a", "-hex", "--base-address", "0x10000000"], code)]
    assert os.listdir(tmp_path) == []  # the code's file is gone


# ----------------------------------------------------------------------------------------------
# the listing cache, seen from outside


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache root and an empty in-process memo (both restored to normal use afterwards)."""
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path))
    sass.clear_memo()
    sass._nvdisasm_identity_of.cache_clear()
    yield tmp_path
    sass.clear_memo()
    sass._nvdisasm_identity_of.cache_clear()


@pytest.fixture
def spawns(monkeypatch):
    """Count the processes the sass layer starts (nvdisasm runs and --version queries)."""
    calls = []
    real = subprocess.run

    def counting(cmd, *a, **k):
        calls.append(list(cmd))
        return real(cmd, *a, **k)

    monkeypatch.setattr(sass.listing.subprocess, "run", counting)
    return calls


def _entry(cubin, kernel=None):
    code = cubin.text(kernel)
    return sass.listing_path(sass.listing_key(code, cubin.arch), cubin.arch)


def test_a_hit_returns_the_same_listing_and_spawns_nothing(fresh, build, spawns):
    cubin = build("ffma.cu", "sm_86", ILP=1, UNROLL=8)
    cold = sass.Cubin(cubin.data, "sm_86").instructions("ffma")
    assert any("-b" in c for c in spawns)
    path = _entry(cubin)
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]
    sass.clear_memo()
    sass._nvdisasm_identity_of.cache_clear()
    spawns.clear()
    warm = sass.Cubin(cubin.data, "sm_86").instructions("ffma")
    assert warm == cold and spawns == []
    assert cold == sass.disassemble_raw(cubin.text("ffma"), "sm_86")  # what nvdisasm prints, exactly


@pytest.fixture(scope="module")
def ld4(build):
    """A cubin and its listing, read with the normal cache (before any test empties it)."""
    cubin = build("smem_latency_ld.cu", "sm_80", UNROLL=4)
    return cubin, cubin.instructions("smem_latency_ld")


@pytest.fixture
def reads(monkeypatch, ld4):
    """Stand-in for nvdisasm runs (these tests are about the cache, not nvdisasm): each batch read
    is counted and answered with the real listing of ld4's code."""
    cubin, listing = ld4
    calls = []

    def fake(codes, arch):
        calls.append((len(codes), arch))
        assert all(c == cubin.text() for c in codes)
        return [list(listing) for _ in codes]

    monkeypatch.setattr(sass.listing, "_disassemble_codes", fake)
    return calls


@pytest.mark.parametrize("damage", ["garbage", "truncated", "checksum", "other-code", "a-text-short", "other-arch"])
def test_a_bad_entry_is_ignored_and_rewritten(fresh, ld4, reads, damage):
    cubin, good = ld4
    assert cubin.instructions("smem_latency_ld") == good and len(reads) == 1  # a cold cache reads once
    path = _entry(cubin)
    head, body = path.read_bytes().split(b"\n", 1)
    payload = json.loads(body)
    if damage == "garbage":
        path.write_bytes(b"\x00not json")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif damage == "checksum":  # a text changed, the checksum not updated
        payload["texts"][3] = "NOP"
        path.write_bytes(head + b"\n" + json.dumps(payload).encode())
    else:  # well-formed entries (checksum recomputed) that do not describe these bytes
        if damage == "other-code":
            payload["code_sha256"] = hashlib.sha256(b"other").hexdigest()
        elif damage == "a-text-short":
            del payload["texts"][3]
        else:
            payload["arch"] = "sm_90"
        cache.write_json(path, payload)
        assert cache.read_json(path) == payload
    sass.clear_memo()
    assert cubin.instructions("smem_latency_ld") == good
    assert len(reads) == 2  # read again ...
    assert cache.read_json(path)["texts"] == [i.text for i in good]  # ... rewritten
    sass.clear_memo()
    assert cubin.instructions("smem_latency_ld") == good and len(reads) == 2  # and then trusted


def test_another_nvdisasm_or_arch_misses(fresh, ld4, reads, monkeypatch):
    cubin, good = ld4
    code = cubin.text()
    assert sass.code_listing(code, "sm_80") == good and len(reads) == 1
    assert sass.listing_key(code, "sm_80") != sass.listing_key(code, "sm_86")
    assert sass.listing_key(code, "sm_80") != sass.listing_key(code, "sm_80", build="nvdisasm 99.9")
    sass.clear_memo()
    sass.code_listing(code, "sm_80")
    assert len(reads) == 1  # same bytes, arch and nvdisasm: a hit
    sass.code_listing(code, "sm_86")
    assert reads[-1] == (1, "sm_86") and len(reads) == 2  # the same bytes for another arch: a miss
    monkeypatch.setattr(sass.listing, "nvdisasm_build", lambda: "Cuda compilation tools, release 99.9, V99.9.1")
    sass.clear_memo()
    sass.code_listing(code, "sm_80")
    assert len(reads) == 3  # another nvdisasm build: a miss


def test_a_warm_run_spawns_nvdisasm_zero_times(build, spawns):
    """Listings, the nvdisasm version, single patches, patch_many and a timing build: once they have
    been read (by this session's prefetch, an earlier run, or the first pass here), a process with an
    empty memory reads all of it from disk."""
    from pytest_gpuprops.kernel_spec import KernelSpec
    from pytest_gpuprops.timing import build_for_timing

    def work():
        cubin = sass.Cubin(build("regbank_ffma.cu", "sm_90", NFFMA=8).data, "sm_90")
        ins = cubin.instructions("regbank_ffma")
        scratch = sass.ffma_destinations(ins)
        one = sass.patch(cubin, "regbank_ffma", sass.ffma_operand_edits(ins, 8, 10, 16, 1), scratch=scratch)
        many = sass.patch_many(cubin, "regbank_ffma", [sass.ffma_operand_edits(ins, a, a, a, 0) for a in (8, 9)],
                               scratch=scratch)
        ld = sass.Cubin(build("smem_latency_ld.cu", "sm_90", UNROLL=50).data, "sm_90")
        timed = build_for_timing(ld, KernelSpec("smem_latency_ld.cu", "smem_latency_ld", {"UNROLL": 50},
                                                region={"LDS": 50}))
        return ins, one.cubin, one.instructions, [m.cubin for m in many], timed, sass.nvdisasm_version()

    cold = work()
    sass.clear_memo()
    sass._nvdisasm_identity_of.cache_clear()
    spawns.clear()
    assert work() == cold
    assert spawns == []


def test_a_cached_listing_does_not_skip_verification(build, monkeypatch):
    """The cache holds what nvdisasm printed for some bytes, never a verdict: a plan that the
    cached listing contradicts is refused, as with a fresh nvdisasm run."""
    cubin = build("regbank_ffma.cu", "sm_86", NFFMA=8)
    ins = cubin.instructions("regbank_ffma")
    scratch = sass.ffma_destinations(ins)
    edits = sass.ffma_operand_edits(ins, 8, 10, 16, 0)[:1]
    sass.patch(cubin, "regbank_ffma", edits, scratch=scratch)  # the patched listing is now cached
    real = sass._plan_one
    monkeypatch.setattr(sass.patching, "_plan_one", lambda *a, **k: (lambda r: (r[0], r[1], r[2].replace("R8", "R9")))(
        real(*a, **k)))
    with pytest.raises(sass.PatchRefused, match="intended"):
        sass.patch(cubin, "regbank_ffma", edits, scratch=scratch)


def test_a_batch_reads_each_code_as_nvdisasm_reads_it_alone(fresh, build):
    """Codes back to back in one run: branch targets rebased to each code's own start."""
    codes = [build("regbank_ffma.cu", "sm_90", NFFMA=8).text(), build("smem_bandwidth.cu", "sm_90", VEC=4, LOAD=1).text()]
    batched = sass.code_listings(codes, "sm_90")
    assert sum(i.base_opcode in ("BRA", "BSSY") and "0x" in i.text for i in batched[1]) >= 2
    assert batched == [sass.disassemble_raw(c, "sm_90") for c in codes]


def test_raw_listing_is_the_elf_listing_with_addresses_for_labels(build):
    """Cubin.instructions reads raw mode; nvdisasm's ELF mode prints the same, except that a branch
    target is a label (`(.L_x_N)) instead of the kernel-relative address the label stands for."""
    cubin = build("smem_bandwidth.cu", "sm_86", VEC=2, LOAD=0)
    raw = cubin.instructions("smem_bandwidth")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin.data)
    try:
        text = sass._run_nvdisasm(["-c", "-hex"], f.name)
    finally:
        os.unlink(f.name)
    labels, pending = {}, []
    for line in text.splitlines():
        if m := re.match(r"^\s*(\.L_x_\d+):", line):
            pending.append(m.group(1))
        elif m := re.search(r"/\*([0-9a-f]{4,})\*/", line):
            labels.update({name: int(m.group(1), 16) for name in pending})
            pending = []
    elf = sass._parse_listing(text)["smem_bandwidth"]
    assert [(i.offset, i.lo, i.hi) for i in elf] == [(i.offset, i.lo, i.hi) for i in raw]
    branches = 0
    for e, r in zip(elf, raw):
        if e.text != r.text:
            branches += 1
            assert re.sub(r"`\((\.L_x_\d+)\)", lambda m: hex(labels[m.group(1)]), e.text) == r.text
    assert branches >= 2


def test_nvdisasm_version_is_cached_on_disk(fresh, spawns):
    v = sass.nvdisasm_version()
    assert re.fullmatch(r"\d+\.\d+", v) and sum("--version" in c for c in spawns) == 1
    sass._nvdisasm_identity_of.cache_clear()
    spawns.clear()
    assert sass.nvdisasm_version() == v and "V" in sass.nvdisasm_build() and spawns == []
    entries = list((fresh / "sass").glob("nvdisasm-*.json"))
    assert len(entries) == 1
    entries[0].write_text("{}")  # unreadable: asked again, and rewritten
    sass._nvdisasm_identity_of.cache_clear()
    assert sass.nvdisasm_version() == v and sum("--version" in c for c in spawns) == 1
    assert cache.read_json(entries[0])["release"] == v


def test_batches_of_several_archs_read_in_parallel_chunks_as_each_code_alone(build, tmp_path, monkeypatch):
    """code_listings_by_arch with two batches at once and nothing cached: the codes of two archs are
    read in chunks of neighbours on threads (a chunk of two in one batched run of two, a chunk of one
    alone), and every listing is the one read before, code by code."""
    from pytest_gpuprops.sass import listing
    codes = {a: [build("regbank_ffma.cu", a, NFFMA=8).text(), build("smem_latency_st.cu", a, UNROLL=4).text(),
                 build("ffma.cu", a, ILP=1, UNROLL=8).text()] for a in ("sm_86", "sm_90")}
    before = {a: sass.code_listings(cs, a) for a, cs in codes.items()}  # the session's listings
    monkeypatch.setattr(listing, "batch_workers", lambda: 2)
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path))
    sass.clear_memo()
    try:
        runs = sass.stats["nvdisasm_runs"]
        assert sass.code_listings_by_arch(codes) == before
        assert sass.stats["nvdisasm_runs"] - runs == 2 * (2 + 1)
    finally:
        sass.clear_memo()


@pytest.mark.parametrize("sizes, n", [([1, 1, 1, 1, 1, 5], 3), ([4] * 10, 4), ([7], 5), ([2, 9, 1, 1, 8, 3, 3], 2)])
def test_chunks_are_runs_of_neighbours_of_about_equal_size(sizes, n):
    from pytest_gpuprops.sass.listing import _chunks
    items = list(range(len(sizes)))
    chunks = _chunks(items, sizes, n)
    assert [i for c in chunks for i in c] == items and all(chunks) and len(chunks) <= n
    # no chunk holds more than its share and one more code
    assert all(sum(sizes[i] for i in c) <= sum(sizes) / n + max(sizes) for c in chunks)
    assert len(chunks) == min(n, len(sizes)) or sizes == [1, 1, 1, 1, 1, 5]  # the 5 is half of all
