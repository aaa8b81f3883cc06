"""The session-results layer (results.py) against hand-written inputs: GPU labels and keys as
the report prints them, the fleet rules (outliers at the tolerance's edge, which verdicts they
compare, the MOVED rule at its edge), how a test's part is merged, and every message of a report
that cannot be read, in full."""

import dataclasses
import json

import pytest

from pytest_gpuprops import results, unit_compare
from pytest_gpuprops.assertions import Verdict
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.results import ResultsError, SessionResults

H100 = {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1a9fac0f-f808-7eb0-cc29-832414aa9498", "host": "n7"}


def verdict(measured, gpu=H100, fact="lds_latency_cycles", nodeid="hwtests/test_smem.py::test_lds_latency[50]"):
    return Verdict(fact, "sm_90", "PASS", "23 ± 0.25 cycles", measured, f"{measured} cycles", "cycles", "m", "s",
                   nodeid=nodeid, gpu=gpu, tolerance=0.25, attempts=[{"measured_text": "x", "status": "FAIL"}],
                   flags=["planted"])


@pytest.mark.parametrize("gpu, label", [
    (H100, "n7:gpu1 NVIDIA H100 80GB HBM3 (GPU-1a9fac0f)"),
    ({"index": 0, "name": "NVIDIA H200"}, "gpu0 NVIDIA H200"),
    ({"host": "", "uuid": "", "index": 3, "name": "X"}, "gpu3 X"),
    ({}, "gpu? ?"),
    (None, "gpu? ?"),
])
def test_gpu_label(gpu, label):
    assert results.gpu_label(verdict(23.0, gpu=gpu)) == label


@pytest.mark.parametrize("gpu, key", [(H100, H100["uuid"]), ({"index": 2, "host": "n7"}, "n7/gpu2"),
                                      ({"uuid": ""}, "?/gpu?"), (None, "?/gpu?")])
def test_gpu_key(gpu, key):
    assert results.gpu_key(verdict(23.0, gpu=gpu)) == key


def test_moved_is_more_than_the_tolerance_not_equal_to_it():
    base = [verdict(23.0), verdict(10.0, fact="other", nodeid="hwtests/t.py::test_other")]
    assert unit_compare.compare(base, [verdict(23.25)]) == []  # exactly the tolerance: not moved
    # a fact without a baseline first does not stop the comparison of the next one
    moved = unit_compare.compare(base[:1], [verdict(5.0, fact="new", nodeid="hwtests/t.py::test_new"), verdict(23.5)])
    (m,) = moved
    assert (m.status, m.kind, m.attempts, m.flags) == ("MOVED", "baseline", [], [])
    assert m.expected == "baseline 23.000 ± 0.25 cycles (the fact's tolerance: no same-unit band recorded)"
    assert m.measured_text == ("23.500 cycles on n7:gpu1 NVIDIA H100 80GB HBM3 (GPU-1a9fac0f) (moved +0.500, "
                               "+2.17%)")


def test_a_same_unit_band_is_a_fraction_of_the_units_own_baseline_reading():
    tight = [dataclasses.replace(verdict(x), same_unit_tolerance_rel=0.005) for x in (23.0, 23.11, 23.13)]
    assert unit_compare.compare(tight[:1], [tight[1]]) == []  # 0.11 <= 0.5 % of 23.0 (0.115)
    (m,) = unit_compare.compare(tight[:1], [tight[2]])  # 0.13 > 0.115, though well inside the SKU's 0.25
    assert m.expected == "baseline 23.000 ± 0.115 cycles (same-unit band 0.50%)"
    # a reading that was not settled is no baseline, and is not compared with one
    for status in ("NOISY", "THROTTLED", "UNSTABLE"):
        assert unit_compare.compare([dataclasses.replace(tight[0], status=status)], [tight[2]]) == []
        assert unit_compare.compare(tight[:1], [dataclasses.replace(tight[2], status=status)]) == []


def test_a_missing_report(tmp_path):
    with pytest.raises(ResultsError) as e:
        results.load(tmp_path / "none.json")
    assert str(e.value) == f"cannot read report {tmp_path / 'none.json'}: No such file or directory"


def test_a_report_that_is_not_json(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("{oops")
    with pytest.raises(ResultsError) as e:
        results.load(p)
    assert str(e.value) == (f"{p} is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
                            "(char 1)); pass a report written by --gpuprops-report")


def test_json_that_is_not_a_report_names_the_file(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"meta": {}}))
    with pytest.raises(ResultsError) as e:
        results.load(p)
    assert str(e.value) == (f"{p} is not a gpuprops report: expected a JSON object with a 'facts' list "
                            "(written by pytest --gpuprops-report)")
    p.write_text(json.dumps({"facts": {}}))
    with pytest.raises(ResultsError) as e:
        results.load(p)
    assert str(e.value).startswith(f"{p}: facts is an object; expected a list of verdicts")


