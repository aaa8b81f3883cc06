"""Static checks of the f16 / bf16 wgmma facts (hwtests/specs_wgmma.FACTS), without a GPU, compiled for
sm_90a (their build_arch): every fact's build, as the GPU test launches it, is clean at both ends and
holds its spec's region (WARPGROUP.ARRIVE, UNROLL HGMMA, WARPGROUP.DEPBAR.LE, nothing else:
region_rules.WARPGROUP_CHAIN). That the HGMMAs are one accumulator chain, the last arming the group,
is test_static_chains.py's."""

import fact_tests as ft
import pytest
import specs_wgmma

from pytest_gpuprops import sass

pytestmark = pytest.mark.static


@pytest.mark.parametrize("fact", ft.static_params(specs_wgmma.FACTS))
def test_region_holds_what_the_fact_measures(fact):
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []
