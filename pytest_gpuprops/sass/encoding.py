"""Control codes and instructions: how one 16-byte SASS instruction is encoded.

Encoding facts used here (sm_75 .. sm_90; see docs/encoding.md):

* an instruction is 16 bytes, two little-endian u64 words ``lo`` and ``hi``;
* the control code is ``c = hi >> 41``: stall ``c & 0xF``, yield ``(c >> 4) & 1`` (0 prints "Y"),
  write barrier ``(c >> 5) & 7`` and read barrier ``(c >> 8) & 7`` (7 = none), wait mask
  ``(c >> 11) & 0x3F``, reuse ``(c >> 17) & 0xF`` (bit 0 slot A, bit 1 slot B, bit 2 slot C);
* ``FFMA R, R, R, R`` has opcode ``lo & 0xFFF == 0x223``, Rd in lo bits 16-23, Ra 24-31, Rb 32-39 and
  Rc in hi bits 0-7; RZ is 255.
"""

from __future__ import annotations

import dataclasses
import functools
import struct

from .errors import PatchRefused

RZ = 255
FFMA_RRRR_OPCODE = 0x223


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


class _computed_once:
    """:func:`functools.cached_property` without its lock: computed on first access and stored in
    the instance's ``__dict__``, which every later lookup finds first (a non-data descriptor).
    Before Python 3.12, cached_property takes a lock on every first access; a warm run makes the
    first access hundreds of thousands of times (every instruction of every listing read)."""

    def __init__(self, func):
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One instruction as nvdisasm read it. The fields never change, so what is parsed or decoded from
    them is kept once asked for (the region checks ask for each instruction's again and again)."""

    offset: int
    text: str  # as nvdisasm prints it, without the trailing ';'
    lo: int
    hi: int

    @_computed_once
    def predicate(self) -> str:
        return self.text.split()[0] if self.text.startswith("@") else ""

    @_computed_once
    def opcode(self) -> str:
        """Full mnemonic with modifiers, e.g. ``HMMA.16816.F32``."""
        body = self.text.split(None, 1)[1] if self.predicate else self.text
        return body.split()[0]

    @_computed_once
    def base_opcode(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def operands(self) -> list[str]:
        body = self.text.split(None, 1)[1] if self.predicate else self.text
        parts = body.split(None, 1)
        return [p.strip() for p in parts[1].split(",")] if len(parts) > 1 else []

    @_computed_once
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

