"""The fleet rules (outliers at the tolerance's edge, which verdicts they compare, how a test's part is
merged) and the per-GPU, terminal and Markdown tables against hand-written expectations, whole
verdicts and whole table lines, plus what the plots draw beyond their default style."""

import dataclasses

import pytest
from test_oracle_report import drawn  # noqa: F401  (the fixture that keeps the plots' figures)
from test_oracle_results import H100, verdict

from pytest_gpuprops import report, results
from pytest_gpuprops.assertions import Verdict
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.results import ResultsError, SessionResults

# H100 (from test_oracle_results) is n7:gpu1 with a UUID; two more GPUs of the same node and of another
OTHER = {"index": 2, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5c3d0e11-aaaa-bbbb-cccc-ddddeeeeffff", "host": "n7"}
THIRD = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "host": "n8"}
NODE = "hwtests/test_smem.py::test_lds_latency[50]"  # verdict()'s default node id
TWO_GPUS_FLAG = "with two GPUs, both are flagged: a third tells which one is off"


def _outlier(measured, gpu, expected, measured_text, flags):
    """An OUTLIER as the fleet rule should make it from verdict(measured, gpu): written out in full."""
    return Verdict("lds_latency_cycles", "sm_90", "OUTLIER", expected, measured, measured_text, "cycles", "m", "s",
                   kind="fleet", flags=flags, nodeid=NODE, gpu=gpu, tolerance=0.25, attempts=[])


# -- outliers --------------------------------------------------------------------------------


def test_two_gpus_exactly_the_tolerance_apart_are_not_outliers():
    out, note = results.outliers([verdict(23.0), verdict(23.25, gpu=OTHER)])
    assert out == []
    assert note == "outlier check: 2 GPUs, 1 facts compared, 0 outlier(s)"


def test_two_gpus_just_over_the_tolerance_apart_are_both_flagged():
    # each against the other; the verdicts they came from had flags and attempts: the outliers have neither
    out, note = results.outliers([verdict(23.0), verdict(23.26, gpu=OTHER)])
    assert out == [
        _outlier(23.0, H100, "peer median 23.260 ± 0.25 cycles",
                 "23.000 cycles on n7:gpu1 NVIDIA H100 80GB HBM3 (GPU-1a9fac0f); peers: 23.260",
                 ["2 GPUs compared", "with two GPUs, both are flagged: a third tells which one is off"]),
        _outlier(23.26, OTHER, "peer median 23.000 ± 0.25 cycles",
                 "23.260 cycles on n7:gpu2 NVIDIA H100 80GB HBM3 (GPU-5c3d0e11); peers: 23.000",
                 ["2 GPUs compared", "with two GPUs, both are flagged: a third tells which one is off"]),
    ]
    assert [o.attempts for o in out] == [[], []]
    assert out[0].verdict_text == ("OUTLIER (2 GPUs compared) (with two GPUs, both are flagged: a third tells "
                                   "which one is off)")
    assert note == "outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)"


def test_three_gpus_flag_only_the_one_over_the_tolerance_from_the_median():
    # median 23.0: 23.25 is exactly the tolerance off (kept), 22.74 is over it (flagged)
    out, note = results.outliers([verdict(23.0), verdict(23.25, gpu=OTHER), verdict(22.74, gpu=THIRD)])
    assert out == [_outlier(22.74, THIRD, "peer median 23.000 ± 0.25 cycles",
                            "22.740 cycles on n8:gpu0 NVIDIA H100 80GB HBM3; peers: 23.000, 23.250",
                            ["3 GPUs compared"])]
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
    moved = results.compare(base, [static, verdict(23.5)])
    assert [(m.fact, m.measured_text) for m in moved] == [
        ("lds_latency_cycles", "23.500 cycles on n7:gpu1 NVIDIA H100 80GB HBM3 (GPU-1a9fac0f) (moved +0.500)")]


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
    assert str(e.value) == ("<json> is not a gpuprops report: expected a JSON object with a 'facts' list "
                            "(written by pytest --gpuprops-report)")
    with pytest.raises(ResultsError) as e:
        SessionResults.from_json({"facts": [{"fact": "x"}]})
    assert str(e.value).startswith("<json>: a verdict or recorded fact is malformed: ")


# -- the measured cell, the terminal table ---------------------------------------------------

G0 = {"index": 0, "name": "H100", "host": "n7"}
G1 = {"index": 1, "name": "H100", "host": "n7"}


