"""FFMA: dependent latency and issue rate per SM sub-partition."""

import dataclasses

import pytest
import specs

pytestmark = pytest.mark.gpu


@pytest.mark.fact("ffma_latency_cycles")
def test_ffma_latency(gpuprops, benchmark):
    m = gpuprops.measure("ffma_latency_cycles", specs.ffma(1, 1), divisor=specs.FFMA_UNROLL)
    gpuprops.check("ffma_latency_cycles", m, benchmark=benchmark,
                   method="256 dependent FFMA Rx, Rx, Rx, Rx (one register read, no bank conflict), one warp")


@pytest.mark.fact("ffma_smsp_cycles")
def test_ffma_issue_per_smsp(gpuprops, benchmark):
    # each launch lands on an SM whose instruction cache may be cold for the 32 KiB region (1.008-1.039 per
    # launch on H100s): the median of 5 moved 1.7 % between processes of one unit, of 41 it is steady
    stop = dataclasses.replace(gpuprops.runner.stop, min_samples=specs.FFMA_RATE_LAUNCHES)
    m = gpuprops.measure("ffma_smsp_cycles", specs.ffma(8, 4), divisor=specs.FFMA_UNROLL * 8 * 4, mode="span",
                         stop=stop)
    gpuprops.check("ffma_smsp_cycles", m, benchmark=benchmark,
                   method="8 independent FFMA chains x 4 warps per SM sub-partition, one block; cycles per FFMA "
                          "per sub-partition over the block's span")
