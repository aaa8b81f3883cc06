"""Shared memory: LDS and STS latency, bandwidth per access width (seeds/smem_bandwidth_latency.md)."""

import pytest
import specs

from pytest_gpuprops.measure import Measurement

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("unroll", [50, 500])
def test_lds_latency(gpuprops, unroll, benchmark):
    m = gpuprops.measure("lds_latency_cycles", specs.lds_chase(unroll), divisor=unroll)
    gpuprops.check("lds_latency_cycles", m, benchmark=benchmark,
                   method="pointer chase, one warp, conflict-free, UNROLL dependent LDS between clock reads")


def test_sts_latency(gpuprops, benchmark):
    """The seeds' smem_latency_st: 50 STS, each waiting on the previous one's read scoreboard."""
    m = gpuprops.measure("sts_latency_cycles", specs.sts_chain(50), divisor=50)
    gpuprops.check("sts_latency_cycles", m, benchmark=benchmark,
                   method="50 STS chained by patched control codes (each waits on the previous STS's read "
                          "scoreboard), one warp")


def test_sts_adds_its_latency_before_a_dependent_lds(gpuprops):
    """The seeds' STS -> LDS variant: (STS; LDS waiting on it) minus (LDS alone) isolates the STS."""
    both = gpuprops.measure("sts_then_lds", specs.sts_chain(1, then_lds=True), divisor=1)
    alone = gpuprops.measure("lds_alone", specs.sts_chain(0, then_lds=True), divisor=1)
    diff = Measurement.given("sts_before_lds_cycles", [a - b for a, b in zip(both.values, alone.values)],
                             noise_target=both.noise_target, sm_clock_mhz=both.sm_clock_mhz,
                             throttle=both.throttle + alone.throttle, kernel="smem_latency_st")
    gpuprops.check("sts_before_lds_cycles", diff,
                   method="(STS; LDS waiting on the STS's read scoreboard) minus (LDS alone), one warp")


@pytest.mark.parametrize("load", [False, True], ids=["sts", "lds"])
@pytest.mark.parametrize("vec, width", [(1, "float"), (2, "float2"), (4, "float4")])
def test_smem_bandwidth(gpuprops, load, vec, width, benchmark):
    op = "lds" if load else "sts"
    name = f"smem_{op}_{width}_bytes_per_cycle"
    nbytes = specs.smem_bytes(vec)
    m = gpuprops.measure(name, specs.smem_bandwidth(vec, load), divisor=1, mode="span", unit="B/clk",
                         transform=lambda cycles: nbytes / cycles)
    gpuprops.plot_point("smem_bandwidth", label=f"{op.upper()} {width}", bytes_per_cycle=m.median)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one 1024-thread block on one SM, 2048 conflict-free {op.upper()} of {width} per "
                          "thread; bytes / (last stop - first start)")
