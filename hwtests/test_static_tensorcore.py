"""Static checks of the HMMA facts measured by a launch each (hwtests/specs_tensorcore.FACTS), without a
GPU, on every arch of factspec.STATIC_ARCHES: every fact's build, as the GPU test launches it, is clean
at both ends and holds its spec's region (UNROLL x ILP HMMA.16816.F32 in the ITERS loop, only its
control and counter beside them, at most the epilogue's one-off opcodes after the last:
region_rules.FIXED_TRIP_LOOP). The issue spacing ptxas schedules is test_static.py's
(test_hmma_dependent_chain_issue_spacing, test_hmma_independent_min_issue_spacing); the issue
model's and the profiles' builds are checked through specs.launched() by test_static.py."""

import fact_tests as ft
import pytest
import specs_tensorcore

from pytest_gpuprops import sass

pytestmark = pytest.mark.static


@pytest.mark.parametrize("fact", ft.static_params(specs_tensorcore.FACTS))
def test_region_holds_what_the_fact_measures(fact):
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []
