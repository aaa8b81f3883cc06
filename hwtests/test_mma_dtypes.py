"""mma.sync for bf16 (m16n8k16), tf32 (m16n8k8), s8 (m16n8k32), f16 accumulate (m16n8k16) and the
2:4 sparse mma.sp.sync m16n8k32 with f16 and bf16 inputs: dependent latency, one warp's issue interval
and the pipe's rate per SM sub-partition, each one spec of specs_mma.FACTS (kernels/mma_sync.cu; its
timed regions checked without a GPU by test_static_mma.py); and, for the dense types, the HMMA issue
model over the whole ILP x warps grid (the method and the model are test_tensorcore.py's)."""

import fact_tests
import pytest
import specs
import specs_mma
from test_tensorcore import GRID, MODEL_TOLERANCE

from pytest_gpuprops.models import hmma_cycles_per_smsp

pytestmark = pytest.mark.gpu
DTYPES = sorted(specs.MMA_DTYPES)


def _count(ilp: int) -> int:
    return specs.MMA_UNROLL * ilp * specs.HMMA_ITERS


def _opcode(dtype: str) -> str:
    return specs.MMA_DTYPES[dtype][1]


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(specs_mma.FACTS))
def test_fact(gpuprops, fact, benchmark):
    fact_tests.measure_and_check(gpuprops, fact, benchmark)


@pytest.mark.fact("mma_{dtype}_issue_model")
@pytest.mark.parametrize("dtype", DTYPES)
def test_mma_cycles_follow_the_issue_model(gpuprops, dtype):
    """The 32-point grid against max(L / (ILP * W), i / W, p) with this type's own L, i and p."""
    latency = gpuprops.expected(f"mma_{dtype}_dependent_cycles")
    interval = gpuprops.expected(f"mma_{dtype}_single_warp_issue_cycles")
    pipe = gpuprops.expected(f"mma_{dtype}_smsp_cycles")

    def measure_grid():
        cases = []
        for ilp, warps in GRID:
            m = gpuprops.measure(f"mma {dtype} ILP{ilp} W{warps}", specs.mma(dtype, ilp, warps),
                                 divisor=_count(ilp) * warps, mode="span")
            model = hmma_cycles_per_smsp(ilp, warps, latency=latency, issue_interval=interval, pipe_interval=pipe)
            cases.append((f"ILP {ilp} x {warps} warp(s)", model, m.median))
        return cases

    cases = measure_grid()
    for (ilp, warps), (_, model, cycles) in zip(GRID, cases):
        gpuprops.plot_point(f"mma_{dtype}", ilp=ilp, warps=warps, cycles=cycles, model=model)
    gpuprops.check_model(f"mma_{dtype}_issue_model", cases, tolerance_rel=MODEL_TOLERANCE, unit="cycles/MMA/SMSP",
                         remeasure=measure_grid,
                         method=f"max(L/(ILP*W), i/W, p) with L={latency}, i={interval}, p={pipe} ({_opcode(dtype)}); "
                                "32 points, one block, span per sub-partition",
                         source="derived as the HMMA.16816.F32 issue model (test_tensorcore.py)")
