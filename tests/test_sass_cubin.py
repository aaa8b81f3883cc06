"""The sass package's ELF reading (sass/cubin.py): kernels, their code, register counts and
protected offsets. Cubins compiled here and then edited byte by byte (.nv.info records, ELF flags,
the section header's register byte), cubins written byte by byte and read through the stand-in
nvdisasm of test_sass_listing.py, and what is refused."""

import hashlib
import io
import struct

import pytest
from elftools.elf.elffile import ELFFile
from gp_testing import PATCH_ARCHES
from test_sass_encoding import ffma_words
from test_sass_listing import ARCH, BRA, MOV, OP, batch, fresh, key_of, nv, reading, stats, word  # noqa: F401  (fresh, nv: fixtures)

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.sass import Edit, Instruction

# ----------------------------------------------------------------------------------------------
# cubins compiled here: code, decode, register counts, refusals


@pytest.mark.parametrize("arch", PATCH_ARCHES)
def test_instructions_match_the_elf_bytes_and_decode(build, arch):
    cubin = build("ffma.cu", arch, ILP=1, UNROLL=8)
    ins = cubin.instructions("ffma")
    text = cubin.text("ffma")
    assert len(ins) * 16 == len(text)
    assert [i.raw for i in ins] == [text[o:o + 16] for o in range(0, len(text), 16)]
    ffma = [i for i in ins if i.base_opcode == "FFMA"]
    assert len(ffma) == 8 and all(i.opcode_bits == sass.FFMA_RRRR_OPCODE for i in ffma)
    assert cubin.kernel("ffma").register_count > 0


def test_register_count_lives_twice_and_sm90_uses_nvinfo(build):
    sm86 = build("regbank_ffma.cu", "sm_86", NFFMA=8)
    sm90 = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    assert sm86.kernel().register_count == sm86.nvinfo_register_count() > 0
    assert sm90.kernel().register_count == sm90.nvinfo_register_count() > 0


def test_not_an_elf_and_not_a_cuda_elf_are_refused(tmp_path):
    with pytest.raises(sass.SassError, match="not an ELF"):
        sass.Cubin(b"hello world, not a cubin")
    import sys
    with pytest.raises(sass.SassError, match="not a CUDA cubin"):
        sass.Cubin(open(sys.executable, "rb").read())


def test_missing_kernel_names_the_ones_there(build):
    with pytest.raises(sass.SassError, match="has no kernel 'nope'.*ffma"):
        build("ffma.cu", "sm_90").kernel("nope")


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


def test_default_cubin_name_in_messages():
    with pytest.raises(sass.SassError, match="^<cubin> is not an ELF file"):
        sass.Cubin(b"nope")


def test_load_cubin_passes_the_arch_on(build, tmp_path):
    p = tmp_path / "c.cubin"
    p.write_bytes(build("clock_overhead.cu", "sm_90").data)
    assert sass.load_cubin(p, arch="sm_90a").arch == "sm_90a" and sass.load_cubin(p).arch == "sm_90"


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


def two_kernels_by_hand():
    nvinfo = (sval(0x2F, struct.pack("<III", 1, 40, 99))            # kernel k: 40 registers (a longer record)
              + sval(0x2F, struct.pack("<II", 2, 0x80000001)))      # kernel j: a u32 count
    return elf([("k", K_CODE, K_INFO, [0x118]), ("j", J_CODE, b"", [])], nvinfo)


def test_a_cubin_written_by_hand(nv):  # noqa: F811
    cubin = sass.Cubin(two_kernels_by_hand())
    assert cubin.arch == ARCH and list(cubin.kernels) == ["k", "j"]
    assert cubin.text("k") == K_CODE and cubin.text("j") == J_CODE
    k, j = cubin.kernel("k"), cubin.kernel("j")
    # EXIT offsets from .nv.info.k (two stray bytes after them left out), a relocation at 0x118
    assert k.protected_offsets == {0x30, 0x50, 0x110} and j.protected_offsets == set()
    assert (k.register_count, cubin.nvinfo_register_count("k")) == (40, 40)
    assert (j.register_count, cubin.nvinfo_register_count("j")) == (0x80000001, 0x80000001)


def test_a_cubins_elf_is_read_once_per_process(nv, monkeypatch):  # noqa: F811
    parses = []
    real = sass.cubin.ELFFile
    monkeypatch.setattr(sass.cubin, "ELFFile", lambda stream: parses.append(1) or real(stream))
    monkeypatch.setattr(sass.cubin, "_MEMO_MAX", 2)
    datas = [elf([("k", K_CODE, K_INFO, [0x118])], flags=f) for f in (90 << 8, 86 << 8, 80 << 8)]
    first = sass.Cubin(datas[0])
    assert len(parses) == 1
    again = sass.Cubin(datas[0])
    assert len(parses) == 1 and again.kernels == first.kernels and again.arch == ARCH
    sass.Cubin(datas[1])
    sass.Cubin(datas[2])  # three cubins, two kept: the first one read is forgotten
    assert len(parses) == 3
    assert [sass.Cubin(d).arch for d in datas[1:]] == ["sm_86", "sm_80"] and len(parses) == 3
    # forgotten in memory, read back from the disk: a warm run parses no ELF it has read before
    assert sass.Cubin(datas[0]).kernels == first.kernels and len(parses) == 3
    sass.clear_memo()
    assert [sass.Cubin(d).kernels for d in datas] == [first.kernels] * 3 and len(parses) == 3
    sass.cubin._reading_path(hashlib.sha256(datas[0]).digest()).unlink()
    sass.clear_memo()
    assert sass.Cubin(datas[0]).kernels == first.kernels and len(parses) == 4


