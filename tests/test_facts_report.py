import json

import pytest

from pytest_gpuprops import facts as F
from pytest_gpuprops import report
from pytest_gpuprops.assertions import evaluate
from pytest_gpuprops.measure import Measurement
from pytest_gpuprops.results import SessionResults


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_packaged_facts_parse_with_method_and_source(arch):
    f = F.load_facts(arch)
    assert f.arch == arch and len(f) >= 2
    assert all(x.method and x.source and x.unit for x in f.values())


def test_unknown_arch_says_how_to_record():
    with pytest.raises(F.MissingFacts, match="--gpuprops-record"):
        F.load_facts("sm_75")


def test_record_round_trip_and_refusal_to_overwrite(tmp_path):
    p = tmp_path / "sm_90.toml"
    fact = F.Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method='chase "x"', value=23.0,
                  source=F.provenance("NVIDIA H200", "580.159.04", "13.0"), tolerance_abs=0.25)
    F.write_facts(p, "sm_90", [fact], meta={"gpu": "NVIDIA H200"})
    back = F.load_facts("sm_90", p)
    assert back["lds_latency_cycles"] == fact and back.meta["gpu"] == "NVIDIA H200"
    with pytest.raises(F.FactsError, match="--force"):
        F.write_facts(p, "sm_90", [fact])
    F.write_facts(p, "sm_90", [fact], force=True)


def test_malformed_facts_name_the_file_and_key(tmp_path):
    p = tmp_path / "sm_90.toml"
    p.write_text('arch = "sm_90"\n[x]\nvalue = 1\nunit = "c"\n')
    with pytest.raises(F.FactsError, match=r"\[x\] lacks method, source"):
        F.load_facts("sm_90", p)
    p.write_text('arch = "sm_86"\n')
    with pytest.raises(F.MissingFacts, match="is for sm_86"):
        F.load_facts("sm_90", p)


def _verdicts():
    fact = F.load_facts("sm_90")["lds_latency_cycles"]
    return [evaluate(fact, Measurement.given("lds", [23.0, 23.0, 23.01])),
            evaluate(fact, Measurement.given("lds", [30.0, 30.0, 30.0]))]


def test_table_json_and_markdown(tmp_path):
    vs = _verdicts()
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
