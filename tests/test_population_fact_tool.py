"""tools/population_fact.py: the rule a fact that differs by unit takes its value and tolerance from,
and the check that a facts entry covers every unit measured with room to spare."""

import pytest
from gp_testing import KERNELS, load_tool

pf = load_tool("population_fact")
PACKAGED = KERNELS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml"


def test_an_edge_unit_of_a_steady_fact_gets_the_floor_beyond_the_range():
    # the cluster-8 barrier: 66.9375 on one unit, 70.9375 on another, no run noise at all
    p = pf.population({"GPU-24f5286e": [66.9375, 66.9375], "GPU-2cf08462": [70.9375]}, 0.0)
    assert (p.value, p.tolerance, p.relative) == (68.9375, 2.5, False)
    lo, hi = p.band()
    assert (lo, hi) == (66.4375, 71.4375)


def test_cycles_take_twice_the_noise_when_it_exceeds_the_floor_rounded_up():
    p = pf.population({"a": [329.0, 331.25], "b": [344.5]}, 0.0056)
    assert p.value == 336.75
    # 7.75 + 2 x 0.56 % x 336.75 = 11.5216 -> 11.53, never rounded down into the units' range
    assert p.tolerance == 11.53
    assert p.margin == pytest.approx(3.78)


def test_time_units_are_relative_with_a_three_percent_floor():
    assert pf.population({"a": [1980.07, 1980.1]}, 0.0, time_unit=True).tolerance == 0.03
    wide = pf.population({"a": [7400.1, 7151.6], "b": [6848.1]}, 0.002, time_unit=True)
    assert wide.relative and wide.value == pytest.approx(7124.1)
    assert wide.tolerance == pytest.approx(276.0 / 7124.1 + 0.004, abs=1e-4)
    assert wide.tolerance >= 276.0 / 7124.1 + 0.004


def test_an_entry_rounded_into_its_own_range_is_caught():
    units = {"GPU-24f5286e": [66.9375], "GPU-2cf08462": [70.9375]}
    old = {"value": 68.938, "tolerance_abs": 2.0}
    problems = pf.entry_covers(old, units)
    assert len(problems) == 2
    assert "66.9375: outside the band 68.938 +- 2" in problems[0]
    assert "only 0.0005 inside (less than 0.5)" in problems[1]
    assert pf.entry_covers({"value": 68.9375, "tolerance_abs": 2.5}, units) == []
    assert pf.entry_covers({"value": 7124.1, "tolerance_rel": 0.0428}, {"a": [6848.1, 7400.1]}) == []
    assert pf.entry_covers({"value": 7124.1, "tolerance_rel": 0.03}, {"a": [6848.1]}) != []


def test_every_packaged_population_fact_covers_its_units_with_room():
    """Each fact with a units_range: every unit measured so far lies inside its band by at least the
    0.5-cycle floor (the packaged file loads only if they lie inside at all)."""
    from pytest_gpuprops import facts as F
    loaded = F.load_facts("sm_90", PACKAGED)
    population = [f for f in loaded.values() if f.units_range]
    population += [f for sec in loaded.gpu_sections.values() for f in sec.values() if f.units_range]
    assert len(population) >= 20
    for f in population:
        entry = {"value": f.value, "tolerance_abs": f.tolerance_abs} if f.tolerance_abs else \
                {"value": f.value, "tolerance_rel": f.tolerance_rel}
        lo, hi = f.units_range
        assert pf.entry_covers(entry, {"lowest": [lo], "highest": [hi]}) == [], (f.gpu, f.name)
    # the cluster barriers as the facts' sources list their units (H100 and H200, 2026-11-25)
    for fact, values in {"cluster_barrier_cluster8_cycles": [66.9375, 68.9375, 70.9375],
                         "cluster_barrier_cluster4_cycles": [63.21875, 65.09375, 65.15625, 65.21875]}.items():
        assert pf.main(["--facts", str(PACKAGED), "--fact", fact, "--noise", "0",
                        *[f"--unit=u{i}={v}" for i, v in enumerate(values)]]) == 0, fact


def test_cli_prints_the_entry_and_refuses_bad_input(capsys):
    assert pf.main(["--unit", "A=66.9375", "--unit", "B=70.9375", "--noise", "0%"]) == 0
    out = capsys.readouterr().out
    assert "value = 68.9375\ntolerance_abs = 2.5" in out
    assert pf.main(["--unit", "a=63.21875", "--unit", "b=65.21875", "--noise", "0.1%"]) == 0
    assert "value = 64.21875\n" in capsys.readouterr().out  # printed whole, never rounded
    assert "A (66.9375); B (70.9375)" in out and "0.5-cycle floor" in out
    with pytest.raises(SystemExit):
        pf.main(["--unit", "A", "--noise", "0"])
    assert "expected LABEL=v1,v2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pf.main(["--unit", "A=1", "--noise", "lots"])
    assert "expected a relative noise" in capsys.readouterr().err
    assert pf.main(["--unit", "A=1", "--noise", "0", "--facts", str(PACKAGED), "--fact", "no_such_fact"]) == 2
    assert "has no fact 'no_such_fact'" in capsys.readouterr().err
    assert pf.main(["--unit", "A=1", "--noise", "60%"]) == 2
    assert "is not a relative noise" in capsys.readouterr().err
