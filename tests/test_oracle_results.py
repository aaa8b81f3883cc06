"""The session-results layer against hand-written inputs: GPU labels and keys as the report prints
them, the MOVED rule at its edge, and every message of a report that cannot be read, in full."""

import json

import pytest

from pytest_gpuprops import results
from pytest_gpuprops.assertions import Verdict
from pytest_gpuprops.results import ResultsError

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
    assert results.compare(base, [verdict(23.25)]) == []  # exactly the tolerance: not moved
    # a fact without a baseline first does not stop the comparison of the next one
    moved = results.compare(base[:1], [verdict(5.0, fact="new", nodeid="hwtests/t.py::test_new"), verdict(23.5)])
    (m,) = moved
    assert (m.status, m.kind, m.attempts, m.flags) == ("MOVED", "baseline", [], [])
    assert m.expected == "baseline 23.000 ± 0.25 cycles"
    assert m.measured_text == "23.500 cycles on n7:gpu1 NVIDIA H100 80GB HBM3 (GPU-1a9fac0f) (moved +0.500)"


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
    p.write_text(json.dumps({"facts": {}}))
    with pytest.raises(ResultsError) as e:
        results.load(p)
    assert str(e.value) == (f"{p} is not a gpuprops report: expected a JSON object with a 'facts' list "
                            "(written by pytest --gpuprops-report)")


def test_a_malformed_verdict_names_the_file(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"facts": [{"fact": "x"}]}))
    with pytest.raises(ResultsError) as e:
        results.load(p)
    assert str(e.value).startswith(f"{p}: a verdict or recorded fact is malformed: ")


def test_a_report_without_meta_reads_with_empty_meta(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"facts": []}))
    res, meta = results.load(p)
    assert meta == {} and res.verdicts == []
