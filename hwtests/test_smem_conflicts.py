"""Shared-memory bank conflicts (kernels/smem_conflict.cu): 32 banks of 4 bytes; a warp access whose
lanes hit k distinct words in one bank costs k wavefronts (hwtests/smem_banks.py). Cycles per warp
access per SM, one 1024-thread block repeating the access. The conflict-free wavefront is a spec
(specs_smem.WAVEFRONT, its region checked by test_static_smem.py); the model is a hand-written test."""

import fact_tests
import pytest
import specs
import specs_smem
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from smem_banks import MAX_STRIDE_WORDS, WIDTHS, bank_wavefronts

pytestmark = pytest.mark.gpu
# Worst case seen: 0.5 % (32.004 cycles for 32 wavefronts x 1.005) over 7 runs of 27 drawn accesses on an
# H100 and two H200s, 2026-11-21.
MODEL_TOLERANCE = 0.03
OPCODE = {1: "LDS", 2: "LDS.64", 4: "LDS.128"}


def cycles_per_access(gpuprops, vec: int, stride_words: int, name: str):
    return gpuprops.measure(name, specs.smem_conflict(vec, stride_words), divisor=specs.conflict_accesses(),
                            mode="span")


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params([specs_smem.WAVEFRONT]))
def test_fact(gpuprops, fact, benchmark):
    """One conflict-free wavefront (specs_smem.WAVEFRONT), the unit the model below scales."""
    fact_tests.measure_and_check(gpuprops, fact, benchmark)


ACCESS = st.tuples(st.sampled_from(WIDTHS), st.integers(0, 64))
BROADCASTS = [(1, 0), (2, 0), (4, 0)]


@settings(max_examples=1, derandomize=specs.SAME_DRAWS, phases=[Phase.explicit, Phase.generate])
@given(data=st.data())
@pytest.mark.fact("smem_bank_conflict_model")
def test_bank_conflicts_cost_the_model_wavefronts(gpuprops, data):
    """Cycles per warp access = wavefronts(stride, width) x one wavefront's cycles, over 24 drawn
    (width, lane stride) accesses and the three broadcasts, measured in one batch.

    Hand-written, not a spec: a model checked over hypothesis-drawn accesses, each its own launch,
    against the wavefront fact's value (a spec is one launch and one measured value)."""
    drawn = data.draw(st.lists(ACCESS, min_size=24, max_size=24, unique=True), label="accesses")
    cases = list(dict.fromkeys(BROADCASTS + [(vec, min(stride * vec, MAX_STRIDE_WORDS)) for vec, stride in drawn]))
    wavefront = gpuprops.expected("smem_wavefront_cycles")

    def measure_cases():
        out = []
        for vec, stride_words in cases:
            m = cycles_per_access(gpuprops, vec, stride_words, f"{OPCODE[vec]} stride {stride_words}")
            k = bank_wavefronts(stride_words, vec)
            out.append((f"{OPCODE[vec]} lane stride {stride_words} words ({k} wavefronts)", k * wavefront, m.median))
        return out

    measured = measure_cases()
    for (vec, stride_words), (_, predicted, cycles) in zip(cases, measured):
        gpuprops.plot_point("smem_conflicts", vec=vec, stride_words=stride_words, cycles=cycles, model=predicted)
    gpuprops.check_model("smem_bank_conflict_model", measured, remeasure=measure_cases,
                         tolerance_rel=MODEL_TOLERANCE, unit="cycles/access",
                         method="wavefronts = most distinct 4-byte words in one of 32 banks, x the conflict-free "
                                f"access's {wavefront} cycles; one 1024-thread block per access pattern",
                         source="32 banks of 4 bytes, broadcast across the warp (hwtests/smem_banks.py)")
