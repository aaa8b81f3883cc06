"""Reading NVML for the health checks (pytest_gpuprops/health.py) from a stand-in (tests/nvml_stand_in.py):
each query made once, only the asked checks read, the link sampled under a load only for the link
checks, older bindings' names, and the stand-in's names against the installed nvidia-ml-py."""

import pytest
from nvml_stand_in import FakeNvml, judge

from pytest_gpuprops import health
from pytest_gpuprops.assertions import FAIL


def test_each_nvml_query_is_made_once_and_only_the_asked_checks_read():
    nvml = FakeNvml()
    health.read_health(nvml, "handle")
    assert nvml.calls.count("nvmlDeviceGetEccMode") == 1  # three checks use it
    assert nvml.calls.count("nvmlDeviceGetVirtualizationMode") == 1
    assert "nvmlDeviceGetRetiredPagesPendingStatus" not in nvml.calls  # rows are remapped: no fallback
    nvml = FakeNvml()
    (r,) = health.read_health(nvml, "handle", ["health_compute_mode"])
    assert nvml.calls == ["nvmlDeviceGetComputeMode"] and r.values == {"nvmlDeviceGetComputeMode": 0}
    with pytest.raises(ValueError, match="unknown health check 'health_x'; the checks are health_ecc_mode, "):
        health.read_health(nvml, "handle", ["health_x"])


def test_the_load_runs_only_for_the_link_checks_and_its_readings_are_kept_with_them():
    ran = []

    def load(sample):
        ran.append(1)
        sample()
        return "copies"
    nvml = FakeNvml()
    (r,) = health.read_health(nvml, "handle", ["health_compute_mode"], load=load)
    assert ran == [] and nvml.calls == ["nvmlDeviceGetComputeMode"]
    width, gen = health.read_health(nvml, "handle", ["health_pcie_link_width", "health_pcie_link_gen"], load=load)
    assert ran == [1]  # one load serves both checks
    assert width.values[health.WIDTH_UNDER_LOAD] == [16] and width.values[health.LOAD] == "copies"
    assert gen.values[health.GEN_UNDER_LOAD] == [5] and health.WIDTH_UNDER_LOAD not in gen.values


def test_older_bindings_read_the_throttle_reasons_instead():
    nvml = FakeNvml(missing=["nvmlDeviceGetCurrentClocksEventReasons"], events=0x2, clock_sm=1000)
    got = judge(nvml)
    assert got["health_locked_clocks"].status == FAIL
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in nvml.calls


def test_the_stand_in_matches_the_installed_pynvml():
    """Names, constant values and exception classes the stand-in copies, and every NVML function health.py
    calls, as the installed nvidia-ml-py has them."""
    pynvml = pytest.importorskip("pynvml")
    for name in dir(FakeNvml):
        if name.startswith("NVML_"):
            assert getattr(pynvml, name) == getattr(FakeNvml, name), name
        elif name.startswith("NVMLError"):
            assert issubclass(getattr(pynvml, name), pynvml.NVMLError), name
        elif name.startswith("nvml"):
            assert callable(getattr(pynvml, name)), name
    nvml = FakeNvml()
    health.read_health(nvml, "handle")
    assert set(nvml.calls) <= {n for n in dir(pynvml) if n.startswith("nvml")}
    assert all(getattr(pynvml, f"nvmlClocksEventReason{n}") == b for b, n in [
        (0x1, "GpuIdle"), (0x2, "ApplicationsClocksSetting"), (0x4, "SwPowerCap"), (0x8, "HwSlowdown"),
        (0x20, "SwThermalSlowdown"), (0x40, "HwThermalSlowdown"), (0x80, "HwPowerBrakeSlowdown")])
    assert [pynvml.NVML_COMPUTEMODE_DEFAULT, pynvml.NVML_COMPUTEMODE_PROHIBITED,
            pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS] == [0, 2, 3]
    assert pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH == 1