def test_a_malformed_verdict_names_the_file(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"facts": [{"fact": "x"}]}))
    with pytest.raises(ResultsError) as e:
        results.load(p)
    assert str(e.value).startswith(f"{p}: facts[0] (fact x) lacks 'arch', 'status', 'expected', 'measured', "
                                   "'measured_text', 'unit', 'method', 'source'; a verdict has fact, arch, ")


def test_a_report_without_meta_reads_with_empty_meta(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"facts": []}))
    res, meta = results.load(p)
    assert meta == {} and res.verdicts == []


# H100 (above) is n7:gpu1 with a UUID; two more GPUs of the same node and of another
OTHER = {"index": 2, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5c3d0e11-aaaa-bbbb-cccc-ddddeeeeffff", "host": "n7"}
THIRD = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "host": "n8"}
NODE = "hwtests/test_smem.py::test_lds_latency[50]"  # verdict()'s default node id
TWO_GPUS_FLAG = "with two GPUs, both are flagged: a third tells which one is off"


def _outlier(measured, gpu, expected, measured_text, flags, status="OUTLIER"):
    """An OUTLIER as the fleet rule should make it from verdict(measured, gpu): written out in full."""
    return Verdict("lds_latency_cycles", "sm_90", status, expected, measured, measured_text, "cycles", "m", "s",
                   kind="fleet", flags=flags, nodeid=NODE, gpu=gpu, tolerance=0.25, attempts=[])


# -- outliers --------------------------------------------------------------------------------

UNITS_DIFFER_FLAG = "inside the SKU's band, under 5% apart: the units' own spread"


def test_two_gpus_exactly_the_tolerance_apart_are_not_outliers():
    out, note = results.outliers([verdict(23.0), verdict(23.25, gpu=OTHER)])
    assert out == [] and note == "outlier check: 2 GPUs, 1 facts compared, 0 outlier(s)"


def test_two_passing_gpus_just_over_the_tolerance_apart_differ_as_units_do_not_red():
    # each against the other; both hold the band and they are 1.1 % apart: reported, not red
    out, note = results.outliers([verdict(23.0), verdict(23.26, gpu=OTHER)])
    assert out == [
        _outlier(23.0, H100, "peer median 23.260 ± 0.25 cycles",
                 "23.000 cycles on n7:gpu1 NVIDIA H100 80GB HBM3 (GPU-1a9fac0f) (1.1% off); peers: 23.260",
                 ["2 GPUs compared", UNITS_DIFFER_FLAG], status="UNITS DIFFER"),
        _outlier(23.26, OTHER, "peer median 23.000 ± 0.25 cycles",
                 "23.260 cycles on n7:gpu2 NVIDIA H100 80GB HBM3 (GPU-5c3d0e11) (1.1% off); peers: 23.000",
                 ["2 GPUs compared", UNITS_DIFFER_FLAG], status="UNITS DIFFER"),
    ]
    assert results.red(out) == []
    assert note == ("outlier check: 2 GPUs, 1 facts compared, 0 outlier(s), 2 fact(s) where units differ inside "
                    "the SKU's band (not red)")


