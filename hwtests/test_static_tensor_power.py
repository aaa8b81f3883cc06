"""Static checks of the zero-operand tensor stress (hwtests/test_throughput_and_clocks.py), without a GPU: built
with ZERO_OPERANDS=1, kernels/stress_ffma.cu's stress_wgmma runs the same loop as with its pseudo-random
operands (the same HGMMA, the same control: only the data differs, so a power difference is the
data's), and it fills its shared-memory tiles with zeros (every STS stores RZ) where the random build
stores computed words."""

from pathlib import Path

import pytest

from pytest_gpuprops import sass, workloads
from pytest_gpuprops.compile import compile_cuda

pytestmark = pytest.mark.static
KERNELS = Path(__file__).parent.parent / "kernels"
ARCH = "sm_90a"


def _instructions(zero: bool) -> list:
    cubin = compile_cuda(KERNELS / "stress_ffma.cu", ARCH, workloads.wgmma_defines("bf16", zero_operands=zero)).cubin
    return sass.Cubin(cubin, ARCH, name=f"stress_ffma.cu zero={zero}").instructions("stress_wgmma")


def test_zero_operand_stress_runs_the_random_stress_loop():
    loops = {zero: workloads.opcode_counts(workloads.innermost_loop(_instructions(zero), "HGMMA")) for zero in (False, True)}
    assert loops[True] == loops[False]
    assert loops[True][workloads.WGMMA_DTYPES["bf16"][2]] == workloads.WGMMA_UNROLL


def test_zero_operand_stress_stores_only_zeros_to_its_tiles():
    stores = {zero: [i for i in _instructions(zero) if i.base_opcode == "STS"] for zero in (False, True)}
    assert stores[True] and all(i.operands[-1] == "RZ" for i in stores[True]), [i.text for i in stores[True]]
    assert stores[False] and not any(i.operands[-1] == "RZ" for i in stores[False]), [i.text for i in stores[False]]
