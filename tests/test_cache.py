"""The listing cache: a hit is the listing of the same bytes, a bad entry is never trusted, a
changed nvdisasm or arch misses, and a warm run starts no nvdisasm at all."""

import json
import os
import re
import stat
import subprocess
import tempfile

import pytest

from pytest_gpuprops import cache, sass


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

    monkeypatch.setattr(sass.subprocess, "run", counting)
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

    monkeypatch.setattr(sass, "_disassemble_codes", fake)
    return calls


@pytest.mark.parametrize("damage", ["garbage", "truncated", "checksum", "words", "other-arch"])
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
        payload["instructions"][3][1] = "NOP"
        path.write_bytes(head + b"\n" + json.dumps(payload).encode())
    else:  # well-formed entries (checksum recomputed) that do not describe these bytes
        if damage == "words":
            payload["instructions"][3][2] ^= 1
        else:
            payload["arch"] = "sm_90"
        cache.write_json(path, payload)
        assert cache.read_json(path) == payload
    sass.clear_memo()
    assert cubin.instructions("smem_latency_ld") == good
    assert len(reads) == 2  # read again ...
    assert cache.read_json(path)["instructions"] == [[i.offset, i.text, i.lo, i.hi] for i in good]  # ... rewritten
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
    monkeypatch.setattr(sass, "nvdisasm_build", lambda: "Cuda compilation tools, release 99.9, V99.9.1")
    sass.clear_memo()
    sass.code_listing(code, "sm_80")
    assert len(reads) == 3  # another nvdisasm build: a miss


def test_a_warm_run_spawns_nvdisasm_zero_times(build, spawns):
    """Listings, the nvdisasm version, single patches, patch_many and a timing build: once they have
    been read (by this session's prefetch, an earlier run, or the first pass here), a process with an
    empty memory reads all of it from disk."""
    from pytest_gpuprops.measure import KernelSpec, build_for_timing

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
    monkeypatch.setattr(sass, "_plan_one", lambda *a, **k: (lambda r: (r[0], r[1], r[2].replace("R8", "R9")))(
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
