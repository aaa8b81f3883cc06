"""Listings against hand-written oracles: where and why a listing is not a reading of its code, how
many nvdisasm runs a batch costs and what each code's listing is (a stand-in nvdisasm, built from the
bytes by rules written here), what the memo and the disk cache hold, and a cubin's ELF read once."""

import collections
import hashlib
import os
import struct
import tempfile

import pytest
from test_cache import fresh  # noqa: F401  (an empty cache root and memo)
from test_oracle_sass import ffma_words

from pytest_gpuprops import cache, sass
from pytest_gpuprops.sass import Edit, Instruction

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

    monkeypatch.setattr(sass, "disassemble_raw", fake)
    monkeypatch.setattr(sass, "stats", collections.Counter())
    monkeypatch.setattr(sass, "nvdisasm_build", lambda: BUILD)
    monkeypatch.setattr(sass, "nvdisasm_version", lambda: "99.1")
    return calls


def stats():
    return dict(sass.stats)


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
    sass.stats["nvdisasm_runs"] = 5  # counted on top of what was there
    got = sass._disassemble_codes(codes, ARCH)
    assert got == [reading(c) for c in codes]
    assert [i.text for i in got[1]] == ["OP_01", "BRA 0x0", "BRA 0x30", "MOV R1, 0x5"]
    assert [i.text for i in got[2]] == ["BRA 0x0", "OP_01"]
    assert sorted(nv) == batch(b"".join(codes))
    assert stats() == {"nvdisasm_runs": 7}


def test_one_code_is_one_run_at_address_zero(nv):
    sass.stats["nvdisasm_runs"] = 5
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
    sass.stats["nvdisasm_runs"] = 5
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
    monkeypatch.setattr(sass, "_BASE_SHIFT", shift)
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
    monkeypatch.setattr(sass, "stats", collections.Counter())
    got = sass.code_listings(codes, ARCH)
    assert [[(i.offset, i.text) for i in listing] for listing in got] == [
        [(0, "FFMA R1, R2, R3, R4")], [(0, "FFMA R1, R2, R3, R4"), (0x10, "BRA 0x20")],
        [(0, "BRA -0xff0"), (0x10, "FFMA R1, R2, R3, R4")]]
    assert sass.stats["nvdisasm_runs"] == 3 and os.listdir(fresh / "tmp") == []


# ----------------------------------------------------------------------------------------------
# code_listings: the memo, the disk cache, and what a miss costs


def key_of(code, arch=ARCH, build=BUILD):
    """The listing key written out by hand: SHA-256 over length-prefixed mode, format, arch, build
    and the code's SHA-256."""
    h = hashlib.sha256()
    for part in (b"raw@0", b"1", arch.encode(), build.encode(), hashlib.sha256(code).digest()):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def entry_of(root, code, arch=ARCH):
    return root / "sass" / "listings" / arch / f"{key_of(code, arch)}.json"


def payload_of(code, rows, arch=ARCH):
    return {"mode": "raw@0", "format": 1, "arch": arch, "nvdisasm": BUILD,
            "code_sha256": hashlib.sha256(code).hexdigest(), "instructions": rows}


def rows_of(code):
    return [[i.offset, i.text, i.lo, i.hi] for i in reading(code)]


A = word(OP) + word(BRA, -16)
B = word(MOV, 5) + word(OP) + word(BRA, -32)
C = word(OP, hi=7)


def test_a_miss_is_read_in_one_batch_and_kept_in_memory_and_on_disk(nv, fresh):  # noqa: F811
    assert sass.code_listings([A, B, A], ARCH) == [reading(A), reading(B), reading(A)]
    assert sorted(nv) == batch(A + B)  # a code asked for twice is read once
    assert stats() == {"disassembled": 2, "nvdisasm_runs": 2}
    for code in (A, B):
        assert cache.read_json(entry_of(fresh, code)) == payload_of(code, rows_of(code))
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
    cache.write_json(entry_of(fresh, A), payload_of(A, [[0, "BY HAND", *struct.unpack("<QQ", A[:16])],
                                                        [16, "BY HAND TOO", *struct.unpack("<QQ", A[16:])]]))
    got = sass.code_listings([A], ARCH)
    assert [i.text for i in got[0]] == ["BY HAND", "BY HAND TOO"]
    assert nv == [] and stats() == {"disk_hits": 1}


