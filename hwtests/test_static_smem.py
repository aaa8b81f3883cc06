"""Static checks of the shared-memory facts (hwtests/specs_smem.FACTS), without a GPU, on every arch
of factspec.STATIC_ARCHES: every fact's build, as the GPU test launches it, is clean at both ends and
holds its spec's region (the STS chain and the STS -> LDS pair alone in the region; the bandwidth and
wavefront loops' exact access counts, in a counted loop with only its guard, control and register
set-up beside them: region_rules.GUARDED_LOOP). That the conflict loads read one address register
is test_static_chains.py's; the LDS chase and the L1 load loop are checked through specs.launched()
by test_static.py."""

import fact_tests as ft
import pytest
import specs_smem

from pytest_gpuprops import sass

pytestmark = pytest.mark.static


@pytest.mark.parametrize("fact", ft.static_params(specs_smem.FACTS))
def test_region_holds_what_the_fact_measures(fact):
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []
