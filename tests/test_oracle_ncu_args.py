"""The CPU side of the ncu path, with hand-written inputs: ncu's CSV as it prints it (one row per
launch and metric, IDs in launch order, thousands separators) read back into per-launch values, and
a spec's arguments encoded for the launcher process (with a stand-in CuPy module)."""

import sys
import types

import pytest

from pytest_gpuprops import measure
from pytest_gpuprops.measure import KernelSpec, NcuUnavailable

PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
INST = "smsp__inst_executed.sum"
HEADER = '"ID","Process ID","Process Name","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'


def row(launch_id, metric, value):
    return f'"{launch_id}","4242","python3","hmma_16816","Command line profiler metrics","{metric}","","{value}"\n'


def test_rows_become_one_dict_per_launch_in_id_order():
    body = HEADER + row(1, PIPE, "49.72") + row(0, PIPE, "24.99") + row(0, INST, "1,024") + row(1, INST, "2,048") \
        + row(0, "some__other_metric", "7")
    assert measure.parse_ncu_csv(body, [PIPE, INST], 2) == [{PIPE: 24.99, INST: 1024.0}, {PIPE: 49.72, INST: 2048.0}]


def test_a_value_that_is_not_a_number_is_refused_by_name():
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(HEADER + row(0, PIPE, "n/a"), [PIPE], 1)
    assert str(e.value) == f"ncu printed 'n/a' for {PIPE}; expected a number"


@pytest.mark.parametrize("launches, expected", [(2, "ncu profiled 1 launches, expected 2"),
                                                (0, "ncu profiled 1 launches, expected 0")])
def test_the_launch_count_must_match(launches, expected):
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(HEADER + row(0, PIPE, "25"), [PIPE], launches)
    assert str(e.value) == expected


def test_rows_of_other_metrics_before_the_asked_ones_are_passed_over():
    body = HEADER + row(0, "some__other_metric", "7") + row(0, PIPE, "25") + row(1, "launch__grid_size", "1") \
        + row(1, PIPE, "50")
    assert measure.parse_ncu_csv(body, [PIPE], 2) == [{PIPE: 25.0}, {PIPE: 50.0}]


def test_every_metric_missing_for_a_launch_is_named():
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(HEADER + row(0, "some__other_metric", "7"), [PIPE, INST], 1)
    assert str(e.value) == "ncu profiled 0 launches, expected 1"
    body = HEADER + row(0, PIPE, "25") + row(1, PIPE, "50") + row(1, INST, "1") + row(1, "launch__grid_size", "1")
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(body, [PIPE, INST, "launch__grid_size"], 2)
    assert str(e.value) == f"ncu did not report {INST}, launch__grid_size for launch 0 on this GPU"


def test_a_metric_missing_for_one_launch_is_named():
    body = HEADER + row(0, PIPE, "25") + row(0, INST, "1") + row(1, PIPE, "50")
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(body, [PIPE, INST], 2)
    assert str(e.value) == f"ncu did not report {INST} for launch 1 on this GPU"


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
    assert measure.encode_args(spec) == [
        {"array": "<u4", "values": [1, 2, 3]},
        {"array": "<f4", "fill": 0.5, "size": 4},
        {"array": "<u4", "values": []},
        {"array": "<i8", "fill": 9, "size": 1},
        {"scalar": "int32", "value": 64},
        {"scalar": "int", "value": 7},
    ]


def test_a_spec_without_arguments_encodes_to_nothing():
    assert measure.encode_args(KernelSpec("k.cu", "k")) == []


def test_without_cupy_no_gpu_is_visible(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert measure.visible_gpu_count() == 0


def test_the_visible_gpu_count_is_the_drivers(fake_cupy):
    fake_cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 3))
    assert measure.visible_gpu_count() == 3


def test_a_gpu_the_compiler_cannot_build_for_is_named_by_its_own_arch(fake_cupy):
    """GPU 1 is the new one; GPU 0 (the default index) is not asked about."""
    arches = {0: "90", 1: "999"}
    fake_cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 2),
                                           Device=lambda i: types.SimpleNamespace(compute_capability=arches[i]))
    reason = measure.gpu_unavailable_reason(1)
    assert reason.startswith("GPU 1 is sm_999, which cannot be compiled for here: ")
    assert measure.gpu_unavailable_reason(0) is None
