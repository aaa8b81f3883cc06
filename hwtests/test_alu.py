"""FFMA: dependent latency and issue rate per SM sub-partition. Each fact is one spec of
specs_alu.FFMA_FACTS (its launch, region, statistic, divisor and method) and one test here; their
timed regions are checked without a GPU, on every arch, by test_static_alu.py. The issue rate takes
the median of at least 41 launches (launches differ by where the code is fetched)."""

import fact_tests
import pytest
import specs_alu

pytestmark = pytest.mark.gpu


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(specs_alu.FFMA_FACTS))
def test_fact(gpuprops, fact, benchmark):
    fact_tests.measure_and_check(gpuprops, fact, benchmark)
