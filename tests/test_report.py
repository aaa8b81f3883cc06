"""The report layer (report.py) read back: the terminal and Markdown tables parsed into rows
and compared cell by cell, whole table lines (per GPU, terminal, Markdown) against hand-written
expectations, JSON field by field, and plots by what was drawn, not by their file header."""

import dataclasses
import json
import sys

import pytest
from test_results import STATIC

from pytest_gpuprops import facts as F
from pytest_gpuprops import report
from pytest_gpuprops.assertions import FAIL, NOISY, PASS, Verdict, evaluate
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.results import SessionResults

LDS = Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method="chase", source="seeds", value=23.0,
           tolerance_abs=0.25)


def _verdicts():
    passing = evaluate(LDS, Measurement.given("lds", [23.0, 23.0, 23.01]))      # noise 0.025 %
    failing = evaluate(LDS, Measurement.given("lds", [30.0, 30.0, 30.0]))
    static = Verdict("dep_spacing", "sm_86", PASS, "24 (nvrtc 13.5)", 24.0, "24 cycles with nvrtc 13.5\nsecond",
                     "cycles", "sass", "compiled", kind="static", flags=["nvrtc 13.9 not recorded; same as nvrtc 13.5"])
    unmeasured = Verdict("noisy_one", "sm_80", NOISY, "1 ± 0.1 x", None, "n/a", "x", "m", "s")
    return [passing, failing, static, unmeasured]


EXPECTED_ROWS = [
    ["lds_latency_cycles", "sm_90", "23 ± 0.25 cycles", "23.000 (±0.03%, n=3)", "PASS"],
    ["lds_latency_cycles", "sm_90", "23 ± 0.25 cycles", "30.000 (±0.00%, n=3)", "FAIL"],
    ["dep_spacing", "sm_86", "24 (nvrtc 13.5)", "24 cycles with nvrtc 13.5",
     "PASS (nvrtc 13.9 not recorded; same as nvrtc 13.5)"],
    ["noisy_one", "sm_80", "1 ± 0.1 x", "-", "NOISY"],
]


def _parse_simple(text):
    """tabulate's "simple" format: columns are the runs of dashes under the header."""
    lines = text.splitlines()
    rule = lines[1]
    spans, start = [], None
    for i, ch in enumerate(rule + " "):
        if ch == "-" and start is None:
            start = i
        elif ch != "-" and start is not None:
            spans.append((start, i))
            start = None
    spans[-1] = (spans[-1][0], None)  # the last column may run past its rule
    cut = [[line[a:b].strip() for a, b in spans] for line in lines]
    return cut[0], cut[2:]


def _parse_github(text):
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    assert set(rows[1][0]) <= set("-:")
    return rows[0], rows[2:]


def test_rows_cell_by_cell():
    assert report.rows(_verdicts()) == EXPECTED_ROWS


def test_terminal_table_reads_back_cell_by_cell():
    header, rows = _parse_simple(report.table(_verdicts()))
    assert header == ["fact", "arch", "expected", "measured", "verdict"] == report.HEADERS
    assert rows == EXPECTED_ROWS


def test_numbers_are_not_reformatted():
    v = Verdict("f", "sm_90", PASS, "0.10", 1.0, "1.50", "u", "m", "s")
    header, rows = _parse_simple(report.table([v]))
    assert rows == [["f", "sm_90", "0.10", "1.50", "PASS"]]


def test_markdown_table_reads_back_cell_by_cell():
    md = report.markdown(_verdicts(), {"arch": "sm_90", "gpu": {"name": "NVIDIA H200"}})
    header, rows = _parse_github(md)
    assert header == report.HEADERS and rows == EXPECTED_ROWS


def test_markdown_head_and_the_not_passing_section():
    vs = _verdicts()
    meta = {"arch": "sm_90", "date": "2026-01-02", "nvdisasm": "13.5", "compiler": "nvrtc 13.5",
            "gpu": {"name": "NVIDIA H200", "driver_version": "580.1", "pci_bus_id": "0000:01:00.0", "sm_count": 132,
                    "cuda_driver_version": "13.0", "cuda_runtime_version": "13.1", "max_sm_clock_mhz": 1980}}
    lines = report.markdown(vs, meta).splitlines()
    assert lines[:6] == [
        "# gpuprops report: NVIDIA H200 (sm_90)",
        "",
        "- gpu: name=NVIDIA H200, driver_version=580.1, sm_count=132, cuda_driver_version=13.0, "
        "cuda_runtime_version=13.1, max_sm_clock_mhz=1980",
        "- compiler: nvrtc 13.5",
        "- nvdisasm: 13.5",
        "- date: 2026-01-02",
    ]
    text = "\n".join(lines)
    tail = text[text.index("## Not passing"):]
    assert tail.count("```") == 4  # the FAIL and the NOISY verdict, each in a code block
    assert vs[1].message() in tail and vs[3].message() in tail and vs[0].message() not in tail


def test_markdown_without_gpu_or_failures():
    md = report.markdown(_verdicts()[:1], {})
    assert md.splitlines()[0] == "# gpuprops report: no GPU (?)"
    assert "## Not passing" not in md and "- gpu" not in md


