"""Hopper's warpgroup MMA (kernels/wgmma.cu): latency and throughput of wgmma.mma_async m64nNk16,
f16 and bf16 inputs, f32 accumulate, N = 8 .. 256, A from shared memory (ss) or registers (rs).

wgmma exists only on sm_90a: the kernel is compiled for sm_90a (an sm_90a cubin runs on the sm_90
GPUs, H100 and H200) and the tests are skipped on other GPUs. Each fact is a spec of
specs_wgmma.FACTS (launch, region, statistic, divisor, method and the sm_90a build in one place), its
region checked without a GPU by test_static_wgmma.py."""

import fact_tests
import pytest
import specs_wgmma

pytestmark = [pytest.mark.gpu, pytest.mark.arch("sm_90")]


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(specs_wgmma.FACTS))
def test_fact(gpuprops, fact, benchmark):
    fact_tests.measure_and_check(gpuprops, fact, benchmark)
