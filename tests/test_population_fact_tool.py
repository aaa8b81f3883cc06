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
    # the cluster barriers as the facts' sources list their units (the H100 node GPU-2a7dd7fd + GPU-8d6eb771, a CTA
    # on every SM, 2026-11-26)
    for fact, values in {"cluster_barrier_cluster8_cycles": [67.188, 67.188],
                         "cluster_barrier_cluster4_cycles": [63.375, 63.438, 63.5, 63.562]}.items():
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


# ----------------------------------------------------------------------------------------------
# from a device run's reports to the facts entry

FACTS = """arch = "sm_90"

[gpus."NVIDIA H200".tma_2d_4k_latency_cycles]
value = 359.125
tolerance_abs = 8.11
units_range = [358.25, 360.0]
unit = "cycles"
method = "TMA 2D load"
source = "measured on NVIDIA H200, driver 580.159.04, CUDA 13.0, 2026-11-25: GPU-2cf08462 (358.25-360.0)"

[gpus."NVIDIA H200".dram_read_gbps]
value = 4548.85
tolerance_rel = 0.03
unit = "GB/s"
method = "stream"
source = "measured on NVIDIA H200, driver 580.159.04, CUDA 13.0, 2026-11-25: two units"
"""


def _reading(fact, measured, uuid, status="PASS", flags=(), noise=0.004, name="NVIDIA H200"):
    return {"fact": fact, "measured": measured, "status": status, "flags": list(flags),
            "measurement": {"noise": noise}, "gpu": {"name": name, "uuid": uuid, "index": 0}}


def _reports(tmp_path):
    import json
    paths = []
    for i, readings in enumerate([
        [_reading("tma_2d_4k_latency_cycles", 370.5, "GPU-cf880720-416f", noise=0.0059),
         _reading("dram_read_gbps", 4504.7, "GPU-cf880720-416f", noise=0.0022)],
        [_reading("tma_2d_4k_latency_cycles", 367.75, "GPU-cf880720-416f"),
         _reading("tma_2d_4k_latency_cycles", 500.0, "GPU-cf880720-416f", status="NOISY"),
         _reading("tma_2d_4k_latency_cycles", 380.0, "GPU-41172d06-69b3", name="NVIDIA H100 80GB HBM3"),
         _reading("dram_read_gbps", 4100.0, "GPU-b8adcc21-ccda", flags=["throttled: sw_thermal_slowdown"])],
    ]):
        path = tmp_path / f"run{i}.json"
        # as --gpuprops-report writes them: a verdict names its GPU, the meta holds the driver and CUDA
        meta = {"gpu": {"index": 0, "name": "NVIDIA H200", "driver_version": "580.159.04", "cuda_driver_version": "13.0"}}
        path.write_text(json.dumps({"meta": meta, "facts": readings}))
        paths.append(str(path))
    return paths


def test_reports_give_each_units_usable_readings_and_the_largest_noise(tmp_path):
    paths = _reports(tmp_path)
    units, noise = pf.units_from_reports(paths, "tma_2d_4k_latency_cycles", "NVIDIA H200")
    assert units == {"GPU-cf880720": [370.5, 367.75]}  # the NOISY reading and the H100's left out
    assert noise == 0.0059
    units, _ = pf.units_from_reports(paths, "dram_read_gbps")
    assert units == {"GPU-cf880720": [4504.7]}  # the thermally slowed reading left out
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable report JSON"):
        pf.units_from_reports([str(tmp_path / "bad.json")], "dram_read_gbps")


def test_write_joins_the_earlier_units_and_the_reports_and_reads_back(tmp_path, capsys):
    facts_path = tmp_path / "sm_90.toml"
    facts_path.write_text(FACTS)
    rc = pf.main(["--facts", str(facts_path), "--gpu", "NVIDIA H200", "--fact", "tma_2d_4k_latency_cycles",
                  "--reports", *_reports(tmp_path), "--write"])
    assert rc == 0 and "units 358.25 .. 370.5 written" in capsys.readouterr().out
    from pytest_gpuprops import facts as F
    f = F.load_facts("sm_90", facts_path).gpu_sections["NVIDIA H200"]["tma_2d_4k_latency_cycles"]
    # 358.25-370.5: middle 364.375; the entry's own margin (8.11 - 0.875 cycles at 359.125: 1.007 % of
    # run noise) is larger than the reports' 0.59 %: 6.125 + 2 x 1.007 % x 364.375 = 13.47
    assert (f.value, f.tolerance_abs, f.units_range) == (364.375, 13.47, (358.25, 370.5))
    assert f.source.endswith("and the 0.5-cycle floor") and "GPU-cf880720 (370.5, 367.75)" in f.source
    assert "(NVIDIA H200, driver 580.159.04, CUDA 13.0) with GPU-cf880720" in f.source
    # a time-unit fact: relative, 3 % floor; an entry without units_range starts from the reports alone
    rc = pf.main(["--facts", str(facts_path), "--gpu", "NVIDIA H200", "--fact", "dram_read_gbps",
                  "--unit", "GPU-2cf08462=4486.2,4497.0", "--reports", *_reports(tmp_path), "--write"])
    d = F.load_facts("sm_90", facts_path).gpu_sections["NVIDIA H200"]["dram_read_gbps"]
    assert rc == 0 and d.tolerance_rel == 0.03 and d.units_range == (4486.2, 4504.7)
    assert d.value == pytest.approx((4486.2 + 4504.7) / 2)