def test_json_summary_and_facts():
    # the JSON form is the results layer's now (report.to_json became SessionResults.to_json)
    vs = _verdicts()
    data = SessionResults(vs).to_json({"arch": "sm_90"})
    assert list(data) == ["schema", "meta", "summary", "facts", "recorded", "plot_points"]
    assert data["schema"] == "gpuprops-results/1" and data["recorded"] == [] and data["plot_points"] == {}
    assert data["meta"] == {"arch": "sm_90"}
    assert data["summary"] == {"FAIL": 1, "NOISY": 1, "PASS": 2}
    assert list(data["summary"]) == ["FAIL", "NOISY", "PASS"]
    assert [f["fact"] for f in data["facts"]] == [v.fact for v in vs]
    assert data["facts"][1]["verdict"] == FAIL and data["facts"][1]["measured"] == 30.0
    assert data["facts"][1]["measurement"]["values"] == [30.0, 30.0, 30.0]
    assert SessionResults().to_json({})["summary"] == {}


def _outlier():
    """A fleet verdict as the results layer makes them (hand-written here)."""
    return Verdict("lds_latency_cycles", "sm_90", "OUTLIER", "peer median 23.000 ± 0.25 cycles", 30.0,
                   "30.000 cycles on node1:gpu1 G; peers: 23.000, 23.000", "cycles", "chase", "seeds", kind="fleet",
                   flags=["3 GPUs compared"], gpu={"index": 1, "name": "G", "host": "node1"}, tolerance=0.25)


def test_write_reports(tmp_path):
    out = tmp_path / "deep" / "r.json"
    vs, fleet = _verdicts(), [_outlier()]
    paths = report.write_reports(out, SessionResults(vs), fleet, {"arch": "sm_90"})
    assert paths == [out, tmp_path / "deep" / "r.md"]
    expected = SessionResults(vs).to_json({"arch": "sm_90"})
    expected["fleet"] = [fleet[0].as_dict()]
    expected["links"] = {}  # no pair fact among them
    assert json.loads(out.read_text()) == json.loads(json.dumps(expected, default=str))
    written = json.loads(out.read_text())["fleet"][0]
    assert (written["status"], written["verdict"], written["gpu"]) == ("OUTLIER", "OUTLIER (3 GPUs compared)",
                                                                       {"index": 1, "name": "G", "host": "node1"})
    md = paths[1].read_text()
    assert md == report.markdown(vs, {"arch": "sm_90"}, fleet)
    # the fleet verdict is counted and listed among what is not passing, but not in the facts table
    assert "gpuprops: 1 FAIL, 1 NOISY, 1 OUTLIER, 2 PASS" in md.splitlines()
    assert fleet[0].message() in md and "| OUTLIER" not in md


# ----------------------------------------------------------------------------------------------
# plots: what was drawn


