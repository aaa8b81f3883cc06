"""The shared-memory bank model the bank-conflict facts test (kernels/smem_conflict.cu).

32 banks of 4 bytes: word w lies in bank w % 32. A warp access of VEC words per lane (LDS, LDS.64,
LDS.128) is served as requests of at most 256 bytes of lane data: the whole warp for LDS and LDS.64,
each half-warp (lanes 0-15, 16-31) for LDS.128. A request costs as many wavefronts as the most
distinct words it reads from any one bank, at least 1; lanes of a request that read the same word
share it (broadcast). Each wavefront moves at most 128 bytes, so a contiguous LDS.64 costs 2 and a
contiguous LDS.128 4 (2 per half-warp).

Measured on the H100 (2026-11-21), the two broadcasts that tell the models apart: LDS.64 with every
lane on one address costs 1 wavefront (1.006 cycles), so not 2 phases of 16 lanes; LDS.128 costs 2
(2.005 cycles), so not 1 request for the warp, nor 4 quarter-warp phases.

Pure Python: tested on the CPU (tests/test_hwtests_helpers.py), measured on the GPU
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
    per request (the warp, or each half-warp for LDS.128), the most distinct words in one bank."""
    check_access(stride_words, vec)
    lanes_per_request = 32 if vec <= 2 else 16
    total = 0
    for first in range(0, 32, lanes_per_request):
        per_bank: dict[int, set[int]] = {}
        for lane in range(first, first + lanes_per_request):
            for w in lane_words(lane, stride_words, vec):
                per_bank.setdefault(w % BANKS, set()).add(w)
        total += max([1, *(len(words) for words in per_bank.values())])
    return total
