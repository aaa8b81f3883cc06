"""The shared-memory bank model the bank-conflict facts test (kernels/smem_conflict.cu).

32 banks of 4 bytes: word w lies in bank w % 32. A warp access of VEC words per lane (LDS, LDS.64,
LDS.128) costs as many wavefronts as the most distinct words it reads from any one bank (at least
1); lanes that read the same word share it (broadcast), across the whole warp. Each wavefront
moves at most 128 bytes, and a contiguous LDS.64 / LDS.128 reads 2 / 4 words per bank, so the
rule also gives their 2 and 4 wavefronts.

An earlier form of this model served LDS.64 and LDS.128 in 2 and 4 fixed phases of 16 and 8 lanes,
which predicts 2 and 4 wavefronts when every lane reads the same address; the H100 read 1.006
cycles for that LDS.64 (2026-11-21): the broadcast spans the warp.

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


def bank_wavefronts(stride_words: int, vec: int) -> int:
    """Wavefronts one warp access costs when lane l reads ``vec`` words from word l * stride_words:
    the most distinct words in any one bank."""
    check_access(stride_words, vec)
    per_bank: dict[int, set[int]] = {}
    for lane in range(32):
        for w in lane_words(lane, stride_words, vec):
            per_bank.setdefault(w % BANKS, set()).add(w)
    return max([1, *(len(words) for words in per_bank.values())])
