"""ncu_metrics for several launches: one ncu process, results in launch order (no GPU: ncu faked)."""

import contextlib
import json
import subprocess
import types

import pytest

from pytest_gpuprops import measure

CSV = '''==PROF== Connected to process
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","hmma_16816","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","a","cycle","100"
"0","1","python","h","hmma_16816","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","b","inst","1,000"
"1","1","python","h","hmma_16816","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","a","cycle","300"
"1","1","python","h","hmma_16816","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","b","inst","1,000"
'''


@pytest.fixture
def fake(monkeypatch, tmp_path):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return types.SimpleNamespace(returncode=0, stdout=CSV, stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(measure, "find_ncu", lambda: "ncu")
    monkeypatch.setattr(measure, "gpu_lock", lambda index: contextlib.nullcontext())
    runner = types.SimpleNamespace(build=lambda spec: (b"cubin-" + str(spec.defines).encode(), []), _tmp=str(tmp_path),
                                   info=types.SimpleNamespace(index=0))
    return runner, calls


def _spec(ilp):
    return measure.KernelSpec("hmma_16816.cu", "hmma_16816", {"ILP": ilp}, block=128)


def test_several_launches_share_one_ncu_process(fake):
    runner, calls = fake
    got = measure.ncu_metrics(runner, [_spec(1), _spec(3)], ["a", "b"])
    assert got == [{"a": 100.0, "b": 1000.0}, {"a": 300.0, "b": 1000.0}]
    assert len(calls) == 1
    launches = json.loads(calls[0][-1])
    assert [x["kernel"] for x in launches] == ["hmma_16816", "hmma_16816"]
    assert launches[0]["cubin"] != launches[1]["cubin"]
    assert calls[0][calls[0].index("-k") + 1] == "hmma_16816"


def test_one_spec_still_returns_one_dict_and_a_count_mismatch_is_refused(fake):
    runner, calls = fake
    with pytest.raises(measure.NcuUnavailable, match="2 profiled launches; 1 were made"):
        measure.ncu_metrics(runner, _spec(1), ["a"])
    with pytest.raises(measure.NcuUnavailable, match="2 profiled launches; 3 were made"):
        measure.ncu_metrics(runner, [_spec(1), _spec(2), _spec(3)], ["a"])
    assert isinstance(json.loads(calls[0][-1]), dict)  # a single launch is passed as before
