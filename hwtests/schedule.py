"""Reading a timed region as a schedule: how far apart the compiler issues an opcode.

Shared by the static facts (what the compiler emitted) and the GPU facts (what was launched)."""

from pytest_gpuprops import sass


def issue_gaps(instrs: list[sass.Instruction], opcode: str) -> list[int]:
    """Stall cycles from each ``opcode`` instruction to the next one in the timed region."""
    _, region, _ = sass.timed_region(instrs)
    gaps, acc, seen = [], 0, False
    for i in region:
        if i.opcode == opcode:
            if seen:
                gaps.append(acc)
            acc, seen = 0, True
        acc += i.control.stall
    return gaps
