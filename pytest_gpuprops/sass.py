"""sass layer: read a cubin, disassemble it, decode control codes, and patch it with verification.

Encoding facts used here (sm_75 .. sm_90; see docs/encoding.md):

* an instruction is 16 bytes, two little-endian u64 words ``lo`` and ``hi``;
* the control code is ``c = hi >> 41``: stall ``c & 0xF``, yield ``(c >> 4) & 1`` (0 prints "Y"),
  write barrier ``(c >> 5) & 7`` and read barrier ``(c >> 8) & 7`` (7 = none), wait mask
  ``(c >> 11) & 0x3F``, reuse ``(c >> 17) & 0xF`` (bit 0 slot A, bit 1 slot B, bit 2 slot C);
* ``FFMA R, R, R, R`` has opcode ``lo & 0xFFF == 0x223``, Rd in lo bits 16-23, Ra 24-31, Rb 32-39 and
  Rc in hi bits 0-7; RZ is 255.

Every patch is checked by disassembling the patched code: each patched instruction must read
exactly as intended and every other instruction exactly as before; otherwise it is refused.

Listings come from nvdisasm's raw mode on a kernel's code alone at address 0 (branch targets print
as kernel-relative addresses, ``BRA 0x1f0``, where the ELF mode prints labels). A listing is a pure
function of (code bytes, arch, nvdisasm build), so it is cached on that key: in memory for the
process and on disk (docs/performance.md), and each one is checked word for word against the bytes
it describes whenever it is used. Many codes are disassembled in one nvdisasm run
(:func:`code_listings`, :func:`prefetch`, :func:`prefetch_patches`): nvdisasm's start-up, not the
size of the code, is what a disassembly costs.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import glob
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from . import cache

RZ = 255
FFMA_RRRR_OPCODE = 0x223
EM_CUDA = 190

# .nv.info attributes whose payload is a list of instruction offsets the driver may patch at load.
_NVINFO_OFFSET_ATTRS = {
    0x1C: "EIATTR_EXIT_INSTR_OFFSETS",
    0x1D: "EIATTR_S2RCTAID_INSTR_OFFSETS",
    0x25: "EIATTR_LD_CACHEMOD_INSTR_OFFSETS",
    0x27: "EIATTR_ATOM_SYS_INSTR_OFFSETS",
    0x28: "EIATTR_COOP_GROUP_INSTR_OFFSETS",
    0x31: "EIATTR_INT_WARP_WIDE_INSTR_OFFSETS",
    0x34: "EIATTR_INDIRECT_BRANCH_TARGETS",
}
EIATTR_REGCOUNT = 0x2F
_CONTROL_FLOW = {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "WARPSYNC",
                 "BPT", "KILL", "NANOSLEEP", "YIELD", "BMOV", "RTT", "JMXU", "BRXU", "CALL.REL", "ACQBULK"}


class SassError(Exception):
    """A cubin or disassembly problem: not an ELF, no such kernel, nvdisasm missing or failing."""


class PatchRefused(SassError):
    """A patch that cannot be made or cannot be verified; nothing was produced."""


class ListingMismatch(SassError):
    """nvdisasm printed words that are not the bytes it was given (at ``offset`` of the code)."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


# ----------------------------------------------------------------------------------------------
# control codes


@dataclasses.dataclass(frozen=True)
class ControlCode:
    """The scheduling control bits of one instruction (``c = hi >> 41``)."""

    stall: int
    yield_flag: bool  # True = the "Y" in the seeds' notation (raw bit 0)
    write_barrier: int | None
    read_barrier: int | None
    wait_mask: int
    reuse: int

    @classmethod
    def decode(cls, hi: int) -> ControlCode:
        return _decode_control(cls, hi >> 41)

    def bits(self) -> int:
        for name, v, hi in (("stall", self.stall, 15), ("wait_mask", self.wait_mask, 63), ("reuse", self.reuse, 15)):
            if not 0 <= v <= hi:
                raise PatchRefused(f"control field {name}={v} out of range 0..{hi}")
        for name, b in (("write_barrier", self.write_barrier), ("read_barrier", self.read_barrier)):
            if b is not None and not 0 <= b <= 5:
                raise PatchRefused(f"{name}={b} out of range: scoreboards are 0..5 (or None)")
        wb = 7 if self.write_barrier is None else self.write_barrier
        rb = 7 if self.read_barrier is None else self.read_barrier
        return (self.stall | ((0 if self.yield_flag else 1) << 4) | (wb << 5) | (rb << 8)
                | (self.wait_mask << 11) | (self.reuse << 17))

    def apply(self, hi: int) -> int:
        """``hi`` with its control bits (41..63) replaced by these."""
        return (hi & ((1 << 41) - 1)) | (self.bits() << 41)

    def __str__(self) -> str:
        waits = "".join(str(i) if self.wait_mask >> i & 1 else "-" for i in range(6))
        rb = "-" if self.read_barrier is None else str(self.read_barrier)
        wb = "-" if self.write_barrier is None else str(self.write_barrier)
        return f"[B{waits}:R{rb}:W{wb}:{'Y' if self.yield_flag else '-'}:S{self.stall:02d}]"


@functools.lru_cache(maxsize=1 << 14)
def _decode_control(cls: type[ControlCode], c: int) -> ControlCode:
    """The 23 control bits ``c`` decoded (a pure function of ``c``: kept, the region checks ask for
    the same few codes millions of times)."""
    wb, rb = (c >> 5) & 7, (c >> 8) & 7
    return cls(
        stall=c & 0xF,
        yield_flag=((c >> 4) & 1) == 0,
        write_barrier=None if wb == 7 else wb,
        read_barrier=None if rb == 7 else rb,
        wait_mask=(c >> 11) & 0x3F,
        reuse=(c >> 17) & 0xF,
    )


def split_words(raw: bytes) -> tuple[int, int]:
    lo, hi = struct.unpack("<QQ", raw)
    return lo, hi


def join_words(lo: int, hi: int) -> bytes:
    return struct.pack("<QQ", lo, hi)


# ----------------------------------------------------------------------------------------------
# instructions


