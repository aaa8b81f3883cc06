"""Shared-memory bank conflicts (kernels/smem_conflict.cu): 32 banks of 4 bytes; a warp access whose
lanes hit k distinct words in one bank costs k wavefronts (hwtests/smem_banks.py). Cycles per warp
access per SM, one 1024-thread block repeating the access."""

import pytest
import specs
from hypothesis import given
from hypothesis import strategies as st
from smem_banks import MAX_STRIDE_WORDS, WIDTHS, bank_wavefronts

pytestmark = pytest.mark.gpu
MODEL_TOLERANCE = 0.08  # loop control and launch skew, as the bandwidth facts
OPCODE = {1: "LDS", 2: "LDS.64", 4: "LDS.128"}


def cycles_per_access(gpuprops, vec: int, stride_words: int, name: str):
    return gpuprops.measure(name, specs.smem_conflict(vec, stride_words), divisor=specs.conflict_accesses(),
                            mode="span")


def test_smem_wavefront_cycles(gpuprops, benchmark):
    m = cycles_per_access(gpuprops, 1, 1, "smem_wavefront_cycles")
    gpuprops.check("smem_wavefront_cycles", m, benchmark=benchmark,
                   method="conflict-free LDS (lane l reads word l), one 1024-thread block, 2048 accesses per warp; "
                          "cycles per warp access per SM over the block's span (one wavefront)")


@given(vec=st.sampled_from(WIDTHS), stride=st.integers(1, 64))
def test_bank_conflicts_cost_the_model_wavefronts(gpuprops, vec, stride):
    """Cycles per warp access = wavefronts(stride, width) x one wavefront's cycles. Lane strides of
    1..64 elements; stride 0 (every lane on one address) is left out: whether a wide broadcast takes
    one phase or VEC is not what this model states."""
    stride_words = min(stride * vec, MAX_STRIDE_WORDS)
    wavefront = gpuprops.expected("smem_wavefront_cycles")
    m = cycles_per_access(gpuprops, vec, stride_words, f"{OPCODE[vec]} stride {stride_words}")
    k = bank_wavefronts(stride_words, vec)
    gpuprops.plot_point("smem_conflicts", vec=vec, stride_words=stride_words, wavefronts=k, cycles=m.median)
    assert m.median == pytest.approx(k * wavefront, rel=MODEL_TOLERANCE), (
        f"{OPCODE[vec]}, lane stride {stride_words} words: measured {m.summary()}, model {k} wavefronts x "
        f"{wavefront:.3f} = {k * wavefront:.3f}")
