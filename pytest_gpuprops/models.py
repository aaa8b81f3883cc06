"""The cost models behind the model facts: register-file bank conflicts of an FFMA (the seeds' two banks,
bank = reg % 2, the operand reuse cache) and the HMMA issue model (dependency, per-warp issue and pipe
limits). Pure arithmetic: hwtests compare measurements with them (assertions.evaluate_model)."""

from __future__ import annotations

from collections.abc import Iterable

RZ = 255


def bank_read_cycles(ra: int, rb: int, rc: int, reuse: int = 0, *, banks: int = 2) -> int:
    """Register-file read cycles of one FFMA under the seeds' bank model.

    Each bank gives one 32-bit read per cycle; bank = reg % banks. A slot marked reuse reads the
    operand reuse cache (free); RZ reads nothing; a register named in two slots is read once.
    The cost is the largest number of distinct register reads falling in one bank, at least 1.
    """
    reads = {r for i, r in enumerate((ra, rb, rc)) if r != RZ and not (reuse >> i) & 1}
    per_bank: dict[int, int] = {}
    for r in reads:
        per_bank[r % banks] = per_bank.get(r % banks, 0) + 1
    return max([1, *per_bank.values()])


def reuse_mask(text: str) -> int:
    """The seeds' reuse notation for slots A, B (and C): "R-" -> 1, "-R" -> 2, "RR" -> 3, "--" -> 0."""
    mask = 0
    for i, ch in enumerate(text):
        if ch == "R":
            mask |= 1 << i
        elif ch != "-":
            raise ValueError(f"reuse notation {text!r}: use 'R' or '-' per slot (A, B, C)")
    return mask


def explained_fraction(cases: Iterable[tuple[tuple[int, int, int, int], float]], *, banks: int,
                       cycles_per_read: float, tolerance_rel: float) -> float:
    """Fraction of measured (operands, cycles) cases that a bank count explains."""
    cases = list(cases)
    hits = sum(abs(c - cycles_per_read * bank_read_cycles(*ops, banks=banks)) <= tolerance_rel * c for ops, c in cases)
    return hits / len(cases) if cases else 0.0


def hmma_cycles_per_smsp(ilp: int, warps_per_smsp: int, *, latency: float, issue_interval: float,
                         pipe_interval: float) -> float:
    """Cycles per HMMA per SM sub-partition with ``warps_per_smsp`` warps each running ``ilp``
    independent chains: the slowest of the dependency limit, the per-warp issue limit, and the
    tensor pipe's rate."""
    w = warps_per_smsp
    return max(latency / (ilp * w), issue_interval / w, pipe_interval)
