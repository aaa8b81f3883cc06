"""Hopper's warpgroup MMA (kernels/wgmma.cu): latency and throughput of wgmma.mma_async m64nNk16,
f16 and bf16 inputs, f32 accumulate, N = 8 .. 256, A from shared memory (ss) or registers (rs).

wgmma exists only on sm_90a: the kernel is compiled for sm_90a (an sm_90a cubin runs on the sm_90
GPUs, H100 and H200) and the tests are skipped on other GPUs."""

from pathlib import Path

import pytest
import specs

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.timing import build_for_timing

pytestmark = [pytest.mark.gpu, pytest.mark.arch("sm_90")]
KERNELS = Path(__file__).parent.parent / "kernels"
U = specs.WGMMA_UNROLL
THROUGHPUT_WARPGROUPS = 2
CASES = [(n, bf16, a_regs) for n in specs.WGMMA_N for bf16 in (False, True) for a_regs in (False, True)]


def case_id(n, bf16, a_regs) -> str:
    return f"m64n{n}k16_{'bf16' if bf16 else 'f16'}_{'rs' if a_regs else 'ss'}"


#: where the session prefetch (hwtests/conftest.py) compiles what :func:`_specs_of` names
BUILD_ARCH = specs.WGMMA_ARCH


def _specs_of(item) -> list:
    """The builds one test of this file launches (for the session prefetch)."""
    name, params = item.originalname, getattr(getattr(item, "callspec", None), "params", {})
    if name == "test_wgmma_latency":
        return [specs.wgmma(params["n"], params["bf16"], params["a_regs"], unroll=1)]
    if name == "test_wgmma_cycles_per_sm":
        return [specs.wgmma(params["n"], params["bf16"], params["a_regs"], unroll=U, warpgroups=THROUGHPUT_WARPGROUPS)]
    return []


def built(runner, spec):
    """``spec`` compiled for sm_90a and patched for timing (the runner compiles for the GPU's sm_90)."""
    compiled = compile_cuda(KERNELS / spec.source, specs.WGMMA_ARCH, spec.defines, cache_dir=runner.cache_dir)
    return build_for_timing(sass.Cubin(compiled.cubin, specs.WGMMA_ARCH, name=f"{spec.source} {spec.defines}"), spec)


@pytest.mark.fact(lambda n, bf16, a_regs: f"wgmma_{case_id(n, bf16, a_regs)}_latency_cycles")
@pytest.mark.parametrize("n, bf16, a_regs", CASES, ids=[case_id(*c) for c in CASES])
def test_wgmma_latency(gpuprops, n, bf16, a_regs, benchmark):
    name = gpuprops.fact_name
    spec = specs.wgmma(n, bf16, a_regs, unroll=1)
    m = gpuprops.measure(name, spec, divisor=1, built=built(gpuprops.runner, spec))
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one {specs.wgmma_opcode(n, bf16)} between wgmma.fence and commit_group + wait_group 0, "
                          "one warpgroup; cycles from WARPGROUP.ARRIVE to the result, per warp")


@pytest.mark.fact(lambda n, bf16, a_regs: f"wgmma_{case_id(n, bf16, a_regs)}_sm_cycles")
@pytest.mark.parametrize("n, bf16, a_regs", CASES, ids=[case_id(*c) for c in CASES])
def test_wgmma_cycles_per_sm(gpuprops, n, bf16, a_regs, benchmark):
    name = gpuprops.fact_name
    spec = specs.wgmma(n, bf16, a_regs, unroll=U, warpgroups=THROUGHPUT_WARPGROUPS)
    m = gpuprops.measure(name, spec, divisor=U * THROUGHPUT_WARPGROUPS, mode="span", built=built(gpuprops.runner, spec))
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{U} {specs.wgmma_opcode(n, bf16)} on one accumulator chain per warpgroup, "
                          f"{THROUGHPUT_WARPGROUPS} warpgroups in one block; cycles per instruction per SM over the "
                          "block's span")
