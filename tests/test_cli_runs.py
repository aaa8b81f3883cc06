"""``gpuprops merge`` (cli_runs.py): the fleet's reports as one table, each GPU named by its host, and
the exit status: 1 for a failing fact, 2 for reports without GPU measurements. (``gpuprops baselines``
is read in tests/test_baselines.py, beside the store it reads.)"""

import json

from test_cli import refusal, run

from pytest_gpuprops import results

# ----------------------------------------------------------------------------------------------
# merge


def _verdict(fact, status, measured, gpu, nodeid="hwtests/test_smem.py::test_lds_latency[50]"):
    return {"fact": fact, "arch": "sm_90", "status": status, "expected": "23 ± 0.25 cycles", "measured": measured,
            "measured_text": "-" if measured is None else f"{measured} cycles", "unit": "cycles", "method": "m",
            "source": "s", "kind": "measured" if gpu else "static", "nodeid": nodeid, "gpu": gpu,
            "tolerance": 0.25 if gpu else None}


def _report(path, facts, meta):
    """A report as the plugin writes it at the end of a run that finished: its meta says so (a report
    without a complete ``run`` entry is INCOMPLETE to merge)."""
    meta = dict(meta, run=results.run_status(0, len(facts), len(facts)))
    path.write_text(json.dumps({"schema": "gpuprops-results/1", "meta": meta, "facts": facts}))
    return path.name


STATIC_PASS = _verdict("hmma_issue", "PASS", None, None, "hwtests/test_static.py::test_hmma")
STATIC_FAIL = _verdict("hmma_issue", "FAIL", None, None, "hwtests/test_static.py::test_hmma")


def test_merge_names_each_gpu_by_its_host_the_reports_host_or_the_file(capsys, tmp_path, monkeypatch):
    """A GPU's own host stays; a GPU without one gets its report's meta host, or the report's file name."""
    monkeypatch.chdir(tmp_path)
    a = _report(tmp_path / "a.json", [_verdict("lds", "PASS", 23.0, {"index": 0, "name": "H100"}),
                                      _verdict("lds", "PASS", 23.1, {"index": 1, "name": "H100", "host": "n9"}),
                                      STATIC_PASS], {"host": "nodeA"})
    b = _report(tmp_path / "b.json", [_verdict("lds", "PASS", 23.05, {"index": 0, "name": "H200"})], {})
    status, out, err = run(capsys, "merge", a, b)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "fact    test                  nodeA:gpu0 H100    n9:gpu1 H100    b.json:gpu0 H200",
        "------  --------------------  -----------------  --------------  ------------------",
        "lds     test_lds_latency[50]  23.000 PASS        23.100 PASS     23.050 PASS",
        "gpuprops: 4 PASS",
        "gpuprops outlier check: 3 GPUs, 1 facts compared, 0 outlier(s)",
    ]


def test_merge_exits_1_for_a_failing_fact_without_outliers(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = _report(tmp_path / "a.json", [_verdict("lds", "PASS", 23.0, {"index": 0, "name": "H100"}),
                                      _verdict("lds", "PASS", 23.0, {"index": 1, "name": "H100"}), STATIC_FAIL],
                {"host": "nodeA"})
    status, out, err = run(capsys, "merge", a)
    assert (status, err) == (1, "")
    assert out.splitlines()[-2:] == ["gpuprops: 1 FAIL, 2 PASS",
                                     "gpuprops outlier check: 2 GPUs, 1 facts compared, 0 outlier(s)"]


def test_merge_of_reports_without_gpu_measurements_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = _report(tmp_path / "a.json", [STATIC_PASS], {"host": "nodeA"})
    b = _report(tmp_path / "b.json", [STATIC_FAIL], {})
    assert refusal(capsys, "merge", a, b) == (
        "gpuprops merge: no GPU measurements in a.json, b.json: merge needs reports of GPU runs "
        "(pytest hwtests --gpuprops-report PATH on each node)")