@dataclasses.dataclass(frozen=True)
class Instruction:
    offset: int
    text: str  # as nvdisasm prints it, without the trailing ';'
    lo: int
    hi: int

    @property
    def predicate(self) -> str:
        return self.text.split()[0] if self.text.startswith("@") else ""

    @property
    def opcode(self) -> str:
        """Full mnemonic with modifiers, e.g. ``HMMA.16816.F32``."""
        body = self.text.split(None, 1)[1] if self.predicate else self.text
        return body.split()[0]

    @property
    def base_opcode(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def operands(self) -> list[str]:
        body = self.text.split(None, 1)[1] if self.predicate else self.text
        parts = body.split(None, 1)
        return [p.strip() for p in parts[1].split(",")] if len(parts) > 1 else []

    @property
    def control(self) -> ControlCode:
        return ControlCode.decode(self.hi)

    @property
    def raw(self) -> bytes:
        return join_words(self.lo, self.hi)

    @property
    def opcode_bits(self) -> int:
        return self.lo & 0xFFF

    def line(self) -> str:
        """One line in the seeds' notation: control code, offset, text, raw words."""
        return f"{self.control}  /*{self.offset:04x}*/  {self.text + ' ;':<52} /* 0x{self.lo:016x} 0x{self.hi:016x} */"


# ----------------------------------------------------------------------------------------------
# nvdisasm


def find_nvdisasm() -> str:
    """nvdisasm from $GPUPROPS_NVDISASM, the pip package nvidia-cuda-nvdisasm, or PATH."""
    env = os.environ.get("GPUPROPS_NVDISASM")
    if env:
        if not os.access(env, os.X_OK):
            raise SassError(f"GPUPROPS_NVDISASM={env} is not an executable")
        return env
    for base in sys.path:
        for sub in ("nvidia/cu13/bin/nvdisasm", "nvidia/cuda_nvdisasm/bin/nvdisasm", "nvidia/cu12/bin/nvdisasm"):
            cand = os.path.join(base, sub)
            if os.access(cand, os.X_OK):
                return cand
    found = shutil.which("nvdisasm")
    if found:
        return found
    for cand in sorted(glob.glob("/usr/local/cuda*/bin/nvdisasm"), reverse=True):
        return cand
    raise SassError("nvdisasm not found: pip install nvidia-cuda-nvdisasm (or put CUDA's bin/ on PATH, "
                    "or set GPUPROPS_NVDISASM)")


def _nvdisasm_stat() -> tuple[str, int, int]:
    path = find_nvdisasm()
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SassError(f"nvdisasm at {path} cannot be read: {exc}") from exc
    return path, st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=16)
def _nvdisasm_identity_of(path: str, mtime_ns: int, size: int) -> tuple[str, str]:
    """(release, full version text) of the nvdisasm binary at ``path``; cached on disk by the
    binary's path, mtime and size, so a warm run starts no nvdisasm just to ask its version."""
    entry = cache.subdir("sass") / f"nvdisasm-{cache.digest(path, str(mtime_ns), str(size))[:24]}.json"
    stored = cache.read_json(entry)
    if (isinstance(stored, dict) and stored.get("path") == path and stored.get("mtime_ns") == mtime_ns
            and stored.get("size") == size and isinstance(stored.get("release"), str)
            and isinstance(stored.get("full"), str)):
        return stored["release"], stored["full"]
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    release = m.group(1) if m else "unknown"
    full = " ".join(line.strip() for line in out.splitlines() if re.search(r"release|Build|Built", line))
    if m:
        cache.write_json(entry, {"path": path, "mtime_ns": mtime_ns, "size": size, "release": release, "full": full})
    return release, full or release


def nvdisasm_version() -> str:
    """nvdisasm's release, e.g. ``13.5`` (of the binary :func:`find_nvdisasm` finds now)."""
    return _nvdisasm_identity_of(*_nvdisasm_stat())[0]


def nvdisasm_build() -> str:
    """nvdisasm's full version text (release, V-number, build): part of every listing's cache key."""
    return _nvdisasm_identity_of(*_nvdisasm_stat())[1]


_INSTR_RE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\*\s*0x([0-9a-f]{16})\s*\*/")
_HI_RE = re.compile(r"^\s*/\*\s*0x([0-9a-f]{16})\s*\*/\s*$")
_SECTION_RE = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+),")


def _parse_listing(text: str) -> dict[str, list[Instruction]]:
    """nvdisasm -hex output -> {kernel: [Instruction]}; raw mode has one unnamed section ''."""
    out: dict[str, list[Instruction]] = {}
    current = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        sec = _SECTION_RE.match(line)
        if sec:
            current = sec.group(1)
            out.setdefault(current, [])
        m = _INSTR_RE.search(line)
        if m and i + 1 < len(lines):
            hm = _HI_RE.match(lines[i + 1])
            if hm:
                txt = re.sub(r"\s+", " ", m.group(2).strip())
                out.setdefault(current, []).append(Instruction(int(m.group(1), 16), txt, int(m.group(3), 16),
                                                               int(hm.group(1), 16)))
                i += 2
                continue
        i += 1
    return out


def _run_nvdisasm(args: list[str], path: str) -> str:
    proc = subprocess.run([find_nvdisasm(), *args, path], capture_output=True, text=True)
    if proc.returncode != 0:
        msg = proc.stderr.strip() or proc.stdout.strip()
        raise SassError(f"nvdisasm {nvdisasm_version()} failed on {path}: {msg}")
    return proc.stdout


def nvdisasm_arch(arch: str) -> str:
    """``sm_90a`` -> ``SM90a`` (nvdisasm's --binary spelling)."""
    m = re.fullmatch(r"sm_(\d+)([af]?)", arch)
    if not m:
        raise SassError(f"cannot map arch {arch!r} to nvdisasm's --binary name")
    return f"SM{m.group(1)}{m.group(2)}"


def disassemble_raw(code: bytes, arch: str, *, base: int = 0) -> list[Instruction]:
    """Disassemble bare instruction bytes (one or many kernels' code back to back) in one call,
    as loaded at address ``base``. Not cached: see :func:`code_listings`."""
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        f.write(code)
        name = f.name
    try:
        args = ["-b", nvdisasm_arch(arch), "-hex"] + (["--base-address", hex(base)] if base else [])
        return _parse_listing(_run_nvdisasm(args, name)).get("", [])
    finally:
        os.unlink(name)


