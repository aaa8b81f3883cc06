"""Shared memory and L1: LDS and STS latency, bandwidth per access width (the original sm_86 notes, shared memory), and the L1 hit bandwidth of global loads."""

import pytest
import specs

pytestmark = pytest.mark.gpu


@pytest.mark.fact("lds_latency_cycles")
@pytest.mark.parametrize("unroll", [50, 500])
def test_lds_latency(gpuprops, unroll, benchmark):
    m = gpuprops.measure("lds_latency_cycles", specs.lds_chase(unroll), divisor=unroll)
    gpuprops.check("lds_latency_cycles", m, benchmark=benchmark,
                   method="pointer chase, one warp, conflict-free, UNROLL dependent LDS between clock reads")


@pytest.mark.fact("sts_latency_cycles")
def test_sts_latency(gpuprops, benchmark):
    """The seeds' smem_latency_st: 50 STS, each waiting on the previous one's read scoreboard."""
    m = gpuprops.measure("sts_latency_cycles", specs.sts_chain(50), divisor=50)
    gpuprops.check("sts_latency_cycles", m, benchmark=benchmark,
                   method="50 STS chained by patched control codes (each waits on the previous STS's read "
                          "scoreboard), one warp")


@pytest.mark.fact("sts_then_lds_cycles")
def test_sts_then_dependent_lds(gpuprops):
    """The seeds' STS -> LDS variant: one STS, then an LDS of the same address that waits on the STS's
    read scoreboard; the stop read waits on the LDS. On sm_86 the seeds read 36 = 11 + 23 + 2."""
    m = gpuprops.measure("sts_then_lds_cycles", specs.sts_chain(1, then_lds=True), divisor=1)
    gpuprops.check("sts_then_lds_cycles", m,
                   method="STS; LDS of the same address waiting on the STS's read scoreboard; one warp, one pair")


@pytest.mark.fact("lds_single_cycles")
def test_single_lds(gpuprops):
    """The reference for the STS -> LDS pair: the same LDS alone in the region."""
    m = gpuprops.measure("lds_single_cycles", specs.sts_chain(0, then_lds=True), divisor=1)
    gpuprops.check("lds_single_cycles", m, method="one LDS alone between the clock reads, one warp")


@pytest.mark.fact(lambda load, width: f"smem_{'lds' if load else 'sts'}_{width}_bytes_per_cycle")
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


@pytest.mark.fact("l1_load_bytes_per_cycle")
def test_l1_load_bandwidth(gpuprops, benchmark):
    """The global-load path's bandwidth from L1 hits, beside the LDS one above: the same SM, the same
    16-byte vectors, the data in L1 instead of shared memory."""
    name = gpuprops.fact_name
    nbytes = specs.l1_bytes()
    m = gpuprops.measure(name, specs.l1_bandwidth(), divisor=1, mode="span", unit="B/clk",
                         transform=lambda cycles: nbytes / cycles)
    gpuprops.plot_point("smem_bandwidth", label="LDG.128 L1 hit", bytes_per_cycle=m.median)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one 1024-thread block on one SM, {specs.L1_BW_UNROLL * specs.L1_BW_ITERS} ld.global.ca.v4 "
                          f"(LDG.E.128.STRONG.SM) per thread, load u of thread t at 16 t + {specs.L1_BW_STRIDE} u "
                          f"bytes (odd trips the next {(16384 + (specs.L1_BW_UNROLL - 1) * specs.L1_BW_STRIDE) >> 10} "
                          "KiB), all L1 hits (one untimed trip over both halves first); each load's words folded "
                          "by two LOP3; bytes / (last stop - first start)")
