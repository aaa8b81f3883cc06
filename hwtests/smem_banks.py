"""The shared-memory bank model the bank-conflict facts test (kernels/smem_conflict.cu).

32 banks of 4 bytes: word w lies in bank w % 32. A warp's access of VEC words per lane (LDS, LDS.64,
LDS.128) moves 32 * VEC * 4 bytes, at most 128 bytes per wavefront, so it is served in VEC phases of
32 / VEC consecutive lanes (lanes 0-31; 0-15 and 16-31; 0-7, 8-15, ...). Within a phase, lanes that
read the same word share it (broadcast); a bank holding k distinct words the phase reads costs k
wavefronts. A warp access costs the sum over its phases of the largest such k (at least 1 each).

Pure Python: tested on the CPU (tests/test_issue10_models.py), measured on the GPU
(hwtests/test_smem_conflicts.py)."""

from __future__ import annotations

BANKS = 32
WIDTHS = (1, 2, 4)  # words per lane: LDS, LDS.64, LDS.128
MAX_STRIDE_WORDS = 256  # kernels/smem_conflict.cu's buffer holds 31 * 256 + 4 words


def lane_words(lane: int, stride_words: int, vec: int) -> list[int]:
    """The words lane ``lane`` reads: ``vec`` consecutive words from ``lane * stride_words``."""
    return [lane * stride_words + k for k in range(vec)]


def check_access(stride_words: int, vec: int) -> None:
    """Raise ValueError for an access kernels/smem_conflict.cu cannot make."""
    if vec not in WIDTHS:
        raise ValueError(f"vec must be one of {WIDTHS} (LDS, LDS.64, LDS.128), not {vec}")
    if stride_words < 0 or stride_words % vec:
        raise ValueError(f"stride_words={stride_words} must be a non-negative multiple of vec={vec} "
                         f"(a {vec * 4}-byte access must be {vec * 4}-byte aligned)")
    if stride_words > MAX_STRIDE_WORDS:
        raise ValueError(f"stride_words={stride_words} is over the kernel's {MAX_STRIDE_WORDS}")


def phase_wavefronts(words: list[int]) -> int:
    """Wavefronts for one phase reading ``words``: the most distinct words in any one bank."""
    per_bank: dict[int, set[int]] = {}
    for w in words:
        per_bank.setdefault(w % BANKS, set()).add(w)
    return max([1, *(len(s) for s in per_bank.values())])


def bank_wavefronts(stride_words: int, vec: int) -> int:
    """Wavefronts one warp access costs when lane l reads ``vec`` words from word l * stride_words."""
    check_access(stride_words, vec)
    lanes_per_phase = 32 // vec
    total = 0
    for phase in range(vec):
        lanes = range(phase * lanes_per_phase, (phase + 1) * lanes_per_phase)
        total += phase_wavefronts([w for lane in lanes for w in lane_words(lane, stride_words, vec)])
    return total
