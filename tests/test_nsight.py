"""The CPU side of the Nsight Compute path (nsight.py): where ncu is found, ncu's CSV as it prints it
read back into per-launch values, a spec's arguments encoded for the profiled process (with a
stand-in CuPy module), the command line that names the GPU's lock, and a profile started ahead
that leaves the lock to the profiled process."""

import sys
import types
from pathlib import Path

import pytest

from pytest_gpuprops import gpulock, nsight
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.nsight import NcuUnavailable

# ----------------------------------------------------------------------------------------------
# finding ncu


def test_ncu_is_found_from_the_environment_or_reported_missing(monkeypatch):
    monkeypatch.setenv("GPUPROPS_NCU", "/opt/x/ncu")
    assert nsight.find_ncu() == "/opt/x/ncu" and nsight.ncu_unavailable_reason() is None
    monkeypatch.delenv("GPUPROPS_NCU")
    monkeypatch.setenv("PATH", "/nonexistent")
    import glob
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    assert nsight.find_ncu() is None
    assert "Nsight Compute (ncu) is not on PATH" in nsight.ncu_unavailable_reason()
    monkeypatch.setattr(glob, "glob", lambda pattern: ["/usr/local/cuda-12/bin/ncu", "/usr/local/cuda-13/bin/ncu"]
                        if pattern.startswith("/usr/local") else [])
    assert nsight.find_ncu() == "/usr/local/cuda-13/bin/ncu"  # the newest


