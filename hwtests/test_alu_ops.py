"""Warp shuffle, MUFU (ex2, rsqrt, sin), DFMA and IMAD: dependent latency and cycles per instruction
per SM sub-partition (kernels/alu_chain.cu), the FFMA facts' method per op. Each fact is one spec of
specs_alu.OP_FACTS and one test here; their timed regions are checked without a GPU, on every arch,
by test_static_alu.py.

sin.approx.f32 is FMUL.RZ (the argument times 1/(2 pi)) then MUFU.SIN on every arch here: its facts
are named mufu_sin_fmul_* and count one FMUL.RZ + one MUFU.SIN per step."""

import fact_tests
import pytest
import specs_alu

pytestmark = pytest.mark.gpu


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(specs_alu.OP_FACTS))
def test_fact(gpuprops, fact, benchmark):
    fact_tests.measure_and_check(gpuprops, fact, benchmark)
