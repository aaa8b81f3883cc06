"""The fleet rules on a mixed fleet: a fact is compared among its peers only (an arch fact among GPUs of
its arch, a memory-system fact among GPUs of the same model), a unit really off among its peers is
still flagged, too high or too low, and a moved fact is flagged in both directions."""

import pytest

from pytest_gpuprops import results, unit_compare
from pytest_gpuprops.assertions import PASS, Verdict

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


def on(gpu: str, name: str, value: float, *, scope="arch", arch="sm_90", tol=12.0,
       fact="dram_latency_cycles", node="hwtests/test_memory_hierarchy.py::test_chase_latency[dram]") -> Verdict:
    return Verdict(fact=fact, arch=arch, status=PASS, expected="-", measured=value, measured_text=f"{value}",
                   unit="cycles", method="m", source="s", nodeid=node, tolerance=tol, scope=scope,
                   gpu={"name": name, "uuid": f"GPU-{gpu}", "index": 0, "host": gpu})


def dram(gpu, name, value):
    """The DRAM latency verdict of one unit, with its model's tolerance (sm_90.toml)."""
    return on(gpu, name, value, scope="gpu", tol=12.376 if name == H100 else 22.0)


def lds(gpu, value, arch="sm_90"):
    return on(gpu, H100, value, arch=arch, tol=0.25, fact="lds_latency_cycles",
              node="hwtests/test_smem.py::test_lds_latency[50]")


def test_an_h100_report_merged_with_h200_reports_flags_nothing_that_differs_by_model():
    """HBM3 against HBM3e: 681 against 672 +- 22 is not an outlier; the H100 is compared with H100s."""
    fleet = [dram("a", H100, 681.0), dram("b", H200, 662.0), dram("c", H200, 664.9), dram("d", H200, 685.3)]
    out, note = results.outliers(fleet)
    assert out == []
    assert note == ("outlier check: 4 GPUs, 2 facts compared, 0 outlier(s); compared within "
                    f"{H100} (sm_90, GPU facts): 1 GPU(s), nothing to compare, {H200} (sm_90, GPU facts): 3 GPU(s)")


@pytest.mark.parametrize("off", [+40.0, -40.0], ids=["too high", "too low"])
def test_a_unit_off_among_gpus_of_its_model_is_flagged_in_a_mixed_fleet(off):
    # 40 cycles of 681 is over 5 %: red, whatever the band (30 would be the population's spread)
    fleet = [dram("a", H100, 681.0), dram("b", H100, 681.0), dram("c", H100, 681.0 + off),
             dram("d", H200, 662.0), dram("e", H200, 664.9)]
    out, _ = results.outliers(fleet)
    assert [(o.gpu["uuid"], o.status) for o in out] == [("GPU-c", "OUTLIER")]
    assert out[0].expected == "peer median 681.000 ± 12.4 cycles"


def test_arch_facts_are_compared_across_models_of_one_arch_and_never_across_archs():
    """LDS latency is the SM's: an H100 and an H200 are peers; an sm_86 card is not."""
    fleet = [lds("a", 23.0), lds("b", 23.0), lds("c", 23.6), lds("d", 22.96, arch="sm_86")]
    out, note = results.outliers(fleet)
    assert [o.gpu["uuid"] for o in out] == ["GPU-c"]
    assert "compared within sm_86 (arch facts): 1 GPU(s), nothing to compare, sm_90 (arch facts): 3 GPU(s)" in note


def test_a_fleet_of_one_group_keeps_the_short_note():
    out, note = results.outliers([lds("a", 23.0), lds("b", 23.1)])
    assert out == [] and note == "outlier check: 2 GPUs, 1 facts compared, 0 outlier(s)"


@pytest.mark.parametrize("moved", [+13.0, -13.0], ids=["up", "down"])
def test_a_fact_that_moved_since_the_baseline_on_the_same_unit_is_flagged_either_way(moved):
    base = [dram("a", H100, 681.0)]
    assert unit_compare.compare(base, [dram("a", H100, 681.0 + moved * 0.9)]) == []  # within 12: not moved
    got = unit_compare.compare(base, [dram("a", H100, 681.0 + moved)])
    assert [m.status for m in got] == ["MOVED"] and f"(moved {moved:+.3f}, " in got[0].measured_text


def test_the_scope_travels_with_the_verdict_through_a_report():
    v = dram("a", H100, 681.0)
    again = Verdict.from_dict(v.as_dict())
    assert again.scope == "gpu" and results.peer_group(again) == f"{H100} (sm_90, GPU facts)"


STATIC_AND_GPU = {
    "test_static_schedule": '''
import pytest

@pytest.mark.static
def test_schedule_fact():
    pass
''',
    "test_facts": '''
import pytest
from pytest_gpuprops.measure import Measurement

@pytest.mark.gpu
def test_lds(gpuprops):
    m = Measurement.given("lds", [23.0])
    m.remeasure = lambda: Measurement.given("lds", [23.0])
    gpuprops.check("lds_latency_cycles", m, method="given")
''',
}


def test_every_gpu_of_a_node_in_parallel_checks_each_compile_time_fact_once(pytester, monkeypatch):
    """`-n 2 --gpuprops-gpus all`: the GPU facts run on each GPU's worker, a static fact on one only,
    and the run's count of selected tests agrees (the report is complete)."""
    pytest.importorskip("xdist")
    import json

    from gp_testing import child_processes_outside_mutmut, fake_gpu_conftest
    child_processes_outside_mutmut(monkeypatch)
    pytester.makeconftest(fake_gpu_conftest("sm_90", count=2))
    pytester.makefile(".toml", facts='arch = "sm_90"\n[lds_latency_cycles]\nvalue = 23.0\ntolerance_abs = 0.1\n'
                                     'unit = "cycles"\nmethod = "given"\nsource = "given"\n')
    pytester.makepyfile(**STATIC_AND_GPU)
    r = pytester.runpytest_subprocess("-n", "2", "--gpuprops-gpus", "all", "--gpuprops-facts", "facts.toml",
                                      "--gpuprops-report", "r.json", "-p", "no:randomly")
    r.assert_outcomes(passed=3)  # the GPU fact on each of two GPUs, the static one once
    run = json.loads((pytester.path / "r.json").read_text())["meta"]["run"]
    assert (run["selected"], run["finished"], run["complete"]) == (3, 3, True)


def test_compile_time_facts_live_in_test_static_files_and_only_there():
    """The convention the parallel scheduler relies on (session.compile_only)."""
    import ast
    from pathlib import Path

    from pytest_gpuprops.session import compile_only
    for path in sorted((Path(__file__).parent.parent / "hwtests").glob("test_*.py")):
        text = path.read_text()
        marks = {n.attr for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Attribute) and n.attr in ("static", "gpu")
                 and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"}
        assert compile_only(f"hwtests/{path.name}::test_x") == ("static" in marks), (path.name, marks)
        assert not ("static" in marks and "gpu" in marks), f"{path.name} mixes static and GPU facts"
