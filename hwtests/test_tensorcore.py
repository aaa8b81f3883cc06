"""Tensor cores: HMMA.16816.F32 (mma.sync m16n8k16 f16 -> f32) latency, issue and pipe rate, and the
issue model that ties them together (the original sm_86 notes: dependent 24 cycles, independent
HMMAs issue every 8; on sm_90 the compiler spaces them 24 and 6).

Every timed HMMA kernel runs its 64-HMMA body 16 times (specs.HMMA_ITERS), so the block's start
skew is under 1 % of its span and a dependent chain's last, unawaited HMMA (sm_90 schedules HMMA
by stall counts, not scoreboards, so the stop read cannot wait for it) is 1/1024 of the chain.

The latency, issue interval and pipe rate are specs of specs_tensorcore.FACTS (launch, region,
statistic, divisor and method in one place), their regions checked without a GPU, on every arch, by
test_static_tensorcore.py; the issue model and the Nsight Compute facts are hand-written tests (their
docstrings say why)."""

import fact_tests
import pytest
import specs
import specs_tensorcore

from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.models import hmma_cycles_per_smsp

pytestmark = pytest.mark.gpu
# Worst case over the 32-point grid on the H100 (2026-11-21): 1.9 % above the model at ILP 1 x 4
# warps, where four 24-cycle chains exactly fill a 6-cycle pipe; about 1 % elsewhere.
MODEL_TOLERANCE = 0.025
GRID = [(ilp, warps) for warps in (1, 2, 3, 4) for ilp in range(1, 9)]


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(specs_tensorcore.FACTS))
def test_fact(gpuprops, fact, benchmark):
    """The dependent latency L, one warp's issue interval i and the sub-partition's pipe interval p
    (specs_tensorcore.FACTS), which the issue model below combines."""
    fact_tests.measure_and_check(gpuprops, fact, benchmark)


@pytest.mark.fact("hmma_16816_f32_issue_model")
def test_hmma_cycles_follow_the_issue_model(gpuprops):
    """The whole grid, ILP 1-8 x 1-4 warps per sub-partition, against a model derived from how the
    hardware issues: W warps x ILP chains, each HMMA of a chain L cycles after the previous one,
    one warp issuing at most every i cycles, the sub-partition's tensor pipe taking one every p:

        cycles per HMMA per sub-partition = max(L / (ILP * W), i / W, p)

    L, i and p are this arch's own facts (measured by the three spec tests above).

    Hand-written, not a spec: a model checked over 32 launches (the grid), against three facts'
    values, where a spec is one launch and one measured value."""
    latency = gpuprops.expected("hmma_16816_f32_dependent_cycles")
    interval = gpuprops.expected("hmma_16816_f32_single_warp_issue_cycles")
    pipe = gpuprops.expected("hmma_16816_f32_smsp_cycles")

    def measure_grid():
        cases = []
        for ilp, warps in GRID:
            m = gpuprops.measure(f"hmma ILP{ilp} W{warps}", specs.hmma(ilp, warps),
                                 divisor=specs.hmma_count(ilp) * warps, mode="span")
            model = hmma_cycles_per_smsp(ilp, warps, latency=latency, issue_interval=interval, pipe_interval=pipe)
            cases.append((f"ILP {ilp} x {warps} warp(s)", model, m.median))
        return cases

    cases = measure_grid()
    for (ilp, warps), (_, model, cycles) in zip(GRID, cases):
        gpuprops.plot_point("hmma", ilp=ilp, warps=warps, cycles=cycles, model=model)
    gpuprops.check_model("hmma_16816_f32_issue_model", cases, tolerance_rel=MODEL_TOLERANCE,
                         unit="cycles/HMMA/SMSP", remeasure=measure_grid,
                         method=f"max(L/(ILP*W), i/W, p) with L={latency}, i={interval}, p={pipe} from this arch's "
                                "facts; 32 points, one block, span per sub-partition",
                         source="derived from the issue rules above; validated on the H100 and H200 grids "
                                "(docs/results.md)")