# ----------------------------------------------------------------------------------------------
# listings: cached, and batched over many codes

#: What a listing is: nvdisasm raw mode (``-b SMxx -hex``) on one kernel's code alone, at address 0.
LISTING_MODE = "raw@0"
#: Bump when _parse_listing or the listing's meaning changes: every cached listing then misses.
_LISTING_FORMAT = 1
#: Second base address of a batched run; codes batched together stay well under it.
_BASE_SHIFT = 1 << 28
_HEX = re.compile(r"0x[0-9a-f]+")

#: Counters for benchmarks and tests: nvdisasm runs started, listings found in memory / on disk.
stats = collections.Counter()

_MEMO_MAX = 4096
_memo: collections.OrderedDict[str, tuple[Instruction, ...]] = collections.OrderedDict()
_memo_lock = threading.Lock()


def clear_memo() -> None:
    """Forget everything kept in memory: listings, what Cubin() read off each ELF, decoded control
    codes (the disk cache stays)."""
    with _memo_lock:
        _memo.clear()
    with _elf_memo_lock:
        _elf_memo.clear()
    _decode_control.cache_clear()


def _memo_get(key: str) -> tuple[Instruction, ...] | None:
    with _memo_lock:
        hit = _memo.get(key)
        if hit is not None:
            _memo.move_to_end(key)
        return hit


def _memo_put(key: str, listing: tuple[Instruction, ...]) -> None:
    with _memo_lock:
        _memo[key] = listing
        _memo.move_to_end(key)
        while len(_memo) > _MEMO_MAX:
            _memo.popitem(last=False)


def listing_key(code: bytes, arch: str, build: str | None = None) -> str:
    """The cache key of a listing: the code's SHA-256, the arch, the nvdisasm build and the mode."""
    build = nvdisasm_build() if build is None else build
    return cache.digest(LISTING_MODE, str(_LISTING_FORMAT), arch, build, hashlib.sha256(code).digest())


def listing_path(key: str, arch: str) -> Path:
    return cache.subdir("sass") / "listings" / arch / f"{key}.json"


def _words_problem(listing: Sequence[Instruction], code: bytes) -> tuple[int, str] | None:
    """Where and why ``listing`` is not a reading of ``code`` (offsets in order, every word equal)."""
    n = len(listing)
    if n * 16 == len(code) and all(i.offset == 16 * k for k, i in enumerate(listing)):
        # the usual case, every instruction printed: all words compared at once
        if struct.pack(f"<{2 * n}Q", *[w for i in listing for w in (i.lo, i.hi)]) == code:
            return None
    last = -16
    for ins in listing:
        if ins.offset % 16 or ins.offset <= last or ins.offset + 16 > len(code):
            return ins.offset, f"offset {ins.offset:#06x} is out of order or outside the {len(code)}-byte code"
        if ins.raw != code[ins.offset:ins.offset + 16]:
            return ins.offset, f"the words at {ins.offset:#06x} differ from the code's bytes"
        last = ins.offset
    return None


def _disk_get(key: str, code: bytes, arch: str, build: str) -> tuple[Instruction, ...] | None:
    payload = cache.read_json(listing_path(key, arch))
    try:
        if (payload["mode"], payload["format"], payload["arch"], payload["nvdisasm"], payload["code_sha256"]) != \
                (LISTING_MODE, _LISTING_FORMAT, arch, build, hashlib.sha256(code).hexdigest()):
            return None
        rows = payload["instructions"]
        if not all(type(o) is int and type(t) is str and type(lo) is int and type(hi) is int
                   for o, t, lo, hi in rows):
            return None
        listing = tuple(_instruction(*row) for row in rows)
        if not listing or _words_problem(listing, code):
            return None
    except (TypeError, KeyError, ValueError, struct.error):
        return None  # missing, corrupt or of another kind: recomputed and rewritten by the caller
    return listing


def _instruction(offset: int, text: str, lo: int, hi: int) -> Instruction:
    """Instruction(offset, text, lo, hi), built without the frozen dataclass's per-field checks
    (hundreds of thousands are read back from the disk cache in a warm run)."""
    ins = object.__new__(Instruction)
    ins.__dict__.update(offset=offset, text=text, lo=lo, hi=hi)
    return ins


def _disk_put(key: str, listing: tuple[Instruction, ...], code: bytes, arch: str, build: str) -> None:
    cache.write_json(listing_path(key, arch), {
        "mode": LISTING_MODE, "format": _LISTING_FORMAT, "arch": arch, "nvdisasm": build,
        "code_sha256": hashlib.sha256(code).hexdigest(),
        "instructions": [[i.offset, i.text, i.lo, i.hi] for i in listing]})


def _rebase_text(at0: str, shifted: str, base: int) -> str | None:
    """The text nvdisasm prints for an instruction at ``offset - base`` of a code loaded at 0, from
    what it printed for it at ``offset`` (run at base 0) and ``offset + _BASE_SHIFT`` (run at base
    _BASE_SHIFT). A literal that moved by exactly _BASE_SHIFT is an address derived from the
    instruction's own (a branch target); every other part must read the same in both runs."""
    if _HEX.split(at0) != _HEX.split(shifted):
        return None
    out = []
    parts = _HEX.split(at0)
    for i, (a, b) in enumerate(zip(_HEX.findall(at0), _HEX.findall(shifted))):
        va, vb = int(a, 16), int(b, 16)
        if va == vb:
            out.append(parts[i] + a)
        elif vb - va == _BASE_SHIFT and va >= base:
            out.append(parts[i] + hex(va - base))
        else:
            return None
    out.append(parts[-1])
    return "".join(out)


