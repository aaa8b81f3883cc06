"""The verified patcher: edits to one kernel's instructions, planned, spliced and checked.

Every patch is checked by disassembling the patched code: each patched instruction must read
exactly as intended and every other instruction exactly as before; otherwise it is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
import re
import threading
from collections.abc import Iterable

from .cubin import Cubin, KernelInfo, _clear_also
from .encoding import FFMA_RRRR_OPCODE, RZ, ControlCode, Instruction, join_words
from .errors import PatchRefused, SassError
from .listing import code_listings, code_listings_by_arch

_CONTROL_FLOW = {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "WARPSYNC",
                 "BPT", "KILL", "NANOSLEEP", "YIELD", "BMOV", "RTT", "JMXU", "BRXU", "CALL.REL", "ACQBULK"}


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


class _Static:
    """What planning needs of one instruction that no edit changes, read off the kernel's listing
    once per :class:`_KernelFacts` (not once per edit)."""

    __slots__ = ("where", "refusal", "ffma_refusal", "cur", "opcode", "predicate", "ctrl", "c")

    def __init__(self, ins: Instruction, kinfo: KernelInfo):
        self.where = where = f"{kinfo.name}+{ins.offset:#06x} ({ins.text})"
        self.refusal = None
        if ins.base_opcode in _CONTROL_FLOW:
            self.refusal = f"{where}: control-flow instructions are never patched (branch offsets differ by arch)"
        elif ins.offset in kinfo.protected_offsets:
            self.refusal = f"{where}: listed in .nv.info.{kinfo.name} or relocated; the driver may rewrite it"
        ops = ins.operands
        self.ffma_refusal = None
        self.cur: tuple[int, ...] = ()
        if ins.opcode_bits != FFMA_RRRR_OPCODE or ins.base_opcode != "FFMA" or len(ops) != 4 \
                or not all(_PLAIN_REG.match(o) for o in ops):
            self.ffma_refusal = (f"{where}: register and reuse fields are encoded only for plain FFMA R, R, R, R "
                                 f"(opcode 0x{FFMA_RRRR_OPCODE:03x}); this is opcode 0x{ins.opcode_bits:03x}")
        else:
            self.cur = tuple(RZ if o.split(".")[0] == "RZ" else int(o.split(".")[0][1:]) for o in ops)
        self.opcode = ins.opcode
        self.predicate = ins.predicate
        self.ctrl = ins.control
        self.c = ins.hi >> 41  # the control bits ``ctrl`` was decoded from


class _KernelFacts:
    """One kernel as planning reads it: its info, listing (by offset), code bytes and usable
    registers, read once for all the patches that one call plans (``patch_many``: hundreds of
    register-bank variants of one kernel), with each instruction's :class:`_Static` read the first
    time an edit names it. ``memo`` keeps, for (old control bits, control fields asked for, their
    types), the new ControlCode and its bits: ControlCode arithmetic, a pure function of that key;
    never a verdict on a patch (every patch is verified against nvdisasm's reading of its bytes)."""

    __slots__ = ("kinfo", "text", "usable", "by_off", "statics", "memo")

    def __init__(self, cubin: Cubin, kernel: str):
        self.kinfo = cubin.kernel(kernel)
        instrs = cubin.instructions(kernel)
        self.usable = usable_registers(instrs, self.kinfo)
        self.text = cubin.text(kernel)
        self.by_off = {i.offset: i for i in instrs}
        self.statics: dict[int, _Static] = {}
        self.memo: dict = {}

    def static(self, ins: Instruction) -> _Static:
        s = self.statics.get(ins.offset)
        if s is None:
            s = self.statics[ins.offset] = _Static(ins, self.kinfo)
        return s


#: (the kernel's code's SHA-256, its KernelInfo, arch) -> its _KernelFacts: the same kernel is planned
#: for again and again in a run (the session prefetch, then its test; every repeat of a fact), and
#: what _KernelFacts holds is a function of that code and info alone
_FACTS: dict[tuple, _KernelFacts] = {}
_FACTS_MAX = 1024
_facts_lock = threading.Lock()
_clear_also.append(_FACTS.clear)


def _kernel_facts(cubin: Cubin, kernel: str) -> _KernelFacts:
    key = (hashlib.sha256(cubin.text(kernel)).digest(), cubin.kernel(kernel), cubin.arch)
    with _facts_lock:
        facts = _FACTS.get(key)
    if facts is None:
        facts = _KernelFacts(cubin, kernel)
        with _facts_lock:
            if len(_FACTS) >= _FACTS_MAX:
                _FACTS.pop(next(iter(_FACTS)))
            _FACTS[key] = facts
    return facts


_CONTROL_FIELDS = ("reuse", "stall", "yield_flag", "read_barrier", "write_barrier", "wait_mask")
_asked = operator.attrgetter(*_CONTROL_FIELDS)
#: what :func:`_reg_name` prints for each register number a patch may name (0..254 and RZ)
_REG_NAMES = tuple(_reg_name(r) for r in range(RZ + 1))
_REUSE = ("", ".reuse")
_LOW41 = (1 << 41) - 1
_MEMO_LIMIT = 1 << 12


def _plan_one(ins: Instruction, edit: Edit, kinfo: KernelInfo, scratch: frozenset[int] | None,
              usable: int, static: _Static | None = None, memo: dict | None = None) -> tuple[int, int, str]:
    """New (lo, hi) and the text nvdisasm must print for them, or PatchRefused.

    ``static``: :class:`_Static` of ``ins`` (read here where not given); ``memo``: the kernel facts'
    memo of control codes (:class:`_KernelFacts`), or None."""
    s = static if static is not None else _Static(ins, kinfo)
    if s.refusal is not None:
        raise PatchRefused(s.refusal)
    lo, hi = ins.lo, ins.hi
    text = ins.text
    asked = _asked(edit)
    known = key = None
    if memo is not None:
        key = (s.c, asked, tuple(map(type, asked)))
        try:
            known = memo.get(key)
        except TypeError:  # an unhashable field value: computed, not remembered
            key = None
    if known is not None:
        new_ctrl = known[0]
    else:
        fields = {name: v for name, v in zip(_CONTROL_FIELDS, asked) if v is not _KEEP}
        new_ctrl = dataclasses.replace(s.ctrl, **fields)

    if edit.regs is not _KEEP or asked[0] is not _KEEP:  # registers or reuse flags
        if s.ffma_refusal is not None:
            raise PatchRefused(s.ffma_refusal)
        where = s.where
        cur = s.cur
        regs = list(edit.regs) if edit.regs is not _KEEP else list(cur)
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
        reuse = new_ctrl.reuse
        if reuse and new_ctrl.yield_flag:
            raise PatchRefused(f"{where}: reuse flags are ignored (and not printed) on an instruction with the "
                               "yield flag set; clear yield (yield_flag=False) to use reuse")
        for i, r in enumerate(regs[1:]):
            if r == RZ and reuse >> i & 1:
                raise PatchRefused(f"{where}: RZ cannot be marked .reuse (slot {'ABC'[i]})")
        lo = (lo & ~(0xFF << 16) & ~(0xFF << 24) & ~(0xFF << 32)) | (regs[0] << 16) | (regs[1] << 24) | (regs[2] << 32)
        hi = (hi & ~0xFF) | regs[3]
        names = _REG_NAMES
        body = (f"{s.opcode} {names[regs[0]]}, {names[regs[1]]}{_REUSE[reuse & 1]}, "
                f"{names[regs[2]]}{_REUSE[reuse >> 1 & 1]}, {names[regs[3]]}{_REUSE[reuse >> 2 & 1]}")
        text = f"{s.predicate} {body}" if s.predicate else body
    elif new_ctrl.reuse and new_ctrl.yield_flag:
        raise PatchRefused(f"{s.where}: setting yield would hide its reuse flags")
    if known is not None:
        bits = known[1]
    else:
        bits = new_ctrl.bits()  # refuses out-of-range fields; a refusal is never remembered
        if key is not None and len(memo) < _MEMO_LIMIT:
            memo[key] = (new_ctrl, bits)
    return lo, (hi & _LOW41) | (bits << 41), text


def _plan(cubin: Cubin, kernel: str, edits: list[Edit], scratch,
          facts: _KernelFacts | None = None) -> tuple[bytes, dict[int, tuple[int, int, str]]]:
    """The patched code of ``kernel`` and, per edited offset, (lo, hi, text nvdisasm must print).
    ``facts``: the kernel as read for an earlier plan of the same call (:func:`patch_many`);
    read here where not given."""
    facts = facts if facts is not None else _kernel_facts(cubin, kernel)
    by_off, kinfo, usable, memo, static = facts.by_off, facts.kinfo, facts.usable, facts.memo, facts.static
    text = bytearray(facts.text)
    planned: dict[int, tuple[int, int, str]] = {}
    for e in edits:
        ins = by_off.get(e.offset)
        if ins is None:
            raise PatchRefused(f"{kernel} has no instruction at offset {e.offset:#06x}")
        if e.offset in planned:
            raise PatchRefused(f"{kernel}+{e.offset:#06x} is edited twice in one patch")
        lo, hi, t = _plan_one(ins, e, kinfo, scratch, usable, static(ins), memo)
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


def patch(cubin: Cubin, kernel: str, edits: list[Edit], *, scratch: set[int] | None = None) -> PatchResult:
    """Apply ``edits`` to ``kernel`` and return verified new cubin bytes: the patched code as
    nvdisasm reads it, checked against the bytes (:meth:`Cubin.instructions`) and the plan."""
    text, planned = _plan(cubin, kernel, edits, frozenset(scratch) if scratch is not None else None)
    patched = cubin.spliced(kernel, text, name=cubin.name + " (patched)")
    after = patched.instructions(kernel)
    changed = _verify(cubin.instructions(kernel), after, planned, kernel)
    return PatchResult(patched.data, kernel, changed, after)


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
    facts = _kernel_facts(cubin, kernel)  # read once, for every variant
    plans = [_plan(cubin, kernel, v, frozen, facts=facts) for v in variants]
    # The original code is read with them so that before and after come from the same listing mode.
    listings = code_listings([cubin.text(kernel)] + [t for t, _ in plans], cubin.arch)
    before = listings[0]
    results = []
    for n, (text, planned) in enumerate(plans, start=1):
        after = listings[n]
        changed = _verify(before, after, planned, kernel, same_listing_mode=False)
        results.append(PatchResult(cubin.spliced(kernel, text).data, kernel, changed, after))
    return results


def prefetch(cubins: Iterable[Cubin]) -> int:
    """Read every kernel of ``cubins`` whose listing is not cached yet, in nvdisasm batches over the cores.
    Returns how many kernel codes were asked for."""
    by_arch: dict[str, list[bytes]] = {}
    for cb in cubins:
        for name in cb.kernels:
            by_arch.setdefault(cb.arch, []).append(cb.text(name))
    code_listings_by_arch(by_arch)
    return sum(len(c) for c in by_arch.values())


def prefetch_patches(requests: Iterable[tuple[Cubin, str, list[Edit], set[int] | None]]) -> int:
    """Plan each ``(cubin, kernel, edits, scratch)`` patch and read all the patched codes in nvdisasm
    batches (:func:`code_listings_by_arch`), so that the :func:`patch` calls that follow find their
    listings cached.

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
    code_listings_by_arch(by_arch)
    return sum(len(c) for c in by_arch.values())