def test_a_gpu_more_than_five_percent_off_its_peer_is_an_outlier_both_flagged():
    out, note = results.outliers([verdict(23.0), verdict(24.16, gpu=OTHER)])  # 5.04 % of the smaller apart
    assert [(o.status, o.flags) for o in out] == [
        ("OUTLIER", ["2 GPUs compared", "more than 5% off its peers",
                     "with two GPUs, both are flagged: a third tells which one is off"])] * 2
    assert out[0].verdict_text == ("OUTLIER (2 GPUs compared) (more than 5% off its peers) (with two GPUs, both are "
                                   "flagged: a third tells which one is off)")
    assert results.red(out) == out
    assert note == "outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)"
    # 4.9 % apart, both passing: the population's spread
    assert [o.status for o in results.outliers([verdict(23.0), verdict(24.12, gpu=OTHER)])[0]] == ["UNITS DIFFER"] * 2


def test_a_gpu_that_fails_its_band_and_is_off_its_peers_is_an_outlier_however_little():
    failing = dataclasses.replace(verdict(23.3, gpu=OTHER), status="FAIL")
    out, _ = results.outliers([verdict(23.0), failing])
    assert [(o.gpu["uuid"][:12], o.status) for o in out] == [("GPU-1a9fac0f", "UNITS DIFFER"),
                                                            ("GPU-5c3d0e11", "OUTLIER")]


def test_a_difference_the_recorded_units_already_show_is_not_red_even_past_five_percent():
    # two healthy H100s, 2026-11-26: the 1 KiB TMA load 339.75 against 323.25 (5.1 %), units recorded 324.75-344
    a = dataclasses.replace(verdict(339.75), tolerance=16.2, units_range=[324.75, 344.0])
    b = dataclasses.replace(verdict(323.25, gpu=OTHER), tolerance=16.2, units_range=[324.75, 344.0])
    out, _ = results.outliers([a, b])
    assert [o.status for o in out] == ["UNITS DIFFER"] * 2
    assert out[0].flags[1] == ("inside the SKU's band, and no further apart than the units recorded (324.75 .. 344): "
                               "the units' own spread")
    # further apart than any two recorded units, and over 5 %: red
    far = dataclasses.replace(b, measured=318.0)
    assert [o.status for o in results.outliers([a, far])[0]] == ["OUTLIER"] * 2


def test_a_reading_that_was_not_settled_is_left_out_of_the_fleet_check():
    noisy = dataclasses.replace(verdict(25.0, gpu=OTHER), status="NOISY")
    out, note = results.outliers([verdict(23.0), noisy])
    assert out == [] and note == "outlier check: not run (1 GPU measured; it needs two or more)"


def test_an_unstable_reading_joins_the_fleet_check_by_the_attempts_that_held():
    """H100 node GPU-e63c01fa + GPU-90618738, 2026-11-26: GPU 0's L2 read NOISY once, then 8625.8 and 8619.6;
    GPU 1's planted 5.5 % over it read 9090. Its attempts that held are readings of the unit: compared."""
    def l2(measured, gpu, **kw):
        return dataclasses.replace(verdict(measured, gpu=gpu), fact="l2_read_gbps", unit="GB/s", tolerance=259.06,
                                   **kw)
    attempts = [{"measured": 8624.57, "measured_text": "8624.571 GB/s", "status": "NOISY"},
                {"measured": 8625.85, "measured_text": "8625.847 GB/s", "status": "PASS"},
                {"measured": 8619.64, "measured_text": "8619.645 GB/s", "status": "PASS"}]
    unstable = l2(8624.57, H100, status="UNSTABLE", attempts=attempts)
    out, note = results.outliers([unstable, l2(9089.97, OTHER)])
    assert [(o.gpu["uuid"][:12], o.status, o.measured) for o in out] == [
        ("GPU-1a9fac0f", "OUTLIER", pytest.approx(8622.745)), ("GPU-5c3d0e11", "OUTLIER", 9089.97)]
    assert "more than 5% off its peers" in out[1].flags and note.endswith("2 outlier(s)")
    # its attempts held: judged as a passing reading, so 3.2 % off its peer is the units' spread, not red
    near = results.outliers([unstable, l2(8900.0, OTHER)])[0]
    assert [o.status for o in near] == ["UNITS DIFFER"] * 2
    # no attempt held (all NOISY): left out, as a NOISY reading is
    none_held = l2(8624.57, H100, status="UNSTABLE", attempts=[dict(a, status="NOISY") for a in attempts])
    assert results.outliers([none_held, l2(9089.97, OTHER)])[0] == []