def _disassemble_codes(codes: list[bytes], arch: str) -> list[list[Instruction]]:
    """Each code as nvdisasm reads it alone at address 0, in as few nvdisasm runs as possible.

    One code: one run. Several: their bytes back to back, read in two runs at once (base 0 and base
    _BASE_SHIFT); position-dependent literals (branch targets) are the ones that moved by exactly
    the shift, and are rebased to the code's own start. A code whose reading cannot be rebased that
    way is read again alone."""
    if len(codes) == 1:
        stats["nvdisasm_runs"] += 1
        return [disassemble_raw(codes[0], arch)]
    blob = b"".join(codes)
    if len(blob) >= _BASE_SHIFT // 2:
        half = len(codes) // 2
        return _disassemble_codes(codes[:half], arch) + _disassemble_codes(codes[half:], arch)
    stats["nvdisasm_runs"] += 2
    with ThreadPoolExecutor(2) as ex:
        at0, shifted = ex.map(lambda b: disassemble_raw(blob, arch, base=b), (0, _BASE_SHIFT))
    twins = {i.offset - _BASE_SHIFT: i for i in shifted}
    out: list[list[Instruction] | None] = []
    idx, base = 0, 0
    for code in codes:
        end = base + len(code)
        mine: list[Instruction] | None = []
        while idx < len(at0) and at0[idx].offset < end:
            ins = at0[idx]
            idx += 1
            if ins.offset < base or mine is None:
                continue
            twin = twins.get(ins.offset)
            text = None
            if twin is not None and (twin.lo, twin.hi) == (ins.lo, ins.hi):
                text = ins.text if twin.text == ins.text else _rebase_text(ins.text, twin.text, base)
            if text is None:
                mine = None  # read this code again, alone
                continue
            mine.append(Instruction(ins.offset - base, text, ins.lo, ins.hi))
        if mine is not None and (not mine or _words_problem(mine, code)):
            mine = None  # e.g. a code whose size is not a whole number of instructions: read it alone
        out.append(mine)
        base = end
    for n, listing in enumerate(out):
        if listing is None:
            stats["nvdisasm_runs"] += 1
            out[n] = disassemble_raw(codes[n], arch)
    return out  # type: ignore[return-value]


def code_listings(codes: Sequence[bytes], arch: str) -> list[list[Instruction]]:
    """The listing of each code (one kernel's instruction bytes) for ``arch``: from memory, from
    the disk cache, or from nvdisasm, all the missing ones in one batch. Every listing returned has
    been checked word for word against its code."""
    build = nvdisasm_build()
    keys = [listing_key(c, arch, build) for c in codes]
    found: dict[str, tuple[Instruction, ...]] = {}
    todo: dict[str, bytes] = {}
    for key, code in zip(keys, codes):
        if key in found or key in todo:
            continue
        hit = _memo_get(key)
        if hit is not None:
            stats["memo_hits"] += 1
        else:
            hit = _disk_get(key, code, arch, build)
            if hit is not None:
                stats["disk_hits"] += 1
                _memo_put(key, hit)
        if hit is not None:
            found[key] = hit
        else:
            todo[key] = code
    if todo:
        todo_keys = list(todo)
        stats["disassembled"] += len(todo_keys)
        for key, listing in zip(todo_keys, _disassemble_codes([todo[k] for k in todo_keys], arch)):
            problem = _words_problem(listing, todo[key])
            if problem:
                raise ListingMismatch(f"nvdisasm {nvdisasm_version()} ({arch}): {problem[1]}", problem[0])
            found[key] = tuple(listing)
            if listing:  # an empty reading is an error for the caller; never cached
                _memo_put(key, found[key])
                _disk_put(key, found[key], todo[key], arch, build)
    return [list(found[k]) for k in keys]


def code_listing(code: bytes, arch: str) -> list[Instruction]:
    """:func:`code_listings` for one code."""
    return code_listings([code], arch)[0]


# ----------------------------------------------------------------------------------------------
# cubins


@dataclasses.dataclass(frozen=True)
class KernelInfo:
    name: str
    text_offset: int  # file offset of .text.<name>
    text_size: int
    register_count: int  # as the driver allocates (.nv.info EIATTR_REGCOUNT, else sh_info)
    protected_offsets: frozenset[int]  # listed in .nv.info.<name> or relocated: never patch


#: sha256(cubin bytes) -> (arch from the ELF flags, kernels): what Cubin() reads off the ELF, kept for
#: the process (the same bytes are wrapped again and again: every test, every patch's original).
_elf_memo: dict[bytes, tuple[str, dict[str, KernelInfo]]] = {}
_elf_memo_lock = threading.Lock()


