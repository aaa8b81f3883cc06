"""mma.sync for bf16 (m16n8k16), tf32 (m16n8k8), s8 (m16n8k32) and f16 accumulate (m16n8k16):
dependent latency, one warp's issue interval and the pipe's rate per SM sub-partition, and the HMMA
issue model over ILP x warps, per input type (kernels/mma_sync.cu)."""

import pytest
import specs
from hypothesis import given
from hypothesis import strategies as st

from pytest_gpuprops.assertions import hmma_cycles_per_smsp

pytestmark = pytest.mark.gpu
U = specs.MMA_UNROLL
DTYPES = sorted(specs.MMA_DTYPES)
# The HMMA model's tolerances (test_tensorcore.py): 6 % away from the knee, 12 % within 35 % of it.
MODEL_TOLERANCE, KNEE_TOLERANCE, KNEE_WIDTH = 0.06, 0.12, 0.35


def _opcode(dtype: str) -> str:
    return specs.MMA_DTYPES[dtype][1]


@pytest.mark.parametrize("dtype", DTYPES)
def test_mma_dependent_latency(gpuprops, dtype, benchmark):
    name = f"mma_{dtype}_dependent_cycles"
    m = gpuprops.measure(name, specs.mma(dtype, 1, 1), divisor=U)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{U} dependent {_opcode(dtype)} (one accumulator chain), one warp; cycles per instruction")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mma_single_warp_issue_interval(gpuprops, dtype, benchmark):
    name = f"mma_{dtype}_single_warp_issue_cycles"
    m = gpuprops.measure(name, specs.mma(dtype, 8, 1), divisor=8 * U)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"8 independent accumulator chains x {U} {_opcode(dtype)}, one warp; cycles per instruction")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mma_saturated_per_smsp(gpuprops, dtype, benchmark):
    name = f"mma_{dtype}_smsp_cycles"
    m = gpuprops.measure(name, specs.mma(dtype, 8, 4), divisor=8 * U * 4, mode="span")
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"8 chains x 4 warps per SM sub-partition of {_opcode(dtype)}, one block; cycles per "
                          "instruction per sub-partition over the block's span")


@given(dtype=st.sampled_from(DTYPES), ilp=st.integers(1, 8), warps=st.integers(1, 4))
def test_mma_cycles_follow_the_issue_model(gpuprops, dtype, ilp, warps):
    """Cycles per instruction per sub-partition = max(latency / (ILP * W), interval / W, pipe)."""
    latency = gpuprops.expected(f"mma_{dtype}_dependent_cycles")
    interval = gpuprops.expected(f"mma_{dtype}_single_warp_issue_cycles")
    pipe = gpuprops.expected(f"mma_{dtype}_smsp_cycles")
    m = gpuprops.measure(f"mma {dtype} ILP{ilp} W{warps}", specs.mma(dtype, ilp, warps), divisor=ilp * U * warps,
                         mode="span")
    model = hmma_cycles_per_smsp(ilp, warps, latency=latency, issue_interval=interval, pipe_interval=pipe)
    gpuprops.plot_point(f"mma_{dtype}", ilp=ilp, warps=warps, cycles=m.median, floor=pipe)
    dependency, pipe_floor = latency / (ilp * warps), max(interval / warps, pipe)
    knee = abs(dependency - pipe_floor) <= KNEE_WIDTH * pipe_floor
    assert m.median == pytest.approx(model, rel=KNEE_TOLERANCE if knee else MODEL_TOLERANCE), (
        f"{dtype} ILP {ilp}, {warps} warp(s)/SMSP: measured {m.summary()}, model {model:.3f} = max({latency:.2f}/"
        f"({ilp}*{warps}), {interval:.2f}/{warps}, {pipe:.2f})")
