"""FFMA: dependent latency and issue rate per SM sub-partition."""

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
    m = gpuprops.measure("ffma_smsp_cycles", specs.ffma(8, 4), divisor=specs.FFMA_UNROLL * 8 * 4, mode="span")
    gpuprops.check("ffma_smsp_cycles", m, benchmark=benchmark,
                   method="8 independent FFMA chains x 4 warps per SM sub-partition, one block; cycles per FFMA "
                          "per sub-partition over the block's span")