def test_three_gpus_flag_only_the_one_over_the_tolerance_from_the_median():
    # median 23.0: 23.25 is exactly the tolerance off (kept), 21.8 is over it and 5.2 % off (flagged)
    out, note = results.outliers([verdict(23.0), verdict(23.25, gpu=OTHER), verdict(21.8, gpu=THIRD)])
    assert out == [_outlier(21.8, THIRD, "peer median 23.000 ± 0.25 cycles",
                            "21.800 cycles on n8:gpu0 NVIDIA H100 80GB HBM3 (5.5% off); peers: 23.000, 23.250",
                            ["3 GPUs compared", "more than 5% off its peers"])]
    assert TWO_GPUS_FLAG not in out[0].flags
    assert note == "outlier check: 3 GPUs, 1 facts compared, 1 outlier(s)"


@pytest.mark.parametrize("change", [
    {"kind": "static"},  # a compile-time number carries no measurement noise to compare
    {"kind": "model"},
    {"measured": None},
    {"tolerance": None},
    {"gpu": None},
], ids=["static", "model", "no-value", "no-tolerance", "no-gpu"])
def test_only_measured_verdicts_with_a_value_a_tolerance_and_a_gpu_are_compared(change):
    # the lds pair agrees; the "dep" pair would be far apart, were it compared
    far = [dataclasses.replace(verdict(24.0, fact="dep", nodeid="hwtests/t.py::test_dep"), **change),
           dataclasses.replace(verdict(40.0, gpu=OTHER, fact="dep", nodeid="hwtests/t.py::test_dep"), **change)]
    out, note = results.outliers([verdict(23.0), verdict(23.0, gpu=OTHER), *far])
    assert out == []
    assert note == "outlier check: 2 GPUs, 1 facts compared, 0 outlier(s)"


def test_compare_goes_on_past_a_verdict_it_does_not_compare():
    static = dataclasses.replace(verdict(24.0, fact="dep", nodeid="hwtests/t.py::test_dep"), kind="static")
    base = [dataclasses.replace(static, measured=20.0), verdict(23.0)]
    moved = unit_compare.compare(base, [static, verdict(23.5)])
    assert [(m.fact, m.measured_text) for m in moved] == [
        ("lds_latency_cycles", "23.500 cycles on n7:gpu1 NVIDIA H100 80GB HBM3 (GPU-1a9fac0f) (moved +0.500, "
                               "+2.17%)")]


@pytest.mark.parametrize("nodeid, case", [
    ("hwtests/t.py::test_x[gpu1]", "hwtests/t.py::test_x"),  # the GPU was the only parameter
    ("hwtests/t.py::test_x[50-gpu0-fast]", "hwtests/t.py::test_x[50-fast]"),
    ("hwtests/t.py::test_x[gpu1-a[0]]", "hwtests/t.py::test_x[a[0]]"),  # a parameter with brackets of its own
    ("hwtests/[old]/t.py::test_x", "hwtests/[old]/t.py::test_x"),  # a bracket in the path, no parameters
    ("hwtests/[old]/t.py::test_x[gpu0]", "hwtests/[old]/t.py::test_x"),  # ... and the GPU parameter
    ("hwtests/[old]/t.py::TestC::test_x[3-gpu2]", "hwtests/[old]/t.py::TestC::test_x[3]"),
    ("hwtests/t.py::test_x[a::b-gpu1]", "hwtests/t.py::test_x[a::b]"),  # a parameter holding "::"
    ("hwtests/t.py::test_x", "hwtests/t.py::test_x"),
])
def test_case_key_drops_only_the_gpu_parameter(nodeid, case):
    assert results.case_key(verdict(23.0, nodeid=nodeid)) == ("lds_latency_cycles", case)