def _test_error(text):
    """A test that failed outside the verdict layer (session._outside_verdict's shape)."""
    return Verdict("test_launch", "-", "ERROR", "-", None, text, "", "", "", kind="test",
                   nodeid="hwtests/t.py::test_launch")


TEXT_72 = "call failed: " + "x" * 59
TEXT_73 = "call failed: " + "x" * 60


def test_a_test_error_cell_is_its_first_line_up_to_72_characters():
    assert (len(TEXT_72), len(TEXT_73)) == (72, 73)
    vs = [_test_error(TEXT_72), _test_error(TEXT_73), _test_error("setup failed: no GPU\n  and a second line"),
          _test_error("call failed: boom")]
    assert report.rows(vs) == [
        ["test_launch", "-", "-", "call failed: " + "x" * 59, "ERROR"],
        ["test_launch", "-", "-", "call failed: " + "x" * 58 + "…", "ERROR"],
        ["test_launch", "-", "-", "setup failed: no GPU", "ERROR"],
        ["test_launch", "-", "-", "call failed: boom", "ERROR"],
    ]


FLEET = Verdict("lds_latency_cycles", "sm_90", "OUTLIER", "peer median 23.000 ± 0.25 cycles", 30.0,
                "30.000 cycles on n7:gpu0 H100; peers: 23.000\nsecond line", "cycles", "chase", "seeds",
                kind="fleet", flags=["3 GPUs compared"], measurement={"noise": 0.0001, "n": 3}, gpu=G0,
                tolerance=0.25)
MOVED = dataclasses.replace(FLEET, status="MOVED", kind="baseline", expected="baseline 23.000 ± 0.25 cycles",
                            measured_text="30.000 cycles on n7:gpu0 H100 (moved +7.000)\nsecond line", flags=[])


def test_a_fleet_cell_is_the_first_line_of_its_text_even_with_a_measurement():
    assert report.rows([FLEET, MOVED]) == [
        ["lds_latency_cycles", "sm_90", "peer median 23.000 ± 0.25 cycles",
         "30.000 cycles on n7:gpu0 H100; peers: 23.000", "OUTLIER (3 GPUs compared)"],
        ["lds_latency_cycles", "sm_90", "baseline 23.000 ± 0.25 cycles",
         "30.000 cycles on n7:gpu0 H100 (moved +7.000)", "MOVED"],
    ]


def test_terminal_table_exactly():
    assert report.table([FLEET, _test_error("setup failed: no GPU\n  and a second line")]).split("\n") == [
        "fact                arch    expected                          measured                                      verdict",
        "------------------  ------  --------------------------------  --------------------------------------------  -------------------------",
        "lds_latency_cycles  sm_90   peer median 23.000 ± 0.25 cycles  30.000 cycles on n7:gpu0 H100; peers: 23.000  OUTLIER (3 GPUs compared)",
        "test_launch         -       -                                 setup failed: no GPU                          ERROR",
    ]


# -- the per-GPU table and the Markdown report -----------------------------------------------


def _on(gpu, fact, node, measured, status="PASS", flags=(), text="x"):
    return Verdict(fact, "sm_90", status, "23 ± 0.25 cycles", measured, text, "cycles", "m", "s",
                   flags=list(flags), nodeid=node, gpu=gpu, tolerance=0.25)


def test_gpu_table_exactly():
    vs = [_on(G0, "lds_latency_cycles", "hwtests/test_smem.py::TestLds::test_latency[gpu0]", 23.0),
          _on(G1, "lds_latency_cycles", "hwtests/test_smem.py::TestLds::test_latency[gpu1]", 23.5, "FAIL",
              ["confirmed: failed 3 of 3 measurements"]),
          STATIC,  # compiled, not measured on a GPU: not in the per-GPU table
          _on(G0, "l2_hit_rate", "hwtests/test_l2.py::test_hit[gpu0]", 5.0),
          _on(G1, "dram_bw", "hwtests/test_dram.py::test_bw[gpu1]", None, "ERROR")]
    assert report.gpu_table(vs).split("\n") == [
        "fact                test          n7:gpu0 H100    n7:gpu1 H100",
        "------------------  ------------  --------------  ---------------------------------------------------",
        "lds_latency_cycles  test_latency  23.000 PASS     23.500 FAIL (confirmed: failed 3 of 3 measurements)",
        "l2_hit_rate         test_hit      5.000 PASS      -",
        "dram_bw             test_bw       -               ERROR",
    ]