@pytest.fixture
def drawn(monkeypatch):
    """Keep every figure the plot functions make (they close them after saving)."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    real_close = plt.close

    def keep(fig=None):
        figures.append(fig)

    monkeypatch.setattr(plt, "close", keep)
    yield figures
    for f in figures:
        real_close(f)


MODEL_LABEL = "model max(L/(ILP·W), i/W, p)"


def test_hmma_plot_draws_one_line_per_warp_count(tmp_path, drawn):
    # points carry the issue model's value; each warp count gets its measured line and its model's
    # curve, dashed in the same colour (the floor argument is gone: the model includes the pipe)
    pts = [{"ilp": i, "warps": w, "cycles": 24.0 / (i * w), "model": max(24.0 / (i * w), 2.0)}
           for i in (4, 1, 2) for w in (4, 1)]
    p = report.plot_hmma(pts, tmp_path / "h.png", "title")
    (fig,) = drawn
    ax = fig.axes[0]
    one, one_model, four, four_model, key = ax.get_lines()
    assert (one.get_label(), four.get_label(), key.get_label()) == ("1 warp(s)/SMSP", "4 warp(s)/SMSP", MODEL_LABEL)
    assert list(one.get_xdata()) == [1, 2, 4]  # sorted by ILP
    assert list(one.get_ydata()) == [24.0, 12.0, 6.0]
    assert list(four.get_ydata()) == [6.0, 3.0, 1.5]
    assert list(one_model.get_xdata()) == [1, 2, 4] and list(one_model.get_ydata()) == [24.0, 12.0, 6.0]
    assert list(four_model.get_ydata()) == [6.0, 3.0, 2.0]
    assert one_model.get_color() == one.get_color() == "C0" and four_model.get_color() == four.get_color() == "C1"
    assert list(key.get_xdata()) == [] and list(key.get_ydata()) == []  # the legend's entry only
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1 warp(s)/SMSP", "4 warp(s)/SMSP", MODEL_LABEL]
    assert ax.get_yscale() == "log" and ax.get_title() == "title"
    assert ax.get_xlabel() == "independent HMMA chains per warp (ILP)"
    assert p.read_bytes()[:4] == b"\x89PNG"


def test_hmma_plot_without_a_floor(tmp_path, drawn):
    # without the model's values (or with one missing) no model curve is drawn; the legend's model
    # entry stays
    report.plot_hmma([{"ilp": 1, "warps": 1, "cycles": 24.0}, {"ilp": 2, "warps": 1, "cycles": 12.0, "model": 12.0}],
                     tmp_path / "h.png", "t")
    data, key = drawn[0].axes[0].get_lines()
    assert (data.get_label(), key.get_label()) == ("1 warp(s)/SMSP", MODEL_LABEL)
    assert list(data.get_ydata()) == [24.0, 12.0] and list(key.get_ydata()) == []


def test_regbank_plot_is_the_grid_with_holes(tmp_path, drawn):
    cells = {(8, 10): 3.0, (8, 11): 2.0, (9, 10): 2.0}
    report.plot_regbank(cells, 16, tmp_path / "r.png", "t")
    ax = drawn[0].axes[0]
    grid = ax.get_images()[0].get_array()
    assert grid.shape == (2, 2)
    assert grid[0][0] == 3.0 and grid[0][1] == 2.0 and grid[1][0] == 2.0 and grid.mask[1][1]  # (9, 11) missing
    assert [t.get_text() for t in ax.get_yticklabels()] == ["R8", "R9"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["R10", "R11"]
    assert ax.get_xlabel() == "Rb" and ax.get_ylabel() == "Ra" and "FFMA Rd, Ra, Rb, R16" in ax.get_title()


def test_bandwidth_plot_bars_and_peak(tmp_path, drawn):
    report.plot_bandwidth({"STS float": 127.0, "STS float4": 64.0}, 128.0, tmp_path / "b.png", "t")
    ax = drawn[0].axes[0]
    assert [b.get_height() for b in ax.patches] == [127.0, 64.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["STS float", "STS float4"]
    (peak,) = ax.get_lines()
    assert list(peak.get_ydata()) == [128.0, 128.0] and peak.get_label() == "theory 128 B/clk"


def test_plots_need_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(report.PlotsUnavailable, match=r"^--gpuprops-plots needs matplotlib: pip install "
                                                      r"'pytest-gpuprops\[plots\]'$"):
        report._plt()


def _png_size(path):
    import struct
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_hmma_plot_style(tmp_path, drawn):
    import matplotlib.colors as mcolors
    p = report.plot_hmma([{"ilp": 1, "warps": 1, "cycles": 24.0, "model": 23.0}], tmp_path / "h.png", "t")
    ax = drawn[0].axes[0]
    assert _png_size(p) == (704, 462)  # 6.4 x 4.2 inches at 110 dpi
    data, model, key = ax.get_lines()
    assert data.get_marker() == "o" and mcolors.to_hex(data.get_color()) == "#1f77b4"  # C0
    assert (model.get_linestyle(), model.get_linewidth(), mcolors.to_hex(model.get_color())) == ("--", 1.0, "#1f77b4")
    assert (key.get_linestyle(), key.get_linewidth(), mcolors.to_hex(key.get_color())) == ("--", 1.0, "#000000")
    assert ax.get_ylabel() == "cycles per HMMA.16816.F32 per SMSP"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1 warp(s)/SMSP", MODEL_LABEL]
    assert ax.get_legend().get_texts()[0].get_fontsize() == 8.0
    assert ax.xaxis.get_gridlines()[0].get_visible() and ax.xaxis.get_gridlines()[0].get_alpha() == 0.3


def test_regbank_plot_style(tmp_path, drawn):
    p = report.plot_regbank({(8, 10): 3.0, (9, 11): 2.0}, 16, tmp_path / "r.png", "title")
    fig = drawn[0]
    ax = fig.axes[0]
    assert _png_size(p) == (704, 594)  # 6.4 x 5.4 inches at 110 dpi
    im = ax.get_images()[0]
    assert im.origin == "lower" and im.get_cmap().name == "viridis"
    assert len(fig.axes) == 2 and fig.axes[1].get_label() == "<colorbar>"  # the colour bar beside the map
    assert [t.get_rotation() for t in ax.get_xticklabels()] == [90.0, 90.0]
    assert {t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()} == {7.0}
    assert ax.get_title() == "title\nFFMA Rd, Ra, Rb, R16 (no reuse): cycles per FFMA"


def test_bandwidth_plot_style(tmp_path, drawn):
    import matplotlib.colors as mcolors
    p = report.plot_bandwidth({"STS float": 127.0}, 128.0, tmp_path / "b.png", "title")
    ax = drawn[0].axes[0]
    assert _png_size(p) == (704, 440)  # 6.4 x 4.0 inches at 110 dpi
    assert mcolors.to_hex(ax.patches[0].get_facecolor()) == mcolors.to_hex("tab:blue")
    (peak,) = ax.get_lines()
    assert (peak.get_linestyle(), peak.get_linewidth(), mcolors.to_hex(peak.get_color())) == ("--", 1.0, "#000000")
    assert ax.get_ylabel() == "bytes per cycle per SM" and ax.get_title() == "title"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["theory 128 B/clk"]


def test_markdown_document_exactly():
    v = Verdict("lds", "sm_90", FAIL, "23 ± 0.5 cycles", 30.0, "30.000 cycles", "cycles", "chase", "seeds")
    md = report.markdown([v], {"arch": "sm_90", "gpu": {"name": "G"}})
    assert md == "\n".join([
        "# gpuprops report: G (sm_90)",
        "",
        "- gpu: name=G",
        "",
        "gpuprops: 1 FAIL",  # the summary line, as the terminal prints it
        "",
        report.table([v], fmt="github"),
        "",
        "## Not passing",
        "",
        "```",
        v.message(),
        "```",
        "",
    ])


def test_table_default_format_is_simple():
    vs = _verdicts()
    assert report.table(vs) == report.table(vs, fmt="simple")
    assert report.table(vs, fmt="github").startswith("| fact")


def test_write_reports_exact_json_and_deep_folders(tmp_path):
    import datetime
    out = tmp_path / "a" / "b" / "r.json"
    meta = {"date": datetime.date(2026, 1, 2), "arch": "sm_90"}
    report.write_reports(out, SessionResults(_verdicts()[:1]), [], meta)
    expected = SessionResults(_verdicts()[:1]).to_json(meta)
    expected["fleet"] = []
    expected["links"] = {}
    assert out.read_text() == json.dumps(expected, indent=1, default=str)
    assert list(json.loads(out.read_text())) == ["schema", "meta", "summary", "facts", "recorded", "plot_points",
                                                 "fleet", "links"]
    assert json.loads(out.read_text())["meta"]["date"] == "2026-01-02"
    assert out.with_suffix(".md").read_text() == report.markdown(_verdicts()[:1], meta)


# ----------------------------------------------------------------------------------------------
# the packaged facts through the tables and plots


def _packaged_verdicts():
    fact = F.load_facts("sm_90")["lds_latency_cycles"]
    return [evaluate(fact, Measurement.given("lds", [23.0, 23.0, 23.01])),
            evaluate(fact, Measurement.given("lds", [30.0, 30.0, 30.0]))]


def test_table_json_and_markdown(tmp_path):
    vs = _packaged_verdicts()
    t = report.table(vs)
    assert "lds_latency_cycles" in t and "PASS" in t and "FAIL" in t and "23 ± 0.25 cycles" in t
    paths = report.write_reports(tmp_path / "r.json", SessionResults(vs), [],
                                 {"arch": "sm_90", "gpu": {"name": "NVIDIA H200"}})
    data = json.loads(paths[0].read_text())
    assert data["summary"] == {"FAIL": 1, "PASS": 1} and data["facts"][1]["measured"] == 30.0
    md = paths[1].read_text()
    assert "| lds_latency_cycles" in md and "## Not passing" in md and "30.000 cycles" in md


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    p1 = report.plot_hmma([{"ilp": i, "warps": w, "cycles": max(24 / (i * w), 6), "model": max(24 / (i * w), 6)}
                           for i in (1, 2, 4) for w in (1, 4)], tmp_path / "h.png", "t")
    p2 = report.plot_regbank({(a, b): 1 + (a % 2 == b % 2) for a in range(4) for b in range(4)}, 9,
                             tmp_path / "r.png", "t")
    p3 = report.plot_bandwidth({"STS float": 127.0}, 128, tmp_path / "b.png", "t")
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in (p1, p2, p3))


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


# -- the terminal's default table: grouped, attention first, within 120 columns -----------------


def _at(node, fact="lds_latency_cycles", status=PASS, measured=23.0, **kw):
    base = dict(fact=fact, arch="sm_90", status=status, expected="23 ± 0.25 cycles", measured=measured,
                measured_text=f"{measured} cycles (min 22.9, max 23.1, noise 0.10%, n=5, converged)", unit="cycles",
                method="m", source="s", nodeid=node, measurement={"noise": 0.001, "n": 5})
    base.update(kw)
    return Verdict(**base)


def _skipped_test(node, reason):
    return Verdict(node.split("::")[-1], "-", "SKIPPED", "-", None, reason, "", "", "", kind="test", nodeid=node)


@pytest.mark.parametrize("node, expected", [
    ("hwtests/test_async_units.py::test_cp_async_latency[cg16]", "async units"),
    ("hwtests/test_wgmma.py::test_latency[m64n8k16]", "wgmma"),
    ("hwtests/test_wgmma_dtypes.py::test_rate", "wgmma"),
    ("hwtests/test_throughput_and_clocks.py::test_ffma", "clocks & throughput"),
    ("hwtests/test_health.py::test_health[health_ecc_mode]", "health"),
    ("hwtests/test_smem.py::test_lds", "shared memory"),
    ("hwtests/test_smem_conflicts.py::test_model", "shared memory"),
    ("hwtests/test_memory_hierarchy.py::test_l2", "memory hierarchy"),
    ("hwtests/test_regbank.py::test_seed_cases", "register banks"),
    ("hwtests/test_static.py::test_hmma_dependent_chain_issue_spacing[sm_80]", "static (SASS)"),
    ("hwtests/test_static_async_units.py::test_clean[x]", "static (SASS)"),
    ("hwtests/test_alu_ops.py::test_latency[shfl]", "ALU"),
    ("hwtests/test_mma_dtypes.py::test_model", "tensor cores (mma.sync)"),
    ("hwtests/test_tensorcore.py::test_model", "tensor cores (mma.sync)"),
    ("hwtests/test_dpx_atomics_const.py::test_dpx", "DPX, atomics & constant cache"),
    ("tests/test_new_unit.py::test_x", "new unit"),  # no area: the file's name
    ("test_lds.py::test_lds[gpu0]", "lds"),
])
def test_the_area_of_a_verdict_is_its_test_file_s(node, expected):
    assert report.area(_at(node)) == expected


def test_a_verdict_without_a_test_goes_by_its_fact_s_name():
    assert report.area(_at("", fact="wgmma_m64n8k16_f16_ss_latency_cycles")) == "wgmma"
    assert report.area(_at("", fact="health_ecc_mode")) == "health"
    assert report.area(_at("", fact="lds_latency_cycles")) == "other"


def test_compact_table_exactly():
    smem = "hwtests/test_smem.py::test_lds"
    vs = [
        _at(smem),
        _at("hwtests/test_alu.py::test_ffma", fact="ffma_latency_cycles", expected="3.984 ± 0.05 cycles",
            measured=3.984375),
        _at(smem, fact="sts_latency_cycles", status=FAIL, measured=30.0, flags=["confirmed: failed 3 of 3 measurements"],
            attempts=[{"measured": 30.0, "measured_text": "30", "status": FAIL}] * 3),
        _skipped_test("hwtests/test_static.py::test_spacing[sm_80]", "facts file x.toml is for sm_90, not sm_80"),
        _skipped_test("hwtests/test_static.py::test_other[sm_80]", "facts file x.toml is for sm_90, not sm_80"),
        _skipped_test("hwtests/test_static.py::test_spacing[sm_86]", "facts file x.toml is for sm_90, not sm_86"),
        Verdict("hmma_dep", "sm_90", PASS, "24 (nvrtc 13.5)", 24.0, "24 cycles with nvrtc 13.0", "cycles", "m", "s",
                kind="static", flags=["nvrtc 13.0 not recorded; same as nvrtc 13.5"],
                nodeid="hwtests/test_static.py::test_spacing[sm_90]"),
        Verdict("regbank_model", "sm_90", PASS, "model ± 6%", 26.0, "26/26 cases within ±6% of the model; worst R8: "
                "model 1.000, measured 1.044", "cycles", "m", "s", kind="model", nodeid="hwtests/test_regbank.py::t"),
    ]
    assert report.compact_table(vs).split("\n") == [
        "all facts for sm_90; -v shows noise, n, attempts, whole verdicts and each skipped test",
        "  fact                 expected             measured         verdict",
        "  -------------------  -------------------  ---------------  --------------------------------------------------",
        "shared memory — 2: 1 FAIL, 1 PASS",  # the group with a failure first, the failure first in it
        "  sts_latency_cycles   23 ± 0.25 cycles     30.000           FAIL (confirmed: failed 3 of 3 measurements)",
        "  lds_latency_cycles   23 ± 0.25 cycles     23.000           PASS",
        "ALU — 1: 1 PASS",  # then the groups in the order of the run
        "  ffma_latency_cycles  3.984 ± 0.05 cycles  3.984            PASS",
        "static (SASS) — 4: 1 PASS, 3 SKIPPED",  # the skipped tests counted per reason, not listed
        "  hmma_dep             24 (nvrtc 13.5)      24 (nvrtc 13.0)  PASS (nvrtc 13.0 not recorded; same as nvrtc 13.5)",
        "  2 skipped: facts file x.toml is for sm_90, not sm_80",
        "  1 skipped: facts file x.toml is for sm_90, not sm_86",
        "register banks — 1: 1 PASS",
        "  regbank_model        model ± 6%           26/26 cases      PASS",
    ]


def test_terminal_table_is_the_whole_table_with_v():
    vs = _verdicts()
    assert report.terminal_table(vs, verbose=1) == report.table(vs) == report.terminal_table(vs, verbose=2)
    assert report.terminal_table(vs) == report.compact_table(vs) == report.terminal_table(vs, verbose=-1)


LONG = "a very long text, " * 20


def _long_verdicts():
    """Every cell too long: names, expectations, measured texts, flags, test files and skip reasons."""
    long_file = "hwtests/test_" + "x" * 150 + ".py"
    return [
        _at("hwtests/test_smem.py::t", fact="f" * 200, expected=LONG, status=FAIL, flags=[LONG, LONG]),
        _at("hwtests/test_smem.py::t", fact="lds_latency_cycles", status="UNSTABLE", flags=[LONG]),
        Verdict("test_" + "y" * 150, "-", "ERROR", "-", None, "call failed: " + LONG, "", "", "", kind="test",
                nodeid=long_file + "::test_y"),
        Verdict("m", "sm_90", PASS, "model ± 2%", 3.0, "3/3 cases" + LONG, "", "", "", kind="model",
                nodeid="hwtests/test_wgmma.py::t"),
        Verdict("health_x", "sm_90", "SCHEDULE CHANGED", LONG, 1.0, LONG, "", "", "", kind="health",
                nodeid="hwtests/test_health.py::t"),
        _skipped_test(long_file + "::test_z", "skipped because " + LONG),
        _at("", fact="lds_latency_cycles", status="OUTLIER", kind="fleet", expected="peer median " + LONG,
            measured_text="30.000 cycles on n7:gpu0 H100; peers: " + LONG, gpu=G0),
    ]


@pytest.mark.parametrize("second_arch", [False, True])
def test_no_line_of_the_compact_table_is_wider_than_120(second_arch):
    vs = _long_verdicts()
    if second_arch:
        vs.append(dataclasses.replace(vs[1], arch="sm_100a_with_a_long_arch_name"))
    text = report.compact_table(vs)
    lines = text.split("\n")
    assert max(len(line) for line in lines) <= 120 == report.TERMINAL_WIDTH
    assert max(len(line) for line in report.table(vs).split("\n")) > 300  # -v: every cell whole
    assert "…" in text
    header = next(n for n, line in enumerate(lines) if line.lstrip().startswith("fact "))
    assert ("arch" in lines[header].split()) == second_arch  # one arch: said once, not in a column
    rows = [line for line in lines[header + 2:] if " — " not in line and " skipped: " not in line]
    assert len(rows) == len(vs) - 1  # the skipped test is counted, not listed
    # each row keeps its whole status, whatever is shortened before it
    statuses = ["FAIL", "UNSTABLE", "OUTLIER", "ERROR", "PASS", "SCHEDULE CHANGED", "SKIPPED"]
    assert all(any(s in r for s in statuses) for r in rows)


def test_a_fact_name_stays_whole_while_other_cells_are_shortened():
    name = "atom_global_add_same_address_near_latency_cycles"
    vs = [_at("hwtests/test_dpx_atomics_const.py::t", fact=name, expected=LONG, flags=[LONG])]
    (row,) = [line for line in report.compact_table(vs).split("\n") if name in line]
    assert row.startswith("  " + name + "  ") and len(row) == 120 and row.endswith("…")


def test_groups_that_need_attention_come_first_rows_in_status_order():
    vs = [_at("hwtests/test_alu.py::a"),
          _at("hwtests/test_smem.py::b", status="NOISY"),
          _at("hwtests/test_smem.py::c"),
          _at("hwtests/test_smem.py::d", status="UNSTABLE"),
          _at("hwtests/test_health.py::e", status="THROTTLED"),
          _skipped_test("hwtests/test_static.py::f[sm_80]", "why"),
          Verdict("test_g", "-", "ERROR", "-", None, "call failed: boom", "", "", "", kind="test",
                  nodeid="hwtests/test_regbank.py::test_g"),
          _at("hwtests/test_wgmma.py::h", status=FAIL)]
    lines = report.compact_table(vs).split("\n")
    headings = [line for line in lines if " — " in line]
    assert headings == ["wgmma — 1: 1 FAIL", "health — 1: 1 THROTTLED", "shared memory — 3: 1 UNSTABLE, 1 NOISY, 1 PASS",
                        "register banks — 1: 1 ERROR", "ALU — 1: 1 PASS", "static (SASS) — 1: 1 SKIPPED"]
    smem = lines[lines.index(headings[2]) + 1:lines.index(headings[3])]
    assert [r.split()[-1] for r in smem] == ["UNSTABLE", "NOISY", "PASS"]
    assert lines[-1] == "  1 skipped: why"
    assert "call failed: boom" in lines[lines.index(headings[3]) + 1]


def test_several_archs_keep_the_arch_column():
    vs = [_at("hwtests/test_static.py::a[sm_80]", arch="sm_80"), _at("hwtests/test_static.py::a[sm_90]")]
    lines = report.compact_table(vs).split("\n")
    assert lines[0].split() == ["fact", "arch", "expected", "measured", "verdict"]
    assert [line.split()[1] for line in lines[3:]] == ["sm_80", "sm_90"]
    assert not any("all facts for" in line for line in lines)


def test_only_skipped_tests_print_no_header():
    vs = [_skipped_test("hwtests/test_wgmma.py::a", "needs a GPU"), _skipped_test("hwtests/test_wgmma.py::b", "needs a GPU")]
    assert report.compact_table(vs).split("\n") == ["wgmma — 2: 2 SKIPPED", "  2 skipped: needs a GPU"]


# ----------------------------------------------------------------------------------------------
# pair facts (hwtests/test_node_links.py): the GPU x GPU matrix, the pair named, the fleet rule per pair
# Readings are the H100 ones recorded in pytest_gpuprops/facts/sm_90.toml (their source strings):
# p2p_ce_copy_gbps 9f007e6c->1559a37f 397.69, 1559a37f->9f007e6c 397.84; per-SM p2p latencies 847.59 ns.

H100_NAME = "NVIDIA H100 80GB HBM3"
# the node of the recorded copy-engine readings; the UUIDs' first group as recorded, the rest zeros
P0 = {"index": 0, "name": H100_NAME, "uuid": "GPU-9f007e6c-0000-0000-0000-000000000000", "host": "n7"}
P1 = {"index": 1, "name": H100_NAME, "uuid": "GPU-1559a37f-0000-0000-0000-000000000000", "host": "n7"}
LINKS_HEAD = "row: the GPU that issued, column: its peer"


def _pair(src, dst, measured, status=PASS, fact="p2p_ce_copy_gbps", unit="GB/s", test="test_copy_engine_rate"):
    """A pair test's verdict as FactChecker._finish leaves it: ``gpu`` issued the work, ``peer`` is the
    other end of the link."""
    return Verdict(fact, "sm_90", status, "396.853 ± 11.9 GB/s", measured, f"{measured} {unit}", unit, "m", "s",
                   nodeid=f"hwtests/test_node_links.py::{test}[gpu{src['index']}-peer+1]", gpu=src, peer=dst,
                   tolerance=11.9, scope="gpu")


def test_link_matrices_of_two_gpus_each_way():
    vs = [_pair(P0, P1, 397.69), _pair(P1, P0, 397.84),
          _on(G0, "lds_latency_cycles", "hwtests/test_smem.py::test_lds[gpu0]", 23.0)]  # no peer: no matrix
    labels = ["n7:gpu0 (GPU-9f007e6c)", "n7:gpu1 (GPU-1559a37f)"]
    assert report.link_matrices(vs) == {"p2p_ce_copy_gbps": {
        "unit": "GB/s", "gpus": labels,
        "cells": [[None, {"value": 397.69, "status": "PASS"}],
                  [{"value": 397.84, "status": "PASS"}, None]]}}
    assert report.link_tables(report.link_matrices(vs)).split("\n") == [
        f"p2p_ce_copy_gbps (GB/s; {LINKS_HEAD})",
        "                        n7:gpu0 (GPU-9f007e6c)    n7:gpu1 (GPU-1559a37f)",
        "----------------------  ------------------------  ------------------------",
        "n7:gpu0 (GPU-9f007e6c)  x                         397.7",
        "n7:gpu1 (GPU-1559a37f)  397.8                     x",
    ]


def test_no_pair_verdict_no_matrix():
    assert report.link_matrices(_verdicts()) == {} and report.link_tables({}) == ""
    # a peer without the GPU that issued (never written so) is not placed either
    assert report.link_matrices([dataclasses.replace(_pair(P0, P1, 397.69), gpu=None)]) == {}


def _n7(index):
    return {"index": index, "name": "H100", "host": "n7"}


def _three_gpus():
    """Three GPUs, pairs measured in any order: one FAIL, one ERROR without a value, cells missing,
    GPU 10 after GPU 2 (by number, not as text), and a second pair fact with its own GPUs."""
    return [_pair(_n7(10), _n7(2), 357.8, FAIL), _pair(_n7(2), _n7(10), 397.69),
            _pair(_n7(0), _n7(2), None, "ERROR"),
            _pair(_n7(0), _n7(2), 847.59, fact="p2p_latency_ns", unit="ns", test="test_peer_latency")]


def test_link_matrices_with_missing_cells_and_statuses():
    m = report.link_matrices(_three_gpus())
    assert list(m) == ["p2p_ce_copy_gbps", "p2p_latency_ns"]  # by fact name
    assert m["p2p_ce_copy_gbps"] == {"unit": "GB/s", "gpus": ["n7:gpu0", "n7:gpu2", "n7:gpu10"], "cells": [
        [None, {"value": None, "status": "ERROR"}, None],
        [None, None, {"value": 397.69, "status": "PASS"}],
        [None, {"value": 357.8, "status": "FAIL"}, None]]}
    assert m["p2p_latency_ns"] == {"unit": "ns", "gpus": ["n7:gpu0", "n7:gpu2"],
                                   "cells": [[None, {"value": 847.59, "status": "PASS"}], [None, None]]}


def test_link_tables_show_what_is_not_pass_the_diagonal_and_what_was_not_measured():
    assert report.link_tables(report.link_matrices(_three_gpus())).split("\n") == [
        f"p2p_ce_copy_gbps (GB/s; {LINKS_HEAD})",
        "          n7:gpu0    n7:gpu2     n7:gpu10",
        "--------  ---------  ----------  ----------",
        "n7:gpu0   x          - ERROR     -",
        "n7:gpu2   -          x           397.7",
        "n7:gpu10  -          357.8 FAIL  x",
        "",
        f"p2p_latency_ns (ns; {LINKS_HEAD})",
        "         n7:gpu0    n7:gpu2",
        "-------  ---------  ---------",
        "n7:gpu0  x          847.6",
        "n7:gpu2  -          x",
    ]


def test_link_matrices_order_gpus_by_host_then_index():
    b0, b1 = {"index": 0, "name": "H100", "host": "n8"}, {"index": 1, "name": "H100", "host": "n8"}
    vs = [_pair(b1, b0, 397.0), _pair(_n7(1), _n7(0), 397.5), _pair({"index": 3, "name": "H100"}, b0, 396.0)]
    assert report.link_matrices(vs)["p2p_ce_copy_gbps"]["gpus"] == ["gpu3", "n7:gpu0", "n7:gpu1", "n8:gpu0",
                                                                     "n8:gpu1"]


def test_markdown_has_the_node_links_section_only_with_pair_verdicts():
    meta = {"arch": "sm_90", "gpu": {"name": "H100"}}
    vs = _three_gpus()
    lines = report.markdown(vs, meta).split("\n")
    at = lines.index("## Node links: GPU x GPU")
    tables = report.link_tables(report.link_matrices(vs), fmt="github")
    assert lines[at + 1] == "" and "\n".join(lines[at + 2:]).startswith(tables + "\n")
    assert "| n7:gpu10 | -         | 357.8 FAIL | x          |" in tables.split("\n")
    assert "## Node links: GPU x GPU" not in report.markdown(_verdicts(), meta)


def test_write_reports_carries_the_links_and_the_schema_accepts_them(tmp_path):
    from pytest_gpuprops import report_schema, results
    vs = [_pair(P0, P1, 397.69), _pair(P1, P0, 357.8, FAIL)]
    json_path, md_path = report.write_reports(tmp_path / "r.json", SessionResults(vs), [], {"arch": "sm_90"})
    data = json.loads(json_path.read_text())
    assert data["links"] == json.loads(json.dumps(report.link_matrices(vs)))
    assert data["links"]["p2p_ce_copy_gbps"]["cells"][1][0] == {"value": 357.8, "status": "FAIL"}
    assert [f["peer"] for f in data["facts"]] == [P1, P0]
    report_schema.check_report(data, "r.json")
    # read back, each verdict still names its pair
    back, _ = results.load(json_path)
    assert [(v.gpu["index"], v.peer["index"]) for v in back.verdicts] == [(0, 1), (1, 0)]
    assert "## Node links: GPU x GPU" in md_path.read_text()


@pytest.mark.parametrize("links, problem", [
    ({"p2p_ce_copy_gbps": {"unit": "GB/s", "gpus": ["a", "b"], "cells": "x"}},
     "links.p2p_ce_copy_gbps.cells is the string 'x'; expected a list of rows"),
    ({"p2p_ce_copy_gbps": {"unit": "GB/s", "gpus": ["a"], "cells": [[None], "row"]}},
     "links.p2p_ce_copy_gbps.cells[1] is the string 'row'; expected a row"),
    ({"p2p_ce_copy_gbps": {"gpus": [], "cells": []}},
     "links.p2p_ce_copy_gbps lacks 'unit'; a GPU x GPU matrix (unit, gpus, cells) has unit, gpus, cells"),
    ({"p2p_ce_copy_gbps": {"unit": "GB/s", "gpus": [0], "cells": []}},
     "links.p2p_ce_copy_gbps.gpus[0] is the number 0; expected a string"),
    ([], "links is a list of 0; expected an object of pair fact -> GPU x GPU matrix"),
])
def test_the_schema_refuses_malformed_links(tmp_path, links, problem):
    from pytest_gpuprops import report_schema
    json_path, _ = report.write_reports(tmp_path / "r.json", SessionResults([_pair(P0, P1, 397.69)]), [],
                                        {"arch": "sm_90"})
    data = json.loads(json_path.read_text())
    data["links"] = links
    with pytest.raises(report_schema.SchemaError) as exc:
        report_schema.check_report(data, "r.json")
    assert str(exc.value).startswith(f"r.json: {problem}; pass a report written by pytest --gpuprops-report")


def test_the_schema_refuses_a_peer_that_is_not_a_gpu(tmp_path):
    from pytest_gpuprops import report_schema
    data = SessionResults([_pair(P0, P1, 397.69)]).to_json({})
    data["facts"][0]["peer"] = "gpu1"
    with pytest.raises(report_schema.SchemaError) as exc:
        report_schema.check_report(data, "r.json")
    assert str(exc.value).startswith("r.json: facts[0] (fact p2p_ce_copy_gbps).peer is the string 'gpu1'; expected "
                                     "an object naming the GPU")


def test_a_pair_verdict_names_both_gpus():
    from pytest_gpuprops import results
    v = _pair(P0, P1, 357.8, FAIL)
    assert v.gpu_text == (f"GPU 0 {H100_NAME} (GPU-9f007e6c-0000-0000-0000-000000000000) on n7 -> peer GPU 1 "
                          "(GPU-1559a37f-0000-0000-0000-000000000000)")
    assert f"  GPU:      {v.gpu_text}" in v.message().split("\n")
    assert results.gpu_label(v) == f"n7:gpu0 {H100_NAME} (GPU-9f007e6c) -> gpu1 (GPU-1559a37f)"
    # a peer known by its PCI bus id only, or by nothing
    bus = dataclasses.replace(v, peer={"index": 1, "pci_bus_id": "0000:2A:00.0"})
    assert bus.gpu_text.endswith(" on n7 -> peer GPU 1 (0000:2A:00.0)")
    assert results.gpu_label(bus) == f"n7:gpu0 {H100_NAME} (GPU-9f007e6c) -> gpu1"
    assert dataclasses.replace(v, peer={}).gpu_text == dataclasses.replace(v, peer=None).gpu_text  # no pair
    assert dataclasses.replace(v, peer={"index": 3}).gpu_text.endswith("-> peer GPU 3 (no UUID)")
    # a verdict of one GPU names one GPU, as before
    assert results.gpu_label(dataclasses.replace(v, peer=None)) == f"n7:gpu0 {H100_NAME} (GPU-9f007e6c)"


# the fleet rule per pair: the same pair test on two GPUs is one case (results.case_key drops gpuN),
# so GPU 0 -> 1 is compared with GPU 1 -> 0. Latencies of the one-SM method (2026-11-26, three nodes):
# 9f007e6c->1559a37f 850.00, 90ad244b->357002be 796.86 ns; its band: 823.892 ± 27.4 ns, units 796.71 .. 851.07.

def _latency(src, dst, measured, status=PASS):
    return dataclasses.replace(_pair(src, dst, measured, status, fact="p2p_latency_ns", unit="ns",
                                     test="test_peer_latency"),
                               expected="823.892 ± 27.4 ns", tolerance=27.4, units_range=[796.71, 851.07])


def test_two_directions_apart_by_what_the_units_recorded_show_differ_but_are_not_outliers():
    from pytest_gpuprops import results
    out, note = results.outliers([_latency(P0, P1, 850.0), _latency(P1, P0, 797.2)])
    assert note == ("outlier check: 2 GPUs, 1 facts compared, 0 outlier(s), 2 fact(s) where units differ inside "
                    "the SKU's band (not red)")
    assert [(o.status, o.kind, o.peer["index"]) for o in out] == [("UNITS DIFFER", "fleet", 1),
                                                                   ("UNITS DIFFER", "fleet", 0)]
    first = out[0]
    assert first.expected == "peer median 797.200 ± 27.4 ns"
    assert first.measured_text == (f"850.000 ns on n7:gpu0 {H100_NAME} (GPU-9f007e6c) -> gpu1 (GPU-1559a37f) "
                                   "(6.6% off); peers: 797.200")
    assert first.flags == ["2 GPUs compared", "inside the SKU's band, and no further apart than the units recorded "
                           "(796.71 .. 851.07): the units' own spread"]


def test_a_direction_past_what_the_units_recorded_is_an_outlier_both_flagged():
    """The same pair with the reverse direction planted at 780 ns: below its band and 70 ns off the
    other direction, more than the units recorded (54.36 ns apart)."""
    from pytest_gpuprops import results
    out, note = results.outliers([_latency(P0, P1, 850.0), _latency(P1, P0, 780.0, FAIL)])
    assert note == "outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)"
    assert [(o.status, o.measured) for o in out] == [("OUTLIER", 850.0), ("OUTLIER", 780.0)]
    assert out[0].flags == ["2 GPUs compared", "more than 5% off its peers",
                            "with two GPUs, both are flagged: a third tells which one is off"]
    # within the band's tolerance of each other: nothing to report, whichever GPU issued
    assert results.outliers([_latency(P0, P1, 850.0), _latency(P1, P0, 830.0)])[0] == []
