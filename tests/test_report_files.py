"""The report files (report_files.py) read back: the Markdown document line by line and its table
parsed cell by cell, the JSON field by field as written (fleet verdicts, GPU x GPU links) and as the
report schema accepts or refuses it."""

import json

import pytest
from test_report import EXPECTED_ROWS, G0, G1, P0, P1, _on, _pair, _parse_github, _three_gpus, _verdicts

from pytest_gpuprops import facts as F
from pytest_gpuprops import report, report_files
from pytest_gpuprops.assertions import FAIL, Verdict, evaluate
from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.results import SessionResults


def test_markdown_table_reads_back_cell_by_cell():
    md = report_files.markdown(_verdicts(), {"arch": "sm_90", "gpu": {"name": "NVIDIA H200"}})
    header, rows = _parse_github(md)
    assert header == report.HEADERS and rows == EXPECTED_ROWS


def test_markdown_head_and_the_not_passing_section():
    vs = _verdicts()
    meta = {"arch": "sm_90", "date": "2026-01-02", "nvdisasm": "13.5", "compiler": "nvrtc 13.5",
            "gpu": {"name": "NVIDIA H200", "driver_version": "580.1", "pci_bus_id": "0000:01:00.0", "sm_count": 132,
                    "cuda_driver_version": "13.0", "cuda_runtime_version": "13.1", "max_sm_clock_mhz": 1980}}
    lines = report_files.markdown(vs, meta).splitlines()
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
    md = report_files.markdown(_verdicts()[:1], {})
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
    paths = report_files.write_reports(out, SessionResults(vs), fleet, {"arch": "sm_90"})
    assert paths == [out, tmp_path / "deep" / "r.md"]
    expected = SessionResults(vs).to_json({"arch": "sm_90"})
    expected["fleet"] = [fleet[0].as_dict()]
    expected["links"] = {}  # no pair fact among them
    assert json.loads(out.read_text()) == json.loads(json.dumps(expected, default=str))
    written = json.loads(out.read_text())["fleet"][0]
    assert (written["status"], written["verdict"], written["gpu"]) == ("OUTLIER", "OUTLIER (3 GPUs compared)",
                                                                       {"index": 1, "name": "G", "host": "node1"})
    md = paths[1].read_text()
    assert md == report_files.markdown(vs, {"arch": "sm_90"}, fleet)
    # the fleet verdict is counted and listed among what is not passing, but not in the facts table
    assert "gpuprops: 1 FAIL, 1 NOISY, 1 OUTLIER, 2 PASS" in md.splitlines()
    assert fleet[0].message() in md and "| OUTLIER" not in md


def test_markdown_document_exactly():
    v = Verdict("lds", "sm_90", FAIL, "23 ± 0.5 cycles", 30.0, "30.000 cycles", "cycles", "chase", "seeds")
    md = report_files.markdown([v], {"arch": "sm_90", "gpu": {"name": "G"}})
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


def test_write_reports_exact_json_and_deep_folders(tmp_path):
    import datetime
    out = tmp_path / "a" / "b" / "r.json"
    meta = {"date": datetime.date(2026, 1, 2), "arch": "sm_90"}
    report_files.write_reports(out, SessionResults(_verdicts()[:1]), [], meta)
    expected = SessionResults(_verdicts()[:1]).to_json(meta)
    expected["fleet"] = []
    expected["links"] = {}
    assert out.read_text() == json.dumps(expected, indent=1, default=str)
    assert list(json.loads(out.read_text())) == ["schema", "meta", "summary", "facts", "recorded", "plot_points",
                                                 "fleet", "links"]
    assert json.loads(out.read_text())["meta"]["date"] == "2026-01-02"
    assert out.with_suffix(".md").read_text() == report_files.markdown(_verdicts()[:1], meta)


# ----------------------------------------------------------------------------------------------
# the packaged facts through the JSON and the Markdown


def _packaged_verdicts():
    fact = F.load_facts("sm_90")["lds_latency_cycles"]
    return [evaluate(fact, Measurement.given("lds", [23.0, 23.0, 23.01])),
            evaluate(fact, Measurement.given("lds", [30.0, 30.0, 30.0]))]


def test_table_json_and_markdown(tmp_path):
    vs = _packaged_verdicts()
    t = report.table(vs)
    assert "lds_latency_cycles" in t and "PASS" in t and "FAIL" in t and "23 ± 0.25 cycles" in t
    paths = report_files.write_reports(tmp_path / "r.json", SessionResults(vs), [],
                                       {"arch": "sm_90", "gpu": {"name": "NVIDIA H200"}})
    data = json.loads(paths[0].read_text())
    assert data["summary"] == {"FAIL": 1, "PASS": 1} and data["facts"][1]["measured"] == 30.0
    md = paths[1].read_text()
    assert "| lds_latency_cycles" in md and "## Not passing" in md and "30.000 cycles" in md


MD_HEAD = [
    "# gpuprops report: H100 (sm_90)",
    "",
    "- gpu: name=H100",
    "",
]


def test_markdown_with_two_gpus_has_the_per_gpu_table():
    vs = [_on(G0, "lds_latency_cycles", "hwtests/test_smem.py::test_lds[gpu0]", 23.0, text="23.000 cycles"),
          _on(G1, "lds_latency_cycles", "hwtests/test_smem.py::test_lds[gpu1]", 23.1, text="23.100 cycles")]
    assert report_files.markdown(vs, {"arch": "sm_90", "gpu": {"name": "H100"}}).split("\n") == MD_HEAD + [
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
    assert report_files.markdown(vs, {"arch": "sm_90", "gpu": {"name": "H100"}}).split("\n") == MD_HEAD + [
        "gpuprops: 2 PASS",
        "",
        "| fact               | arch   | expected         | measured      | verdict   |",
        "|--------------------|--------|------------------|---------------|-----------|",
        "| lds_latency_cycles | sm_90  | 23 ± 0.25 cycles | 23.000 cycles | PASS      |",
        "| l2_hit_rate        | sm_90  | 23 ± 0.25 cycles | 5.000 %       | PASS      |",
        "",
    ]


def test_markdown_has_the_node_links_section_only_with_pair_verdicts():
    meta = {"arch": "sm_90", "gpu": {"name": "H100"}}
    vs = _three_gpus()
    lines = report_files.markdown(vs, meta).split("\n")
    at = lines.index("## Node links: GPU x GPU")
    tables = report.link_tables(report.link_matrices(vs), fmt="github")
    assert lines[at + 1] == "" and "\n".join(lines[at + 2:]).startswith(tables + "\n")
    assert "| n7:gpu10 | -         | 357.8 FAIL | x          |" in tables.split("\n")
    assert "## Node links: GPU x GPU" not in report_files.markdown(_verdicts(), meta)


def test_write_reports_carries_the_links_and_the_schema_accepts_them(tmp_path):
    from pytest_gpuprops import report_schema, results
    vs = [_pair(P0, P1, 397.69), _pair(P1, P0, 357.8, FAIL)]
    json_path, md_path = report_files.write_reports(tmp_path / "r.json", SessionResults(vs), [], {"arch": "sm_90"})
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
    json_path, _ = report_files.write_reports(tmp_path / "r.json", SessionResults([_pair(P0, P1, 397.69)]), [],
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