MD_HEAD = [
    "# gpuprops report: H100 (sm_90)",
    "",
    "- gpu: name=H100",
    "",
]


def test_markdown_with_two_gpus_has_the_per_gpu_table():
    vs = [_on(G0, "lds_latency_cycles", "hwtests/test_smem.py::test_lds[gpu0]", 23.0, text="23.000 cycles"),
          _on(G1, "lds_latency_cycles", "hwtests/test_smem.py::test_lds[gpu1]", 23.1, text="23.100 cycles")]
    assert report.markdown(vs, {"arch": "sm_90", "gpu": {"name": "H100"}}).split("\n") == MD_HEAD + [
        "gpuprops: 2 PASS",
        "",
        "| fact               | arch   | expected         | measured      | verdict   |",
        "|--------------------|--------|------------------|---------------|-----------|",
        "| lds_latency_cycles | sm_90  | 23 ± 0.25 cycles | 23.000 cycles | PASS      |",
        "| lds_latency_cycles | sm_90  | 23 ± 0.25 cycles | 23.100 cycles | PASS      |",
        "",
        "## Per GPU",
        "",
        "| fact               | test     | n7:gpu0 H100   | n7:gpu1 H100   |",
        "|--------------------|----------|----------------|----------------|",
        "| lds_latency_cycles | test_lds | 23.000 PASS    | 23.100 PASS    |",
        "",
    ]


def test_markdown_with_one_gpu_has_no_per_gpu_table():
    vs = [_on(G0, "lds_latency_cycles", "hwtests/test_smem.py::test_lds[gpu0]", 23.0, text="23.000 cycles"),
          _on(G0, "l2_hit_rate", "hwtests/test_l2.py::test_hit[gpu0]", 5.0, text="5.000 %")]
    assert report.markdown(vs, {"arch": "sm_90", "gpu": {"name": "H100"}}).split("\n") == MD_HEAD + [
        "gpuprops: 2 PASS",
        "",
        "| fact               | arch   | expected         | measured      | verdict   |",
        "|--------------------|--------|------------------|---------------|-----------|",
        "| lds_latency_cycles | sm_90  | 23 ± 0.25 cycles | 23.000 cycles | PASS      |",
        "| l2_hit_rate        | sm_90  | 23 ± 0.25 cycles | 5.000 %       | PASS      |",
        "",
    ]


# -- plots: what the default style does not decide -------------------------------------------


def test_regbank_colour_bar_spans_the_measured_cycles(tmp_path, drawn):  # noqa: F811
    path = tmp_path / "r.png"
    assert report.plot_regbank({(8, 10): 3.0, (8, 11): 2.0, (9, 10): 2.5}, 16, path, "t") == path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = drawn[0]
    ax, bar = fig.axes
    assert bar.get_ylim() == (2.0, 3.0)  # the colour scale is the cycles', not 0..1
    assert ax.get_images()[0].get_clim() == (2.0, 3.0)


def test_regbank_is_viridis_whatever_the_default_colour_map(tmp_path, drawn):  # noqa: F811
    matplotlib = pytest.importorskip("matplotlib")
    with matplotlib.rc_context({"image.cmap": "gray"}):
        report.plot_regbank({(8, 10): 3.0, (9, 11): 2.0}, 16, tmp_path / "r.png", "t")
    assert drawn[0].axes[0].get_images()[0].get_cmap().name == "viridis"


def test_bandwidth_bars_are_tab_blue_whatever_the_colour_cycle(tmp_path, drawn):  # noqa: F811
    matplotlib = pytest.importorskip("matplotlib")
    cycler = pytest.importorskip("cycler").cycler
    mcolors = pytest.importorskip("matplotlib.colors")
    path = tmp_path / "b.png"
    with matplotlib.rc_context({"axes.prop_cycle": cycler(color=["#ff0000", "#00ff00"])}):
        assert report.plot_bandwidth({"STS float": 127.0, "STS float4": 64.0}, 128.0, path, "t") == path
    ax = drawn[0].axes[0]
    assert [mcolors.to_hex(b.get_facecolor()) for b in ax.patches] == ["#1f77b4", "#1f77b4"]  # tab:blue
    assert [b.get_height() for b in ax.patches] == [127.0, 64.0]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