# -- SessionResults.add and from_json --------------------------------------------------------

STATIC = Verdict("dep_spacing", "sm_90", "PASS", "24 (nvrtc 13.5)", 24.0, "24 cycles with nvrtc 13.5", "cycles",
                 "sass", "compiled", kind="static", nodeid="hwtests/test_static.py::test_dep_spacing")
RECORDED = {"name": "lds_latency_cycles", "arch": "sm_90", "unit": "cycles", "method": "chase", "source": "H200",
            "value": 23.0, "tolerance_abs": 0.25, "tolerance_rel": 0.0, "kind": "measured", "by_compiler": {},
            "scope": "arch", "gpu": None}
LDS_FACT = Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method="chase", source="H200", value=23.0,
                tolerance_abs=0.25)


def test_a_static_verdict_from_two_workers_is_kept_once():
    res = SessionResults()
    res.add({"verdicts": [STATIC.as_dict()], "recorded": [], "plot_points": {}})
    res.add({"verdicts": [STATIC.as_dict()], "recorded": [], "plot_points": {}})
    assert res.verdicts == [STATIC]


def test_a_replayed_gpu_verdict_is_kept_once_but_another_gpu_or_value_is_kept():
    first = verdict(23.0)
    other_gpu = verdict(23.0, gpu=OTHER)  # same fact, status and text on another GPU
    other_text = dataclasses.replace(verdict(23.0), measured_text="23.0 cycles (again)")
    part = {"verdicts": [first.as_dict(), first.as_dict(), other_gpu.as_dict(), other_text.as_dict()],
            "recorded": [], "plot_points": {}}
    res = SessionResults()
    res.add(part)
    assert res.verdicts == [first, other_gpu, other_text]
    # the replay is within one test's part: the same verdict in another part is another measurement
    res.add({"verdicts": [first.as_dict()], "recorded": [], "plot_points": {}})
    assert res.verdicts == [first, other_gpu, other_text, first]


def test_recorded_facts_and_plot_points_are_merged():
    old_fact = Fact(name="dep", arch="sm_90", unit="cycles", method="sass", source="x", value=4.0)
    res = SessionResults([], {"dep": old_fact}, {"hmma": [{"ilp": 1, "warps": 1, "cycles": 24.0}]})
    res.add({"verdicts": [], "recorded": [RECORDED],
             "plot_points": {"hmma": [{"ilp": 2, "warps": 1, "cycles": 12.0}], "bandwidth": [{"STS float": 127.0}]}})
    assert res.recorded == {"dep": old_fact, "lds_latency_cycles": LDS_FACT}
    assert res.plot_points == {"hmma": [{"ilp": 1, "warps": 1, "cycles": 24.0}, {"ilp": 2, "warps": 1, "cycles": 12.0}],
                               "bandwidth": [{"STS float": 127.0}]}


def test_a_part_without_some_keys_adds_what_it_has():
    res = SessionResults()
    res.add({})
    assert res == SessionResults()
    res.add({"verdicts": [STATIC.as_dict()]})
    res.add({"recorded": [RECORDED]})
    res.add({"plot_points": {"hmma": [{"ilp": 1}]}})
    assert res == SessionResults([STATIC], {"lds_latency_cycles": LDS_FACT}, {"hmma": [{"ilp": 1}]})


def test_from_json_without_a_file_name_says_json():
    with pytest.raises(ResultsError) as e:
        SessionResults.from_json({"facts": None})
    assert str(e.value).startswith("<json>: facts is null; expected a list of verdicts")
    with pytest.raises(ResultsError) as e:
        SessionResults.from_json({"facts": [{"fact": "x"}]})
    assert str(e.value).startswith("<json>: facts[0] (fact x) lacks 'arch'")
