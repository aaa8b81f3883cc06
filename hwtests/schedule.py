"""Reading a timed region as a schedule: which instructions it holds and how far apart they issue.

Shared by the static facts (what the compiler emitted) and the GPU facts (what was launched)."""

from collections import Counter

from pytest_gpuprops import sass


def is_filler(i: sass.Instruction) -> bool:
    """NOP, or an instruction predicated off for good (@!PT / @!UPT): the padding ptxas emits."""
    return i.base_opcode == "NOP" or i.predicate in ("@!PT", "@!UPT")


def region_opcodes(instrs: list[sass.Instruction]) -> Counter:
    """Opcodes between the two clock reads, padding left out."""
    _, region, _ = sass.timed_region(instrs)
    return Counter(i.opcode for i in region if not is_filler(i))


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