def test_ncu_search_order(monkeypatch, tmp_path):
    import glob
    monkeypatch.delenv("GPUPROPS_NCU", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").write_text("")
    (bin_dir / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert nsight.find_ncu() == str(bin_dir / "ncu")
    monkeypatch.setenv("PATH", "/nonexistent")
    opt = ["/opt/nvidia/nsight-compute/2025.1/ncu", "/opt/nvidia/nsight-compute/2026.3/ncu"]
    monkeypatch.setattr(glob, "glob", lambda p: opt if p == "/opt/nvidia/nsight-compute/*/ncu" else ["/usr/x/ncu"])
    assert nsight.find_ncu() == "/opt/nvidia/nsight-compute/2026.3/ncu"  # the newest Nsight Compute
    assert nsight.ncu_unavailable_reason() is None
    monkeypatch.setattr(glob, "glob", lambda p: [])
    assert nsight.ncu_unavailable_reason() == "Nsight Compute (ncu) is not on PATH (set GPUPROPS_NCU to its path)"


# ----------------------------------------------------------------------------------------------
# ncu's CSV read back


PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
INST = "smsp__inst_executed.sum"
HEADER = '"ID","Process ID","Process Name","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'


def row(launch_id, metric, value):
    return f'"{launch_id}","4242","python3","hmma_16816","Command line profiler metrics","{metric}","","{value}"\n'


def test_rows_become_one_dict_per_launch_in_id_order():
    body = HEADER + row(1, PIPE, "49.72") + row(0, PIPE, "24.99") + row(0, INST, "1,024") + row(1, INST, "2,048") \
        + row(0, "some__other_metric", "7")
    assert nsight.parse_ncu_csv(body, [PIPE, INST], 2) == [{PIPE: 24.99, INST: 1024.0}, {PIPE: 49.72, INST: 2048.0}]


def test_a_value_that_is_not_a_number_is_refused_by_name():
    with pytest.raises(NcuUnavailable) as e:
        nsight.parse_ncu_csv(HEADER + row(0, PIPE, "n/a"), [PIPE], 1)
    assert str(e.value) == f"ncu printed 'n/a' for {PIPE}; expected a number"


@pytest.mark.parametrize("launches, expected", [(2, "ncu profiled 1 launches, expected 2"),
                                                (0, "ncu profiled 1 launches, expected 0")])
def test_the_launch_count_must_match(launches, expected):
    with pytest.raises(NcuUnavailable) as e:
        nsight.parse_ncu_csv(HEADER + row(0, PIPE, "25"), [PIPE], launches)
    assert str(e.value) == expected


def test_rows_of_other_metrics_before_the_asked_ones_are_passed_over():
    body = HEADER + row(0, "some__other_metric", "7") + row(0, PIPE, "25") + row(1, "launch__grid_size", "1") \
        + row(1, PIPE, "50")
    assert nsight.parse_ncu_csv(body, [PIPE], 2) == [{PIPE: 25.0}, {PIPE: 50.0}]


def test_every_metric_missing_for_a_launch_is_named():
    with pytest.raises(NcuUnavailable) as e:
        nsight.parse_ncu_csv(HEADER + row(0, "some__other_metric", "7"), [PIPE, INST], 1)
    assert str(e.value) == "ncu profiled 0 launches, expected 1"
    body = HEADER + row(0, PIPE, "25") + row(1, PIPE, "50") + row(1, INST, "1") + row(1, "launch__grid_size", "1")
    with pytest.raises(NcuUnavailable) as e:
        nsight.parse_ncu_csv(body, [PIPE, INST, "launch__grid_size"], 2)
    assert str(e.value) == f"ncu did not report {INST}, launch__grid_size for launch 0 on this GPU"


def test_a_metric_missing_for_one_launch_is_named():
    body = HEADER + row(0, PIPE, "25") + row(0, INST, "1") + row(1, PIPE, "50")
    with pytest.raises(NcuUnavailable) as e:
        nsight.parse_ncu_csv(body, [PIPE, INST], 2)
    assert str(e.value) == f"ncu did not report {INST} for launch 1 on this GPU"


# ----------------------------------------------------------------------------------------------
# a spec's arguments for the profiled process


class _FakeArray:
    def __init__(self, values, dtype):
        self._values, self.dtype = list(values), types.SimpleNamespace(str=dtype)

    def get(self):
        values = self._values
        return types.SimpleNamespace(ravel=lambda: types.SimpleNamespace(tolist=lambda: list(values)))


class _FakeScalar:
    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


class int32(_FakeScalar):  # noqa: N801 -- the type name is what encode_args records
    pass


@pytest.fixture
def fake_cupy(monkeypatch):
    cp = types.ModuleType("cupy")
    cp.ndarray = _FakeArray
    cp.array = _FakeArray
    monkeypatch.setitem(sys.modules, "cupy", cp)
    return cp


def test_arguments_are_encoded_as_values_fills_and_scalars(fake_cupy):
    spec = KernelSpec("k.cu", "k", args=lambda cp: (cp.array([1, 2, 3], "<u4"), cp.array([0.5] * 4, "<f4"),
                                                     cp.array([], "<u4"), cp.array([9], "<i8"), int32(64), 7))
    assert nsight.encode_args(spec) == [
        {"array": "<u4", "values": [1, 2, 3]},
        {"array": "<f4", "fill": 0.5, "size": 4},
        {"array": "<u4", "values": []},
        {"array": "<i8", "fill": 9, "size": 1},
        {"scalar": "int32", "value": 64},
        {"scalar": "int", "value": 7},
    ]


def test_a_spec_without_arguments_encodes_to_nothing():
    assert nsight.encode_args(KernelSpec("k.cu", "k")) == []


# ----------------------------------------------------------------------------------------------
# the profile and the GPU's lock


def test_an_ncu_profile_started_ahead_leaves_the_gpu_lock_to_the_profiled_process(monkeypatch, tmp_path):
    """nsight.NcuJob: ncu starts in the background without the GPU's lock (the process it profiles
    takes it around its launches: pytest_gpuprops.launch), result() waits for the profile, and ncu's
    failure reaches the test that asks."""
    import threading
    from types import SimpleNamespace

    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    release = threading.Event()
    monkeypatch.setattr(nsight, "_ncu_start", lambda runner, specs, metrics: ["ncu", metrics])

    def finish(cmd, metrics, launches, timeout_s):
        assert cmd == ["ncu", metrics]
        release.wait(10)
        if metrics == ["gone"]:
            raise nsight.NcuUnavailable("counters gone")
        return [{"a": float(n)} for n in range(launches)]
    monkeypatch.setattr(nsight, "_ncu_finish", finish)
    runner = SimpleNamespace(info=SimpleNamespace(index=3))
    specs = [KernelSpec("x.cu", "k"), KernelSpec("x.cu", "k2")]
    job = nsight.NcuJob(runner, specs, ["a"])
    assert job.key == nsight.ncu_key(specs, ["a"]) != nsight.ncu_key(specs[:1], ["a"])
    with gpulock.gpu_lock(3, timeout=0.5):  # free while ncu starts: measurements go on beside it
        assert job._thread.is_alive()
    release.set()
    assert job.result() == [{"a": 0.0}, {"a": 1.0}]
    failing = nsight.NcuJob(runner, specs, ["gone"])
    with pytest.raises(nsight.NcuUnavailable, match="counters gone"):
        failing.result()


def test_the_process_ncu_profiles_is_told_the_gpus_lock_and_its_launches(monkeypatch, tmp_path):
    """nsight._ncu_start names GPU ``index``'s lock file (gpulock.gpu_lock's) in the job it hands
    pytest_gpuprops.launch, beside one launch per spec, its cubin written where the runner keeps files."""
    from types import SimpleNamespace

    from pytest_gpuprops import launch
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(nsight, "find_ncu", lambda: "/opt/ncu")
    runner = SimpleNamespace(info=SimpleNamespace(index=2), _tmp=str(tmp_path),
                             build=lambda spec: (spec.kernel.encode(), []))
    cmd = nsight._ncu_start(runner, [KernelSpec("x.cu", "k", grid=2, block=64),
                                      KernelSpec("x.cu", "k2")], ["m1", "m2"])
    assert cmd[:8] == ["/opt/ncu", "--clock-control", "none", "--csv", "--print-units", "base", "--metrics", "m1,m2"]
    assert cmd[cmd.index("-k") + 1] == "regex:^(k|k2)$" and cmd[-2:-1] == ["pytest_gpuprops.launch"]
    lock, launches = launch.parse(cmd[-1])
    assert lock == str(tmp_path / "gpuprops-gpu2.lock") == gpulock.gpu_lock(2).lock_file
    assert [(L["kernel"], L["grid"], L["block"], L["device"]) for L in launches] == [("k", 2, 64, 2), ("k2", 1, 32, 2)]
    assert [Path(L["cubin"]).read_bytes() for L in launches] == [b"k", b"k2"]