class Cubin:
    """A parsed cubin: its kernels, their code, register counts, and their SASS."""

    def __init__(self, data: bytes, arch: str | None = None, name: str = "<cubin>"):
        if data[:4] != b"\x7fELF":
            raise SassError(f"{name} is not an ELF file (first bytes {data[:4]!r}); expected a cubin")
        self.data = bytes(data)
        self.name = name
        digest = hashlib.sha256(self.data).digest()
        with _elf_memo_lock:
            known = _elf_memo.get(digest)
        self._elf_file: ELFFile | None = None
        if known is not None:  # these very bytes were read before in this process: the same answer
            flags_arch, kernels = known
            self.arch = arch or flags_arch
            self.kernels: dict[str, KernelInfo] = dict(kernels)
            return
        try:
            elf = ELFFile(io.BytesIO(self.data))
            machine = elf["e_machine"]
        except ELFError as exc:
            raise SassError(f"{name} is not a readable ELF: {exc}") from exc
        if machine not in ("EM_CUDA", EM_CUDA):
            raise SassError(f"{name} is an ELF for {machine}, not a CUDA cubin (EM_CUDA)")
        self._elf_file = elf
        flags_arch = self._arch_from_flags(elf["e_flags"])
        self.arch = arch or flags_arch
        self.kernels = {}
        for sec in elf.iter_sections():
            if sec.name.startswith(".text."):
                k = sec.name[len(".text."):]
                self.kernels[k] = KernelInfo(k, sec["sh_offset"], sec["sh_size"], sec["sh_info"] >> 24,
                                             frozenset(self._protected(k)))
        for k, info in list(self.kernels.items()):
            nvinfo = self.nvinfo_register_count(k)
            if nvinfo is not None and nvinfo != info.register_count:
                # sm_90 cubins from CUDA 13 leave sh_info's register byte at 0; .nv.info is authoritative.
                self.kernels[k] = dataclasses.replace(info, register_count=nvinfo)
        with _elf_memo_lock:
            _elf_memo[digest] = (flags_arch, dict(self.kernels))
            while len(_elf_memo) > _MEMO_MAX:
                _elf_memo.pop(next(iter(_elf_memo)))

    @property
    def _elf(self) -> ELFFile:
        """The parsed ELF (parsed again on demand where the kernels' facts came from the memo)."""
        if self._elf_file is None:
            self._elf_file = ELFFile(io.BytesIO(self.data))
        return self._elf_file

    @staticmethod
    def _arch_from_flags(flags: int) -> str:
        # ABI v2 (CUDA 12.8+) keeps the SM in bits 8..15; older ones in bits 0..7.
        for sm in ((flags >> 8) & 0xFF, flags & 0xFF):
            if 75 <= sm <= 130:
                return f"sm_{sm}"
        return "unknown"

    def _protected(self, kernel: str) -> set[int]:
        offs: set[int] = set()
        info = self._elf.get_section_by_name(f".nv.info.{kernel}")
        if info is not None:
            for attr, payload in _iter_nvinfo(info.data()):
                if attr in _NVINFO_OFFSET_ATTRS:
                    offs.update(struct.unpack(f"<{len(payload) // 4}I", payload[: len(payload) // 4 * 4]))
        for relname in (f".rel.text.{kernel}", f".rela.text.{kernel}"):
            rel = self._elf.get_section_by_name(relname)
            if rel is not None:
                for r in rel.iter_relocations():
                    offs.add(r["r_offset"] // 16 * 16)
        return offs

    def kernel(self, name: str | None = None) -> KernelInfo:
        if name is None:
            if len(self.kernels) != 1:
                raise SassError(f"{self.name} has kernels {sorted(self.kernels)}; say which one")
            return next(iter(self.kernels.values()))
        if name not in self.kernels:
            raise SassError(f"{self.name} has no kernel {name!r}; it has {sorted(self.kernels) or 'none'}")
        return self.kernels[name]

    def text(self, name: str | None = None) -> bytes:
        k = self.kernel(name)
        return self.data[k.text_offset:k.text_offset + k.text_size]

    def nvinfo_register_count(self, name: str | None = None) -> int | None:
        """EIATTR_REGCOUNT from .nv.info (the second place the register count lives)."""
        k = self.kernel(name)
        info = self._elf.get_section_by_name(".nv.info")
        if info is None:
            return None
        sym_index = None
        symtab = self._elf.get_section_by_name(".symtab")
        for idx, sym in enumerate(symtab.iter_symbols()):
            if sym.name == k.name:
                sym_index = idx
        for attr, payload in _iter_nvinfo(info.data()):
            if attr == EIATTR_REGCOUNT and len(payload) >= 8:
                sym, regs = struct.unpack("<II", payload[:8])
                if sym == sym_index:
                    return regs
        return None

    def instructions(self, name: str | None = None) -> list[Instruction]:
        """The kernel's SASS from nvdisasm (raw mode on its code, address 0; cached by the code's
        bytes), each line checked against the bytes in the ELF."""
        k = self.kernel(name)
        if len(self.kernels) > 1:  # the other kernels' code is read in the same nvdisasm run
            try:
                code_listings([self.text(n) for n in self.kernels], self.arch)
            except ListingMismatch:
                pass  # said below if it is this kernel's
        try:
            instrs = code_listing(self.text(k.name), self.arch)
        except ListingMismatch as exc:
            raise SassError(f"nvdisasm's words at {exc.offset:#06x} of {k.name} differ from the cubin's bytes"
                            ) from exc
        if not instrs:
            raise SassError(f"nvdisasm printed no instructions for kernel {k.name!r} of {self.name}")
        problem = _words_problem(instrs, self.text(k.name))
        if problem:
            raise SassError(f"nvdisasm's words at {problem[0]:#06x} of {k.name} differ from the cubin's bytes")
        return instrs


def _iter_nvinfo(data: bytes):
    """Yield (attribute, payload) from a .nv.info section (EIFMT_NVAL/BVAL/HVAL/SVAL records)."""
    i = 0
    while i + 2 <= len(data):
        fmt, attr = data[i], data[i + 1]
        if fmt == 0x04:  # SVAL: u16 size then payload
            (size,) = struct.unpack_from("<H", data, i + 2)
            yield attr, data[i + 4:i + 4 + size]
            i += 4 + size
        elif fmt in (0x01, 0x02, 0x03):  # NVAL, BVAL, HVAL: 2 more bytes
            yield attr, data[i + 2:i + 4]
            i += 4
        else:
            return


def load_cubin(path: str | Path, arch: str | None = None) -> Cubin:
    p = Path(path)
    if not p.exists():
        raise SassError(f"{p} does not exist")
    return Cubin(p.read_bytes(), arch=arch, name=str(p))


# ----------------------------------------------------------------------------------------------
# timed regions


def clock_reads(instrs: list[Instruction]) -> list[Instruction]:
    """Instructions that read the SM cycle counter (``CS2R Rx, SR_CLOCKLO`` and S2R/S2UR forms)."""
    return [i for i in instrs if "SR_CLOCKLO" in i.text or "SR_CLOCKHI" in i.text]


def timed_region(instrs: list[Instruction]) -> tuple[Instruction, list[Instruction], Instruction]:
    """(start clock read, instructions between, stop clock read) for a kernel with exactly two reads."""
    clocks = [i for i in clock_reads(instrs) if "SR_CLOCKHI" not in i.text]
    if len(clocks) != 2:
        raise SassError(f"expected exactly 2 clock reads around the timed region, found {len(clocks)}: "
                        + "; ".join(c.text for c in clocks))
    start, stop = clocks
    between = [i for i in instrs if start.offset < i.offset < stop.offset]
    return start, between, stop


# ----------------------------------------------------------------------------------------------
# patching

_KEEP = object()


@dataclasses.dataclass(frozen=True)
class Edit:
    """What to change in the instruction at ``offset``; fields left as ``KEEP`` stay as they are.

    ``regs`` is ``(Rd, Ra, Rb, Rc)`` for ``FFMA R, R, R, R`` (255 = RZ), the only form whose register
    fields are encoded here.  ``reuse`` is a mask over slots A=1, B=2, C=4.
    """

    offset: int
    regs: object = _KEEP
    reuse: object = _KEEP
    stall: object = _KEEP
    yield_flag: object = _KEEP
    read_barrier: object = _KEEP
    write_barrier: object = _KEEP
    wait_mask: object = _KEEP


KEEP = _KEEP


@dataclasses.dataclass
class PatchResult:
    cubin: bytes
    kernel: str
    changed: list[tuple[Instruction, Instruction]]  # (before, after) as disassembled
    instructions: list[Instruction] = dataclasses.field(default_factory=list)  # the patched kernel

    def diff_lines(self) -> list[str]:
        out = []
        for before, after in self.changed:
            out.append("- " + before.line())
            out.append("+ " + after.line())
        return out


def _reg_name(r: int) -> str:
    return "RZ" if r == RZ else f"R{r}"


_PLAIN_REG = re.compile(r"^(R\d+|RZ)(\.reuse)?$")


def usable_registers(instrs: list[Instruction], kinfo: KernelInfo) -> int:
    """How many registers a patch may name: up to the highest one the compiler's own code uses.

    The register count includes registers the hardware reserves (72 allocated, R0..R69 usable, on an
    sm_90 kernel from NVRTC 13.5); naming R70 there hung the GPU, so the code is the bound.
    """
    used = [int(x) for i in instrs for x in _REG_TOKEN.findall(i.text)]
    return min(kinfo.register_count, max(used, default=-1) + 1)


_REG_TOKEN = re.compile(r"\bR(\d+)\b")


def _plan_one(ins: Instruction, edit: Edit, kinfo: KernelInfo, scratch: frozenset[int] | None,
              usable: int) -> tuple[int, int, str]:
    """New (lo, hi) and the text nvdisasm must print for them, or PatchRefused."""
    where = f"{kinfo.name}+{ins.offset:#06x} ({ins.text})"
    if ins.base_opcode in _CONTROL_FLOW:
        raise PatchRefused(f"{where}: control-flow instructions are never patched (branch offsets differ by arch)")
    if ins.offset in kinfo.protected_offsets:
        raise PatchRefused(f"{where}: listed in .nv.info.{kinfo.name} or relocated; the driver may rewrite it")
    lo, hi = ins.lo, ins.hi
    ctrl = ins.control
    text = ins.text
    fields = {}
    for name in ("reuse", "stall", "yield_flag", "read_barrier", "write_barrier", "wait_mask"):
        v = getattr(edit, name)
        if v is not _KEEP:
            fields[name] = v
    new_ctrl = dataclasses.replace(ctrl, **fields)

    ops = ins.operands
    regs_edit = edit.regs is not _KEEP
    reuse_edit = "reuse" in fields
    if regs_edit or reuse_edit:
        if ins.opcode_bits != FFMA_RRRR_OPCODE or ins.base_opcode != "FFMA" or len(ops) != 4 \
                or not all(_PLAIN_REG.match(o) for o in ops):
            raise PatchRefused(f"{where}: register and reuse fields are encoded only for plain FFMA R, R, R, R "
                               f"(opcode 0x{FFMA_RRRR_OPCODE:03x}); this is opcode 0x{ins.opcode_bits:03x}")
        cur = [RZ if o.split(".")[0] == "RZ" else int(o.split(".")[0][1:]) for o in ops]
        regs = list(edit.regs) if regs_edit else cur
        if len(regs) != 4:
            raise PatchRefused(f"{where}: regs must be (Rd, Ra, Rb, Rc), got {regs}")
        regs = [cur[i] if r is None else int(r) for i, r in enumerate(regs)]
        for slot, r in zip("dABC", regs):
            if r != RZ and not 0 <= r < usable:
                raise PatchRefused(f"{where}: R{r} in slot {slot} is outside the registers this kernel's code uses "
                                   f"(R0..R{usable - 1}; register count {kinfo.register_count}, of which the "
                                   f"top ones are reserved: reading them traps); use R0..R{usable - 1} or RZ")
        if regs[0] != cur[0] or scratch is not None:
            allowed = scratch if scratch is not None else frozenset({cur[0]})
            if regs[0] not in allowed:
                raise PatchRefused(f"{where}: writing R{regs[0]} would clobber a live register; only the "
                                   f"designated scratch register(s) {sorted(allowed)} may be written")
        if new_ctrl.reuse and new_ctrl.yield_flag:
            raise PatchRefused(f"{where}: reuse flags are ignored (and not printed) on an instruction with the "
                               "yield flag set; clear yield (yield_flag=False) to use reuse")
        for i, r in enumerate(regs[1:]):
            if r == RZ and new_ctrl.reuse >> i & 1:
                raise PatchRefused(f"{where}: RZ cannot be marked .reuse (slot {'ABC'[i]})")
        lo = (lo & ~(0xFF << 16) & ~(0xFF << 24) & ~(0xFF << 32)) | (regs[0] << 16) | (regs[1] << 24) | (regs[2] << 32)
        hi = (hi & ~0xFF) | regs[3]
        srcs = [_reg_name(r) + (".reuse" if new_ctrl.reuse >> i & 1 else "") for i, r in enumerate(regs[1:])]
        body = f"{ins.opcode} {_reg_name(regs[0])}, " + ", ".join(srcs)
        text = f"{ins.predicate} {body}" if ins.predicate else body
    elif new_ctrl.reuse and new_ctrl.yield_flag:
        raise PatchRefused(f"{where}: setting yield would hide its reuse flags")
    hi = new_ctrl.apply(hi)
    return lo, hi, text


def _plan(cubin: Cubin, kernel: str, edits: list[Edit], scratch) -> tuple[bytes, dict[int, tuple[int, int, str]]]:
    kinfo = cubin.kernel(kernel)
    instrs = cubin.instructions(kernel)
    by_off = {i.offset: i for i in instrs}
    usable = usable_registers(instrs, kinfo)
    text = bytearray(cubin.text(kernel))
    planned: dict[int, tuple[int, int, str]] = {}
    for e in edits:
        if e.offset not in by_off:
            raise PatchRefused(f"{kernel} has no instruction at offset {e.offset:#06x}")
        if e.offset in planned:
            raise PatchRefused(f"{kernel}+{e.offset:#06x} is edited twice in one patch")
        lo, hi, t = _plan_one(by_off[e.offset], e, kinfo, scratch, usable)
        planned[e.offset] = (lo, hi, t)
        text[e.offset:e.offset + 16] = join_words(lo, hi)
    return bytes(text), planned


def _verify(before: list[Instruction], after: list[Instruction], planned: dict[int, tuple[int, int, str]],
            kernel: str, same_listing_mode: bool = True) -> list[tuple[Instruction, Instruction]]:
    """Check patched instructions read as planned and all others are untouched.

    Unpatched instructions are compared by text too when both listings come from the same nvdisasm
    mode (raw-binary mode prints branch targets as absolute addresses, which shift between slices).
    :func:`patch_many` still passes False, as it always has, although its listings are now rebased
    to each code's start (:func:`code_listings`).
    """
    if [i.offset for i in before] != [i.offset for i in after]:
        raise PatchRefused(f"{kernel}: the patched code no longer disassembles instruction for instruction")
    changed = []
    for b, a in zip(before, after):
        if b.offset in planned:
            lo, hi, want = planned[b.offset]
            if (a.lo, a.hi) != (lo, hi) or a.text != want:
                raise PatchRefused(f"{kernel}+{b.offset:#06x}: patched instruction reads {a.text!r} "
                                   f"{a.control}, intended {want!r} {ControlCode.decode(hi)}; refused")
            changed.append((b, a))
        elif (a.lo, a.hi) != (b.lo, b.hi) or (same_listing_mode and a.text != b.text):
            raise PatchRefused(f"{kernel}+{b.offset:#06x}: an instruction outside the patch changed "
                               f"({b.text!r} -> {a.text!r}); refused")
    return changed


def _splice(cubin: Cubin, kernel: str, text: bytes) -> bytes:
    k = cubin.kernel(kernel)
    return cubin.data[:k.text_offset] + text + cubin.data[k.text_offset + k.text_size:]


def patch(cubin: Cubin, kernel: str, edits: list[Edit], *, scratch: set[int] | None = None) -> PatchResult:
    """Apply ``edits`` to ``kernel`` and return verified new cubin bytes (the whole ELF is re-read)."""
    text, planned = _plan(cubin, kernel, edits, frozenset(scratch) if scratch is not None else None)
    new = _splice(cubin, kernel, text)
    after = Cubin(new, arch=cubin.arch, name=cubin.name + " (patched)").instructions(kernel)
    changed = _verify(cubin.instructions(kernel), after, planned, kernel)
    return PatchResult(new, kernel, changed, after)


def patch_many(cubin: Cubin, kernel: str, variants: list[list[Edit]], *,
               scratch: set[int] | None = None) -> list[PatchResult]:
    """Patch many variants of one kernel, verified together by one nvdisasm call on their code.

    nvdisasm's start-up dominates small disassemblies; the variants' code sections are laid back to
    back and disassembled once (:func:`code_listings`; listings already cached are not read again),
    then each slice is checked as :func:`patch` would check it.
    """
    if not variants:
        return []
    frozen = frozenset(scratch) if scratch is not None else None
    plans = [_plan(cubin, kernel, v, frozen) for v in variants]
    # The original code is read with them so that before and after come from the same listing mode.
    listings = code_listings([cubin.text(kernel)] + [t for t, _ in plans], cubin.arch)
    before = listings[0]
    results = []
    for n, (text, planned) in enumerate(plans, start=1):
        after = listings[n]
        changed = _verify(before, after, planned, kernel, same_listing_mode=False)
        results.append(PatchResult(_splice(cubin, kernel, text), kernel, changed, after))
    return results


def prefetch(cubins: Iterable[Cubin]) -> int:
    """Read every kernel of ``cubins`` whose listing is not cached yet: one nvdisasm batch per arch.
    Returns how many kernel codes were asked for."""
    by_arch: dict[str, list[bytes]] = {}
    for cb in cubins:
        for name in cb.kernels:
            by_arch.setdefault(cb.arch, []).append(cb.text(name))
    for arch, codes in by_arch.items():
        code_listings(codes, arch)
    return sum(len(c) for c in by_arch.values())


def prefetch_patches(requests: Iterable[tuple[Cubin, str, list[Edit], set[int] | None]]) -> int:
    """Plan each ``(cubin, kernel, edits, scratch)`` patch and read all the patched codes in one
    nvdisasm batch per arch, so that the :func:`patch` calls that follow find their listings cached.

    Nothing is verified or produced here: :func:`patch` plans, verifies and refuses exactly as
    always; a plan refused here is skipped (``patch`` refuses it again, with the same message).
    Returns how many patches were planned."""
    reqs = list(requests)
    prefetch(cb for cb, *_ in reqs)
    by_arch: dict[str, list[bytes]] = {}
    for cb, kernel, edits, scratch in reqs:
        try:
            text, _ = _plan(cb, kernel, list(edits), frozenset(scratch) if scratch is not None else None)
        except SassError:
            continue
        by_arch.setdefault(cb.arch, []).append(text)
    for arch, codes in by_arch.items():
        code_listings(codes, arch)
    return sum(len(c) for c in by_arch.values())


# ----------------------------------------------------------------------------------------------
# edits the fact kernels need


def _sets(i: Instruction) -> set[int]:
    """Scoreboards the instruction sets (its read and write barriers)."""
    c = i.control
    return {b for b in (c.read_barrier, c.write_barrier) if b is not None}


def _waits(i: Instruction) -> set[int]:
    """Scoreboards the instruction waits on before it issues."""
    return {b for b in range(6) if i.control.wait_mask >> b & 1}


def _scoreboards(i: Instruction) -> set[int]:
    return _sets(i) | _waits(i)


def free_scoreboard(instrs: list[Instruction], mine: list[Instruction] = ()) -> int:
    """A scoreboard (0..5) that no instruction but ``mine`` sets or waits on; failing that, one that no
    other instruction of the timed region uses (the stop read waits on all, so none leaks out)."""
    own = {i.offset for i in mine}
    others = [i for i in instrs if i.offset not in own]
    _, region, _ = timed_region(instrs)
    for pool in (others, [i for i in region if i.offset not in own]):
        used = set().union(*(_scoreboards(i) for i in pool)) if pool else set()
        for b in range(6):
            if b not in used:
                return b
    raise PatchRefused("every scoreboard 0..5 is used in the timed region; none is free to chain instructions on")


def chain_on_read_scoreboard(instrs: list[Instruction], base_opcodes: str | tuple[str, ...]) -> list[Edit]:
    """Make each ``base_opcode`` instruction of the timed region wait until the previous one has read
    its registers (the seeds' STS chain: ``[B0-----:R0:...]``), on a scoreboard nobody else uses."""
    _, region, _ = timed_region(instrs)
    ops = (base_opcodes,) if isinstance(base_opcodes, str) else tuple(base_opcodes)
    chain = [i for i in region if i.base_opcode in ops]
    if not chain:
        raise PatchRefused(f"no {'/'.join(ops)} in the timed region to chain")
    sb = free_scoreboard(instrs, chain)
    edits = [Edit(chain[0].offset, read_barrier=sb, wait_mask=0)]
    edits += [Edit(i.offset, read_barrier=sb, wait_mask=1 << sb) for i in chain[1:]]
    return edits


def ffma_operand_edits(instrs: list[Instruction], ra: int, rb: int, rc: int, reuse: int, stall: int = 1) -> list[Edit]:
    """Set the sources, reuse flags and stall of every plain FFMA in the timed region; destinations
    stay (they are the kernel's scratch accumulators). Yield is cleared so reuse flags count."""
    _, region, _ = timed_region(instrs)
    return [Edit(i.offset, regs=(None, ra, rb, rc), reuse=reuse, stall=stall, yield_flag=False)
            for i in region if i.base_opcode == "FFMA"]


def ffma_destinations(instrs: list[Instruction]) -> set[int]:
    """Registers the timed region's FFMAs write: the regbank kernel's scratch accumulators."""
    _, region, _ = timed_region(instrs)
    return {int(i.operands[0][1:]) for i in region if i.base_opcode == "FFMA"}


# ----------------------------------------------------------------------------------------------
# clean timed regions


def region_hazards(instrs: list[Instruction]) -> list[str]:
    """Why the timed region is not clean at both ends; an empty list when it is.

    Scoreboards are followed through the code in address order (straight-line, so a branch before
    the region is read as taken and not taken at once: conservative). Two rules:

    * start: an instruction inside the region must not wait on a scoreboard that an instruction
      before the start read set and the start read did not wait on; otherwise that earlier load's
      remaining latency is counted inside the region (the 4.93-cycle "FFMA latency" on sm_90 was an
      input LDG landing in it);
    * stop: the stop read must wait on every scoreboard set inside the region and not yet waited on
      there, so the region's last variable-latency result is in before the clock is read.
    """
    start, region, stop = timed_region(instrs)
    pending: dict[int, Instruction] = {}  # scoreboard -> the last instruction that set it
    for i in instrs:
        if i.offset >= start.offset:
            break
        for b in _waits(i):
            pending.pop(b, None)
        for b in _sets(i):
            pending[b] = i
    leaked = {b: i for b, i in pending.items() if b not in _waits(start)}
    problems = []
    inside: dict[int, Instruction] = {}
    for i in region:
        for b in sorted(_waits(i)):
            if b in leaked and b not in inside:
                src = leaked[b]
                problems.append(f"/*{i.offset:04x}*/ {i.text} waits on scoreboard {b}, set before the start "
                                f"clock read by /*{src.offset:04x}*/ {src.text}: its latency lands in the region")
            inside.pop(b, None)
            leaked.pop(b, None)
        for b in _sets(i):
            inside[b] = i
    for b, src in sorted(inside.items()):
        if b not in _waits(stop):
            problems.append(f"the stop clock read does not wait on scoreboard {b}, set inside the region by "
                            f"/*{src.offset:04x}*/ {src.text}: its result may land after the region ends")
    return problems


def timing_edits(instrs: list[Instruction]) -> list[Edit]:
    """Both clock reads wait on all six scoreboards: the region starts after everything issued
    before it has landed, and ends after everything issued inside it has."""
    start, _, stop = timed_region(instrs)
    return [Edit(start.offset, wait_mask=0x3F), Edit(stop.offset, wait_mask=0x3F)]


def is_filler(i: Instruction) -> bool:
    """NOP, or an instruction predicated off for good (@!PT / @!UPT): the padding ptxas emits."""
    return i.base_opcode == "NOP" or i.predicate in ("@!PT", "@!UPT")


def region_opcodes(instrs: list[Instruction]) -> dict[str, int]:
    """Opcode -> count between the two clock reads, padding left out."""
    _, region, _ = timed_region(instrs)
    counts: dict[str, int] = {}
    for i in region:
        if not is_filler(i):
            counts[i.opcode] = counts.get(i.opcode, 0) + 1
    return counts


_MEMORY_PREFIXES = ("LD", "ST", "ATOM", "RED", "TEX", "TLD", "SULD", "SUST", "CCTL", "MEMBAR", "UBLKCP", "UTMA")


def region_mismatch(instrs: list[Instruction], intended: dict[str, int], other_allowed: int = 0) -> list[str]:
    """How the timed region differs from ``intended`` (opcode -> exact count); ``other_allowed``
    instructions of other opcodes may sit beside them (loop control), but never a memory access."""
    got = region_opcodes(instrs)
    problems = [f"{op}: {got.get(op, 0)} in the region, intended {n}" for op, n in intended.items()
                if got.get(op, 0) != n]
    others = {op: n for op, n in got.items() if op not in intended}
    memory = sorted(op for op in others if op.startswith(_MEMORY_PREFIXES))
    if memory:
        problems.append(f"memory accesses the fact does not intend: {', '.join(memory)}")
    if sum(others.values()) > other_allowed:
        problems.append(f"{sum(others.values())} other instructions ({others}); at most {other_allowed} intended")
    return problems
