"""Static checks of the ALU facts (hwtests/specs_alu.FACTS), without a GPU, on every arch of
factspec.STATIC_ARCHES: every fact's build, as the GPU test launches it, is clean at both ends and
holds its spec's region (the unit's exact counts, a latency chain in order, nothing beside them, a
latency build's second pass timed and a throughput build's one pass: pytest_gpuprops/factspec.py).
That each chain reads only the previous step's result is test_static_chains.py's and test_static.py's
(test_alu_chain_reads_only_the_previous_result, test_ffma_chain_reads_one_register)."""

import fact_tests as ft
import pytest
import specs_alu

from pytest_gpuprops import sass

pytestmark = pytest.mark.static


@pytest.mark.parametrize("fact", ft.static_params(specs_alu.FACTS))
def test_region_holds_what_the_fact_measures(fact):
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []
