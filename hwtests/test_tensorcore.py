"""Tensor cores: HMMA.16816.F32 (mma.sync m16n8k16 f16 -> f32) latency, issue and pipe rate
(seeds/tensorcore_pipeline.md)."""

import pytest
import specs
from hypothesis import given
from hypothesis import strategies as st

from pytest_gpuprops.assertions import hmma_cycles_per_smsp

pytestmark = pytest.mark.gpu
HMMA = specs.HMMA_UNROLL
# Away from the knee the model holds within 6 %: the block's span includes the warps' launch skew,
# about 70 cycles, 4.6 % of the shortest runs (H200, ILP 1, 2 warps: 12.45 against 11.90). Where the
# dependency limit is within 35 % of the pipe rate, chains queue at the pipe and the H200 measured
# up to 10.5 % above max() (ILP 1, 4 warps: 6.80 against 6.15; ILP 1, 3 warps: 8.70 against 7.93,
# 29 % from the knee, seen only on a later run whose draws included it).
MODEL_TOLERANCE, KNEE_TOLERANCE, KNEE_WIDTH = 0.06, 0.12, 0.35


def test_hmma_dependent_latency(gpuprops, benchmark):
    m = gpuprops.measure("hmma_16816_f32_dependent_cycles", specs.hmma(1, 1), divisor=HMMA)
    gpuprops.check("hmma_16816_f32_dependent_cycles", m, benchmark=benchmark,
                   method="64 dependent mma.sync m16n8k16 (one accumulator chain), one warp; cycles per HMMA")


def test_hmma_single_warp_issue_interval(gpuprops, benchmark):
    """Where cycles per HMMA stop falling with ILP for one warp: the per-warp issue interval."""
    m = gpuprops.measure("hmma_16816_f32_single_warp_issue_cycles", specs.hmma(8, 1), divisor=8 * HMMA)
    gpuprops.check("hmma_16816_f32_single_warp_issue_cycles", m, benchmark=benchmark,
                   method="8 independent accumulator chains x 64 HMMA, one warp; cycles per HMMA")


def test_hmma_saturated_per_smsp(gpuprops, benchmark):
    m = gpuprops.measure("hmma_16816_f32_smsp_cycles", specs.hmma(8, 4), divisor=8 * HMMA * 4, mode="span")
    gpuprops.check("hmma_16816_f32_smsp_cycles", m, benchmark=benchmark,
                   method="8 chains x 4 warps per SM sub-partition, one block; cycles per HMMA per sub-partition "
                          "over the block's span")


@given(ilp=st.integers(1, 8), warps=st.integers(1, 4))
def test_hmma_cycles_follow_the_issue_model(gpuprops, ilp, warps):
    """Cycles per HMMA per sub-partition = max(latency / (ILP * W), interval / W, pipe floor)."""
    latency = gpuprops.expected("hmma_16816_f32_dependent_cycles")
    interval = gpuprops.expected("hmma_16816_f32_single_warp_issue_cycles")
    pipe = gpuprops.expected("hmma_16816_f32_smsp_cycles")
    m = gpuprops.measure(f"hmma ILP{ilp} W{warps}", specs.hmma(ilp, warps), divisor=ilp * HMMA * warps, mode="span")
    model = hmma_cycles_per_smsp(ilp, warps, latency=latency, issue_interval=interval, pipe_interval=pipe)
    gpuprops.plot_point("hmma", ilp=ilp, warps=warps, cycles=m.median, floor=pipe)
    dependency, pipe_floor = latency / (ilp * warps), max(interval / warps, pipe)
    knee = abs(dependency - pipe_floor) <= KNEE_WIDTH * pipe_floor
    assert m.median == pytest.approx(model, rel=KNEE_TOLERANCE if knee else MODEL_TOLERANCE), (
        f"ILP {ilp}, {warps} warp(s)/SMSP: measured {m.summary()}, model {model:.3f} = max({latency:.2f}/"
        f"({ilp}*{warps}), {interval:.2f}/{warps}, {pipe:.2f})")


def test_hmma_tensor_pipe_cycles_per_instruction(gpuprops, ncu):
    """Nsight Compute: tensor-pipe active cycles per HMMA.16816 (the seed read 16 on an RTX 4090), and
    how the pipe's utilisation grows from ILP 1 to ILP 3 (one warp, dependency bound: 3 times)."""
    from pytest_gpuprops.measure import Measurement
    active = "smsp__pipe_tensor_op_hmma_cycles_active.sum"
    insts = "smsp__inst_executed_pipe_tensor_op_hmma.sum"
    pct = "smsp__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    got = {ilp: ncu(specs.hmma(ilp, 1), [active, insts, pct]) for ilp in (1, 3)}
    per = Measurement.given("cycles per HMMA", [g[active] / g[insts] for g in got.values()], kernel="hmma_16816")
    gpuprops.check("hmma_16816_f32_tensor_pipe_cycles", per,
                   method=f"ncu --clock-control none: {active} / {insts}, one warp, ILP 1 and 3")
    ratio = Measurement.given("utilisation ILP3 / ILP1", [got[3][pct] / got[1][pct]], unit="x", kernel="hmma_16816",
                              launch={"pct_ilp1": got[1][pct], "pct_ilp3": got[3][pct]})
    gpuprops.check("hmma_16816_f32_tensor_pipe_utilisation_ilp3_over_ilp1", ratio,
                   method=f"ncu: {pct} at ILP 3 over ILP 1, one warp (each alone varies with launch overhead)")