@pytest.mark.parametrize("damage", [
    dict(mode="raw@1"), dict(format=2), dict(arch="sm_86"), dict(nvdisasm="nvdisasm 98.0"),
    dict(code_sha256=hashlib.sha256(B).hexdigest()), dict(instructions=[]),
    dict(instructions=[[0, "OP_01", 1, True]]),          # a bool is not a word
    dict(instructions=[[0, 7, 1, 1]]),                   # a text that is not a str
    dict(instructions=[[False, "OP_01", 1, 1]]),         # an offset that is not an int
    dict(instructions=[[0.0, "OP_01", 1, 1]]),
    dict(instructions=[[0, "OP_01", 1]]),                # a row of three
    dict(instructions=[[0, "OP_01", 1, 2]]),             # other words
])
def test_an_entry_of_another_kind_or_malformed_is_ignored_and_rewritten(nv, fresh, damage):  # noqa: F811
    code = word(OP, hi=1)  # lo = hi = 1: a bool row would pack to these very bytes
    assert rows_of(code) == [[0, "OP_01", 1, 1]]
    cache.write_json(entry_of(fresh, code), {**payload_of(code, rows_of(code)), **damage})
    assert sass.code_listings([code], ARCH) == [reading(code)]
    assert nv == [(code, ARCH, 0)] and stats() == {"disassembled": 1, "nvdisasm_runs": 1}
    assert cache.read_json(entry_of(fresh, code)) == payload_of(code, rows_of(code))


def test_the_memo_keeps_the_most_recently_used(nv, fresh, monkeypatch):  # noqa: F811
    monkeypatch.setattr(sass, "_MEMO_MAX", 2)
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

    monkeypatch.setattr(sass, "_run_nvdisasm", run)
    code = bytes(range(32))
    nop = [Instruction(0, "NOP", 0x7918, 0x000FC00000000000)]
    assert sass.disassemble_raw(code, "sm_86") == nop
    assert sass.disassemble_raw(code, "sm_90a", base=SHIFT) == nop
    assert [(a, c) for a, c, _ in seen] == [(["-b", "SM86", "-hex"], code),
                                           (["-b", "SM90a", "-hex", "--base-address", "0x10000000"], code)]
    assert os.listdir(tmp_path) == []  # the code's file is gone


# ----------------------------------------------------------------------------------------------
# cubins written byte by byte


