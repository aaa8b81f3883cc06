"""Timed regions: the code between a kernel's two clock reads, what is in it, whether it is clean,
and the edits the fact kernels need there."""

from __future__ import annotations

from .encoding import Instruction
from .errors import PatchRefused, SassError
from .patching import Edit

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
# edits the fact kernels need


#: wait mask -> the scoreboards it names, in order (the region checks ask for every instruction's)
_WAIT_SETS = tuple(tuple(b for b in range(6) if mask >> b & 1) for mask in range(64))


def _sets(i: Instruction) -> set[int]:
    """Scoreboards the instruction sets (its read and write barriers)."""
    c = i.control
    return {b for b in (c.read_barrier, c.write_barrier) if b is not None}


def _waits(i: Instruction) -> set[int]:
    """Scoreboards the instruction waits on before it issues."""
    return set(_WAIT_SETS[i.control.wait_mask])


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
