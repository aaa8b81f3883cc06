"""The ELF cubin (pyelftools): its kernels, their code, register counts and protected offsets."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import struct
import threading
from pathlib import Path

from .. import cache
from .encoding import Instruction, _decode_control
from .errors import ListingMismatch, SassError
from .listing import _MEMO_MAX, _memo, _memo_lock, _words_problem, code_listing, code_listings

EM_CUDA = 190


def ELFFile(stream):  # noqa: N802  (pyelftools' class, imported where first needed)
    """pyelftools' ELFFile on ``stream``. Imported on first use: a warm run reads what it needs of
    every ELF from the stored readings and never loads pyelftools (0.1 s of a process's start-up
    where Python compiles its sources afresh)."""
    from elftools.elf.elffile import ELFFile as _ELFFile
    return _ELFFile(stream)

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


#: Bump when what Cubin() reads off an ELF, or how, changes: every stored reading then misses.
_READING_FORMAT = 1


def _reading_path(digest: bytes) -> Path:
    return cache.subdir("sass") / "elf" / f"{digest.hex()}.json"


def _stored_reading(digest: bytes, size: int) -> tuple[str, dict[str, KernelInfo]] | None:
    """What Cubin() read off the ELF whose bytes have SHA-256 ``digest``, stored by an earlier
    process; None where missing, damaged, of another format, or not possibly of these bytes (a
    kernel's code outside them). The reading is a function of the bytes alone, so a warm run reads
    it back instead of parsing some 300 cubins with pyelftools again (1-3 ms each)."""
    payload = cache.read_json(_reading_path(digest))
    try:
        if (payload["format"], payload["sha256"]) != (_READING_FORMAT, digest.hex()):
            return None
        arch, rows = payload["arch"], payload["kernels"]
        if type(arch) is not str or type(rows) is not list:
            return None
        kernels = {}
        for name, offset, text_size, regs, protected in rows:
            if not (type(name) is str and all(type(v) is int and v >= 0 for v in (offset, text_size, regs))
                    and offset + text_size <= size and type(protected) is list
                    and all(type(o) is int for o in protected)) or name in kernels:
                return None
            kernels[name] = KernelInfo(name, offset, text_size, regs, frozenset(protected))
        return arch, kernels
    except (TypeError, KeyError, ValueError):
        return None


def _remember_reading(digest: bytes, reading: tuple[str, dict[str, KernelInfo]]) -> None:
    with _elf_memo_lock:
        _elf_memo[digest] = reading
        while len(_elf_memo) > _MEMO_MAX:
            _elf_memo.pop(next(iter(_elf_memo)))


def _store_reading(digest: bytes, arch: str, kernels: dict[str, KernelInfo]) -> None:
    cache.write_json(_reading_path(digest), {
        "format": _READING_FORMAT, "sha256": digest.hex(), "arch": arch,
        "kernels": [[k.name, k.text_offset, k.text_size, k.register_count, sorted(k.protected_offsets)]
                    for k in kernels.values()]})


#: what else to forget with clear_memo (the patch planner's per-kernel readings register here)
_clear_also: list = []


def clear_memo() -> None:
    """Forget everything kept in memory: listings, what Cubin() read off each ELF, decoded control
    codes, the planner's readings of each kernel (the disk cache stays)."""
    with _memo_lock:
        _memo.clear()
    with _elf_memo_lock:
        _elf_memo.clear()
    _decode_control.cache_clear()
    for clear in _clear_also:
        clear()


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
        self._elf_file = None  # pyelftools' reading, made where needed
        if known is None:  # read by an earlier process?
            known = _stored_reading(digest, len(self.data))
            if known is not None:
                _remember_reading(digest, known)
        if known is not None:  # these very bytes were read before: the same answer
            flags_arch, kernels = known
            self.arch = arch or flags_arch
            self.kernels: dict[str, KernelInfo] = dict(kernels)
            return
        from elftools.common.exceptions import ELFError
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
        _remember_reading(digest, (flags_arch, dict(self.kernels)))
        _store_reading(digest, flags_arch, self.kernels)

    def spliced(self, kernel: str, code: bytes, name: str | None = None) -> Cubin:
        """This cubin with ``kernel``'s code replaced by ``code`` of the same length (a patch).

        Everything Cubin() reads off the ELF (section layout, register counts, protected offsets,
        the arch) lies outside the kernel's code and is byte for byte the same in the new cubin, so
        the new one carries this one's reading instead of parsing the ELF again (pyelftools: about
        10 ms a cubin, the largest cost of a warm GPU run's patches)."""
        k = self.kernel(kernel)
        if len(code) != k.text_size:
            raise SassError(f"{self.name}: new code for {kernel} is {len(code)} bytes, its code is {k.text_size}; "
                            "a patch must keep the kernel's size")
        new = object.__new__(Cubin)
        new.data = self.data[:k.text_offset] + bytes(code) + self.data[k.text_offset + k.text_size:]
        new.name = name or self.name
        new.arch = self.arch
        new.kernels = dict(self.kernels)
        new._elf_file = None
        return new

    @property
    def _elf(self):
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