def elf(kernels, nvinfo=b"", flags=90 << 8):
    """An ELF64 CUDA cubin: for each ``(name, code, nvinfo_k, relocated_offsets)`` a .text.<name>
    section, a symbol, a .nv.info.<name> section (where ``nvinfo_k``) and a .rel.text.<name> section
    (where offsets); ``nvinfo`` the .nv.info section. Symbol n + 1 is kernel n."""
    names = [""]

    def name(s):
        names.append(s)
        return len(b"\0".join(n.encode() for n in names[:-1])) + 1

    secs = []  # (name offset, type, data, link, info, entsize)
    strtab = b"\0" + b"".join(k[0].encode() + b"\0" for k in kernels)
    secs.append((name(".shstrtab"), 3, None, 0, 0, 0))
    secs.append((name(".strtab"), 3, strtab, 0, 0, 0))
    text_index = {k[0]: 4 + n for n, k in enumerate(kernels)}
    syms, at = bytes(24), 1
    for k in kernels:
        syms += struct.pack("<IBBHQQ", at, 0x12, 0, text_index[k[0]], 0, len(k[1]))
        at += len(k[0]) + 1
    secs.append((name(".symtab"), 2, syms, 2, 1, 24))
    for k in kernels:
        secs.append((name(f".text.{k[0]}"), 1, k[1], 0, 0, 0))
    secs.append((name(".nv.info"), 1, nvinfo, 0, 0, 0))
    for k in kernels:
        if k[2]:
            secs.append((name(f".nv.info.{k[0]}"), 1, k[2], 0, 0, 0))
        if k[3]:
            rel = b"".join(struct.pack("<QQ", off, 1 << 32 | 1) for off in k[3])
            secs.append((name(f".rel.text.{k[0]}"), 9, rel, 3, text_index[k[0]], 16))
    shstrtab = b"\0".join(n.encode() for n in names) + b"\0"
    secs[0] = (*secs[0][:2], shstrtab, *secs[0][3:])
    body, headers = b"", [bytes(64)]
    for nm, typ, data, link, info, entsize in secs:
        off = 64 + len(body)
        body += data + bytes(-len(data) % 16)
        headers.append(struct.pack("<IIQQQQIIQQ", nm, typ, 6 if typ == 1 else 0, 0, off, len(data),
                                   link, info, 16, entsize))
    shoff = 64 + len(body)
    head = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 2, 190, 1, 0, 0, shoff,
                       flags, 64, 56, 0, 64, len(headers), 1)
    return head + body + b"".join(headers)


def sval(attr, payload):
    return bytes([4, attr]) + struct.pack("<H", len(payload)) + payload


FFMA = sass.join_words(*ffma_words(1, 2, 3, 12))
K_CODE = FFMA + b"".join(word(OP if n % 5 else BRA, 16) for n in range(1, 18))  # 0x120 bytes
J_CODE = word(MOV, 5) + word(OP)
K_INFO = sval(0x1C, struct.pack("<II", 0x30, 0x50) + b"\x01\x02") + bytes([3, 0x1B, 0xFF, 0])  # EXIT offsets


def two_kernels():
    nvinfo = (sval(0x2F, struct.pack("<III", 1, 40, 99))            # kernel k: 40 registers (a longer record)
              + sval(0x2F, struct.pack("<II", 2, 0x80000001)))      # kernel j: a u32 count
    return elf([("k", K_CODE, K_INFO, [0x118]), ("j", J_CODE, b"", [])], nvinfo)


def test_a_cubin_written_by_hand(nv):
    cubin = sass.Cubin(two_kernels())
    assert cubin.arch == ARCH and list(cubin.kernels) == ["k", "j"]
    assert cubin.text("k") == K_CODE and cubin.text("j") == J_CODE
    k, j = cubin.kernel("k"), cubin.kernel("j")
    # EXIT offsets from .nv.info.k (two stray bytes after them left out), a relocation at 0x118
    assert k.protected_offsets == {0x30, 0x50, 0x110} and j.protected_offsets == set()
    assert (k.register_count, cubin.nvinfo_register_count("k")) == (40, 40)
    assert (j.register_count, cubin.nvinfo_register_count("j")) == (0x80000001, 0x80000001)


def test_a_cubins_elf_is_read_once_per_process(nv, monkeypatch):
    parses = []
    real = sass.ELFFile
    monkeypatch.setattr(sass, "ELFFile", lambda stream: parses.append(1) or real(stream))
    monkeypatch.setattr(sass, "_MEMO_MAX", 2)
    datas = [elf([("k", K_CODE, K_INFO, [0x118])], flags=f) for f in (90 << 8, 86 << 8, 80 << 8)]
    first = sass.Cubin(datas[0])
    assert len(parses) == 1
    again = sass.Cubin(datas[0])
    assert len(parses) == 1 and again.kernels == first.kernels and again.arch == ARCH
    sass.Cubin(datas[1])
    sass.Cubin(datas[2])  # three cubins, two kept: the first one read is forgotten
    assert len(parses) == 3
    assert [sass.Cubin(d).arch for d in datas[1:]] == ["sm_86", "sm_80"] and len(parses) == 3
    assert sass.Cubin(datas[0]).kernels == first.kernels and len(parses) == 4


