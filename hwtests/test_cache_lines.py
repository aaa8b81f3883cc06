"""sm_90's sectors and lines, each fact a sweep (hwtests/specs_lines.py ``FACTS`` declares them, with the
launches, the method and how each sweep is read):

* ``l1_sector_bytes``: the bytes one 8-byte ld.global.ca brings into L1 (a chase in pairs of loads in one
  line, the second's offset swept);
* ``l2_dram_fill_bytes``: the bytes one 8-byte ld.global.cg's DRAM miss brings into L2 (the same in L2);
* ``l1_line_bytes``: the L1's allocation unit (its capacity against the nodes' stride).

The sweep and what it was read from go to the JSON report (the measurement's ``launch``) and its plot
points. A failing value is confirmed by fresh sweeps, as every fact is. The builds are checked without a
GPU by test_static_cache_capacity.py."""

import fact_tests
import pytest
import specs_lines as sl

pytestmark = pytest.mark.gpu


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.sweep_params(sl.FACTS))
def test_sweep_fact(gpuprops, fact, benchmark):
    fact_tests.measure_sweep_and_check(gpuprops, fact, benchmark)