def _stored(data):
    return sass.cubin._reading_path(hashlib.sha256(data).digest())


@pytest.mark.parametrize("damage", [
    dict(format=2), dict(sha256="00" * 32), dict(arch=90), dict(kernels={}),
    dict(kernels=[["k", 0, 10**9, 24, []]]),            # code beyond the cubin's bytes
    dict(kernels=[["k", -16, 16, 24, []]]), dict(kernels=[["k", 0, 16, True, []]]),
    dict(kernels=[["k", 0, 16, 24, [0.5]]]), dict(kernels=[["k", 0, 16, 24]]),
    dict(kernels=[["k", 0, 16, 24, []], ["k", 0, 16, 24, []]]),  # a kernel twice
])
def test_a_stored_reading_that_cannot_be_these_bytes_is_parsed_again_and_rewritten(fresh, monkeypatch, damage):  # noqa: F811
    from pytest_gpuprops import cache
    data = elf([("k", K_CODE, K_INFO, [0x118])])
    first = sass.Cubin(data)
    entry = _stored(data)
    good = cache.read_json(entry)
    assert good["kernels"] == [["k", first.kernel("k").text_offset, len(K_CODE), first.kernel("k").register_count,
                                sorted(first.kernel("k").protected_offsets)]]
    cache.write_json(entry, {**good, **damage})
    sass.clear_memo()
    parses = []
    real = sass.cubin.ELFFile
    monkeypatch.setattr(sass.cubin, "ELFFile", lambda stream: parses.append(1) or real(stream))
    again = sass.Cubin(data)
    assert (again.arch, again.kernels) == (first.arch, first.kernels) and parses == [1]
    assert cache.read_json(entry) == good


def test_a_reading_stored_by_hand_is_what_cubin_answers(fresh):  # noqa: F811
    """The stored reading is trusted for the bytes it names (so a changed reading format must bump
    _READING_FORMAT): here one written by hand, for these very bytes, is what Cubin() says."""
    from pytest_gpuprops import cache
    data = elf([("k", K_CODE, K_INFO, [0x118])])
    cache.write_json(_stored(data), {"format": sass.cubin._READING_FORMAT, "sha256": hashlib.sha256(data).hexdigest(),
                                     "arch": "sm_86", "kernels": [["by_hand", 0, 32, 7, [16]]]})
    c = sass.Cubin(data)
    assert c.arch == "sm_86" and c.kernels == {"by_hand": sass.KernelInfo("by_hand", 0, 32, 7, frozenset({16}))}


def test_instructions_read_all_kernels_of_a_cubin_in_one_batch(nv):  # noqa: F811
    cubin = sass.Cubin(two_kernels_by_hand())
    assert cubin.instructions("k") == reading(K_CODE)
    assert sorted(nv) == batch(K_CODE + J_CODE)
    assert stats() == {"disassembled": 2, "nvdisasm_runs": 2, "memo_hits": 1}
    assert cubin.instructions("j") == reading(J_CODE)
    assert len(nv) == 2 and stats() == {"disassembled": 2, "nvdisasm_runs": 2, "memo_hits": 4}


def test_instructions_of_a_cubin_of_one_kernel_ask_once(nv):  # noqa: F811
    cubin = sass.Cubin(elf([("k", K_CODE, K_INFO, [])]))
    assert cubin.instructions() == reading(K_CODE)
    assert nv == [(K_CODE, ARCH, 0)] and stats() == {"disassembled": 1, "nvdisasm_runs": 1}


def test_instructions_check_the_words_of_a_listing_kept_in_memory(nv):  # noqa: F811
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


def test_a_warm_process_never_loads_pyelftools(fresh, tmp_path):  # noqa: F811
    """The plugin's import loads no pyelftools, and a Cubin whose reading is stored needs none; a
    new ELF is still parsed with it."""
    import subprocess
    import sys
    data = elf([("k", K_CODE, K_INFO, [0x118])])
    first = sass.Cubin(data)  # parsed here, its reading stored under the fresh cache root
    (tmp_path / "k.cubin").write_bytes(data)
    script = ("import sys; import pytest_gpuprops.plugin; from pytest_gpuprops import sass; "
              "before = 'elftools' in sys.modules; c = sass.load_cubin(sys.argv[1]); "
              "print(before, 'elftools' in sys.modules, sorted(c.kernels), c.arch)")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "k.cubin")], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False", "['k']", first.arch]
    sass.cubin._reading_path(hashlib.sha256(data).digest()).unlink()
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "k.cubin")], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "['k']", first.arch]