def test_instructions_read_all_kernels_of_a_cubin_in_one_batch(nv):
    cubin = sass.Cubin(two_kernels())
    assert cubin.instructions("k") == reading(K_CODE)
    assert sorted(nv) == batch(K_CODE + J_CODE)
    assert stats() == {"disassembled": 2, "nvdisasm_runs": 2, "memo_hits": 1}
    assert cubin.instructions("j") == reading(J_CODE)
    assert len(nv) == 2 and stats() == {"disassembled": 2, "nvdisasm_runs": 2, "memo_hits": 4}


def test_instructions_of_a_cubin_of_one_kernel_ask_once(nv):
    cubin = sass.Cubin(elf([("k", K_CODE, K_INFO, [])]))
    assert cubin.instructions() == reading(K_CODE)
    assert nv == [(K_CODE, ARCH, 0)] and stats() == {"disassembled": 1, "nvdisasm_runs": 1}


def test_instructions_check_the_words_of_a_listing_kept_in_memory(nv):
    """A listing is checked against the ELF's bytes wherever it came from: one that does not
    describe them (planted in the memo here) is refused."""
    cubin = sass.Cubin(elf([("k", K_CODE, K_INFO, [])]))
    bad = reading(K_CODE)
    bad[1] = Instruction(0x10, bad[1].text, bad[1].lo ^ 1, bad[1].hi)
    sass._memo_put(key_of(K_CODE), tuple(bad))
    with pytest.raises(sass.SassError) as exc:
        cubin.instructions("k")
    assert str(exc.value) == "nvdisasm's words at 0x0010 of k differ from the cubin's bytes"


def test_nvinfo_records_cut_short_or_long():
    assert list(sass._iter_nvinfo(b"\x01\x0a")) == [(0x0A, b"")]  # a record of its two header bytes only
    big = bytes(range(256)) * 128
    assert list(sass._iter_nvinfo(sval(0x1C, big) + b"\x03\x1b\x01\x02")) == [(0x1C, big), (0x1B, b"\x01\x02")]


# ----------------------------------------------------------------------------------------------
# prefetch and prefetch_patches: what they read is what the calls after them find


def test_prefetch_reads_every_kernel_of_every_cubin(nv):
    cubins = [sass.Cubin(two_kernels()), sass.Cubin(elf([("m", A, b"", [])]))]
    assert sass.prefetch(cubins) == 3
    assert sorted(nv) == batch(K_CODE + J_CODE + A)
    assert [cb.instructions(n) for cb in cubins for n in cb.kernels] == [reading(c) for c in (K_CODE, J_CODE, A)]
    assert len(nv) == 2 and stats()["disassembled"] == 3


def test_prefetch_patches_reads_the_patched_codes_a_patch_then_needs(nv):
    cubin = sass.Cubin(two_kernels())
    to_r10 = [Edit(0, regs=(10, None, None, None))]  # R10 only as scratch
    refused = [Edit(0x10, regs=(10, None, None, None))]  # not an FFMA
    reqs = [(cubin, "k", refused, {10}), (cubin, "k", to_r10, {10}), (cubin, "j", [Edit(0, stall=3)], None)]
    assert sass.prefetch_patches(reqs) == 2
    read = len(nv)
    done = sass.patch(cubin, "k", to_r10, scratch={10})
    assert done.instructions[0].text == "FFMA R10, R2, R3, R12"
    assert sass.patch(cubin, "j", [Edit(0, stall=3)]).instructions[0].control.stall == 3
    assert len(nv) == read  # nothing read again