NCU_ACTIVE = "smsp__pipe_tensor_op_hmma_cycles_active.sum"
NCU_INSTS = "smsp__inst_executed_pipe_tensor_op_hmma.sum"
NCU_PCT = "smsp__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"


def _hmma_profile_request():
    """One ncu process profiling a 128 000-HMMA-per-warp kernel at ILP 1, 2 and 3 (4 warps, one per
    sub-partition): long enough that launch overhead is under 1 % of what ncu counts."""
    return [specs.hmma(ilp, 1, specs.HMMA_NCU_ITERS) for ilp in (1, 2, 3)], [NCU_ACTIVE, NCU_INSTS, NCU_PCT]


def ncu_profiles(item) -> list:
    """The ncu profiles a test of this file asks for first: the session starts them ahead, in the
    background (hwtests/conftest.py), and the test gets the same profile."""
    return [_hmma_profile_request()] if "hmma_profile" in item.fixturenames else []


@pytest.fixture(scope="module")
def hmma_profile(ncu):
    got = ncu(*_hmma_profile_request())
    return dict(zip((1, 2, 3), got))


def _given(name, value, unit, ilp, got):
    return Measurement.given(name, [value], unit=unit, kernel="hmma_16816",
                             launch={"ilp": ilp, "iters": specs.HMMA_NCU_ITERS, **got})


@pytest.mark.fact("hmma_16816_f32_tensor_pipe_cycles")
def test_hmma_tensor_pipe_cycles_per_instruction(gpuprops, hmma_profile, ncu):
    """Nsight Compute: tensor-pipe active cycles per HMMA.16816 (the seeds' RTX 4090 read 16).

    Hand-written, not a spec: read from ncu's counters over three profiled kernels, not timed between
    clock reads, so there is no timed region to declare."""
    def per_hmma(profile):
        return Measurement.given("cycles per HMMA", [g[NCU_ACTIVE] / g[NCU_INSTS] for g in profile],
                                 kernel="hmma_16816")

    def profile_again():
        return per_hmma(ncu([specs.hmma(ilp, 1, specs.HMMA_NCU_ITERS) for ilp in (1, 2, 3)], [NCU_ACTIVE, NCU_INSTS]))

    gpuprops.check("hmma_16816_f32_tensor_pipe_cycles", per_hmma(hmma_profile.values()), remeasure=profile_again,
                   method=f"ncu --clock-control none: {NCU_ACTIVE} / {NCU_INSTS}, ILP 1, 2 and 3, 4 warps, "
                          f"{specs.hmma_count(1, specs.HMMA_NCU_ITERS)} HMMA per chain")


@pytest.mark.fact("hmma_16816_f32_tensor_pipe_pct_ilp{ilp}")
@pytest.mark.parametrize("ilp", [1, 2, 3])
def test_hmma_tensor_pipe_utilisation(gpuprops, hmma_profile, ncu, ilp):
    """How busy the tensor pipe is with ILP dependent chains per warp: ILP x 6 of every 24 cycles.
    Hand-written, not a spec: an ncu counter, as the tensor-pipe cycles above."""
    got = hmma_profile[ilp]
    name = f"hmma_16816_f32_tensor_pipe_pct_ilp{ilp}"

    def profile_again():
        again = ncu([specs.hmma(ilp, 1, specs.HMMA_NCU_ITERS)], [NCU_ACTIVE, NCU_INSTS, NCU_PCT])[0]
        return _given(name, again[NCU_PCT], "%", ilp, again)

    gpuprops.check(name, _given(name, got[NCU_PCT], "%", ilp, got), remeasure=profile_again,
                   method=f"ncu --clock-control none: {NCU_PCT}, one warp per sub-partition, ILP {ilp} chains of "
                          f"{specs.hmma_count(1, specs.HMMA_NCU_ITERS)} HMMA")
