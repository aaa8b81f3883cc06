"""Shared memory and L1: LDS and STS latency, bandwidth per access width (the original sm_86 notes, shared memory), and the L1 hit bandwidth of global loads.

The STS latency, the STS -> LDS pair, the single LDS and the bandwidths are specs of
specs_smem.FACTS (launch, region, statistic, divisor, plot point and method in one place), their
regions checked without a GPU, on every arch, by test_static_smem.py. The LDS chase and the L1 load
bandwidth are hand-written tests (their docstrings say why)."""

import fact_tests
import pytest
import specs
import specs_smem

pytestmark = pytest.mark.gpu


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(specs_smem.BENCHMARKED))
def test_fact(gpuprops, fact, benchmark):
    fact_tests.measure_and_check(gpuprops, fact, benchmark)


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(specs_smem.UNBENCHMARKED))
def test_fact_unbenchmarked(gpuprops, fact):
    """The STS -> LDS pair and its single LDS: their launches are not stored as benchmarks."""
    fact_tests.measure_and_check(gpuprops, fact)


@pytest.mark.fact("lds_latency_cycles")
@pytest.mark.parametrize("unroll", [50, 500])
def test_lds_latency(gpuprops, unroll, benchmark):
    """Hand-written, not a spec: one fact checked at two chain lengths (a spec is one launch per fact),
    so a per-hop latency that moved with the chain's length fails one of them."""
    m = gpuprops.measure("lds_latency_cycles", specs.lds_chase(unroll), divisor=unroll)
    gpuprops.check("lds_latency_cycles", m, benchmark=benchmark,
                   method="pointer chase, one warp, conflict-free, UNROLL dependent LDS between clock reads")


@pytest.mark.fact("l1_load_bytes_per_cycle")
def test_l1_load_bandwidth(gpuprops, benchmark):
    """The global-load path's bandwidth from L1 hits, beside the LDS one above: the same SM, the same
    16-byte vectors, the data in L1 instead of shared memory.

    Hand-written, not a spec: its region holds two LOP3 per load and one more per trip (the trip's
    half, it & 1), which a spec's unit x steps cannot count exactly (specs.l1_bandwidth's region does)."""
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