def test_a_recomputation_keeps_the_noise_the_entry_was_made_with():
    """New units' reports may be quieter than the runs that set an entry's margin: --write reads that
    margin's noise back from the entry and never takes less (it once narrowed 12.52 cycles to 6.41)."""
    noisy = {"value": 285.75, "tolerance_abs": 12.52, "units_range": [281.75, 289.75], "unit": "cycles"}
    assert pf.earlier_noise(noisy, False) == pytest.approx((12.52 - 4.0) / (2 * 285.75))
    p = pf.population({"earlier units": [281.75, 289.75], "new": [290.0]}, pf.earlier_noise(noisy, False))
    assert p.tolerance >= 12.52 + (290.0 - 289.75) / 2 - 0.01
    # a margin the floor set, and a time-unit tolerance at its 3 % floor, say nothing of the noise
    assert pf.earlier_noise({"tolerance_abs": 1.0, "units_range": [63.0, 64.0]}, False) == 0.0
    assert pf.earlier_noise({"tolerance_rel": 0.03, "units_range": [850.0, 870.0]}, True) == 0.0
    assert pf.earlier_noise({"tolerance_rel": 0.0345, "units_range": [1600.0, 1700.0]}, True) == \
        pytest.approx((0.0345 - 50 / 1650) / 2)


def test_write_leaves_the_file_as_it_was_when_the_entry_is_missing_or_the_input_is_wrong(tmp_path, capsys):
    facts_path = tmp_path / "sm_90.toml"
    facts_path.write_text(FACTS)
    assert pf.main(["--facts", str(facts_path), "--fact", "no_such_fact", "--unit", "a=1", "--noise", "0",
                    "--write"]) == 2
    assert "has no fact 'no_such_fact' in the arch's facts" in capsys.readouterr().err
    assert facts_path.read_text() == FACTS
    with pytest.raises(SystemExit):
        pf.main(["--unit", "a=1", "--noise", "0", "--write"])
    assert "--write needs --facts FILE and --fact NAME" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pf.main(["--reports", *_reports(tmp_path)])
    assert "--reports needs --fact NAME" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pf.main(["--fact", "dram_read_gbps", "--gpu", "NVIDIA B200", "--reports", *_reports(tmp_path)])
    assert "no usable reading of 'dram_read_gbps' in the reports of a NVIDIA B200" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pf.main(["--unit", "a=1"])
    assert "give --noise" in capsys.readouterr().err


def test_a_file_that_does_not_load_after_the_rewrite_is_restored(tmp_path, capsys):
    broken = FACTS + '\n[lds_latency_cycles]\nvalue = 23.0\ntolerance_abs = -1\nunit = "cycles"\nmethod = "m"\nsource = "s"\n'
    facts_path = tmp_path / "sm_90.toml"
    facts_path.write_text(broken)
    rc = pf.main(["--facts", str(facts_path), "--gpu", "NVIDIA H200", "--fact", "tma_2d_4k_latency_cycles",
                  "--unit", "GPU-x=365", "--noise", "0.5%", "--write"])
    assert rc == 2 and "tolerance_abs = -1: expected a finite number >= 0" in capsys.readouterr().err
    assert facts_path.read_text() == broken


def test_power_and_host_microseconds_take_the_relative_rule(tmp_path, capsys):
    """A power (W) or a host-side time (us) scales with what the unit draws or the host it sits in, not a
    cycle grid: the 0.5-cycle floor once put 0.51 us on a 0.69 us launch fact (2026-11-26)."""
    assert {"W", "us"} <= set(pf.RELATIVE_UNITS) and "cycles" not in pf.RELATIVE_UNITS
    facts_path = tmp_path / "sm_90.toml"
    facts_path.write_text('arch = "sm_90"\n\n[gpus."NVIDIA H200".launch_graph_node_us]\nvalue = 0.693\n'
                          'tolerance_rel = 0.03\nunit = "us"\nmethod = "m"\nsource = "measured on NVIDIA H200, '
                          'driver 580.159.04, CUDA 13.0, 2026-11-26"\n\n[gpus."NVIDIA H200".wgmma_bf16_zero_operand_'
                          'power_w]\nvalue = 284.0\ntolerance_rel = 0.03\nunit = "W"\nmethod = "m"\nsource = '
                          '"measured on NVIDIA H200, driver 580.159.04, CUDA 13.0, 2026-11-26"\n')
    for fact, units in (("launch_graph_node_us", "GPU-4c46d758=0.6935,0.694,0.69325"),
                        ("wgmma_bf16_zero_operand_power_w", "GPU-4c46d758=283.494,285.214")):
        assert pf.main(["--facts", str(facts_path), "--gpu", "NVIDIA H200", "--fact", fact, "--unit", units,
                        "--noise", "0.2%", "--write"]) == 0
    from pytest_gpuprops import facts as F
    section = F.load_facts("sm_90", facts_path).gpu_sections["NVIDIA H200"]
    launch, power = section["launch_graph_node_us"], section["wgmma_bf16_zero_operand_power_w"]
    assert (launch.tolerance_rel, launch.tolerance_abs) == (0.03, 0.0) and launch.value == pytest.approx(0.693625)
    assert power.tolerance_rel == 0.03 and power.value == pytest.approx(284.354)
