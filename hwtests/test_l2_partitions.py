"""The L2's partitions as one SM's chase sees them, three facts read from one sweep of the footprint
(hwtests/specs_l2_partitions.py ``FACTS`` declares them, with the launches, the method and how the
sweep is read):

* ``l2_near_hit_reach_pct``: how much of the L2 a chase fills at the near partition's latency;
* ``l2_hit_reach_pct``: how much of it it fills before it reads DRAM;
* ``l2_far_hit_chase_cycles``: cycles a hop between the two.

The sweep runs once a process for the three; a failing value is confirmed by fresh sweeps. The sweep
and its levels go to the JSON report (the measurement's ``launch``) and its plot points. The build is
checked without a GPU by test_static_cache_capacity.py."""

import fact_tests
import pytest
import specs_l2_partitions as l2p

pytestmark = pytest.mark.gpu


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.sweep_params(l2p.FACTS))
def test_l2_partition_fact(gpuprops, fact, benchmark):
    fact_tests.measure_sweep_and_check(gpuprops, fact, benchmark)
