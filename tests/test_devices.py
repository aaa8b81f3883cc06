"""GPU discovery (devices.py) with a stand-in CuPy module: why a GPU cannot be used (the one-line
skip reason), how many are visible, what a GpuInfo carries, and the spelling of versions and UUIDs."""

import sys
import types

import pytest

from pytest_gpuprops import devices


def test_driver_version_numbers():
    assert devices._ver(13000) == "13.0"
    assert devices._ver(12040) == "12.4"
    assert devices._ver(11080) == "11.8"


def test_gpu_info_as_dict():
    info = devices.GpuInfo(1, "G", "sm_90", 132, "580.1", "13.0", "13.1", "0000:01:00.0", 1980)
    assert info.as_dict() == {"index": 1, "name": "G", "arch": "sm_90", "sm_count": 132, "driver_version": "580.1",
                              "cuda_driver_version": "13.0", "cuda_runtime_version": "13.1",
                              "pci_bus_id": "0000:01:00.0", "max_sm_clock_mhz": 1980, "uuid": "", "host": "",
                              "vbios_version": ""}
    node = devices.GpuInfo(2, "G", "sm_90", 132, "580.1", "13.0", "13.1", "0000:02:00.0", None, "GPU-abc", "node1")
    assert node.as_dict()["uuid"] == "GPU-abc" and node.as_dict()["host"] == "node1"
    # what a verdict carries to say which GPU measured it
    assert node.identity() == {"index": 2, "name": "G", "uuid": "GPU-abc", "pci_bus_id": "0000:02:00.0",
                               "host": "node1", "driver_version": "580.1", "cuda_driver_version": "13.0",
                               "cuda_runtime_version": "13.1", "vbios_version": "", "max_sm_clock_mhz": None}


def _fake_cupy(monkeypatch, count, cc="90"):
    """A stand-in CuPy that sees ``count`` GPUs, each of compute capability ``cc`` (as CuPy spells it)."""
    rt = types.SimpleNamespace()
    if isinstance(count, Exception):
        def get():
            raise count
        rt.getDeviceCount = get
    else:
        rt.getDeviceCount = lambda: count
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=rt, Device=lambda index: types.SimpleNamespace(compute_capability=cc))
    monkeypatch.setitem(sys.modules, "cupy", fake)


def test_gpu_unavailable_reasons(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    r = devices.gpu_unavailable_reason()
    assert r.startswith("CuPy is not importable (ModuleNotFoundError") and r.endswith("install pytest-gpuprops[cuda13] or [cuda12]")
    _fake_cupy(monkeypatch, RuntimeError("cudaErrorNoDevice\nsecond line"))
    assert devices.gpu_unavailable_reason() == "no CUDA driver or GPU (RuntimeError: cudaErrorNoDevice)"
    _fake_cupy(monkeypatch, RuntimeError(""))
    assert devices.gpu_unavailable_reason() == "no CUDA driver or GPU (RuntimeError: )"
    _fake_cupy(monkeypatch, 0)
    assert devices.gpu_unavailable_reason() == "no CUDA GPU visible"
    _fake_cupy(monkeypatch, 2)
    assert devices.gpu_unavailable_reason(2) == "--gpu 2 asked for but only 2 GPU(s) are visible"
    assert devices.gpu_unavailable_reason(1) is None
    assert devices.gpu_unavailable_reason() is None
    # a GPU nothing can be compiled for here: every fact would skip with this
    _fake_cupy(monkeypatch, 1, cc="70")
    assert devices.gpu_unavailable_reason() == (
        "GPU 0 is sm_70, which cannot be compiled for here: arch 'sm_70' is older than sm_75: nvdisasm 13 (pip "
        "package nvidia-cuda-nvdisasm) refuses sm_70 and older, so its SASS cannot be read or verified. Use sm_75 or "
        "newer (tested: sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a).")


def test_the_default_gpu_is_index_0(monkeypatch):
    _fake_cupy(monkeypatch, 1)
    assert devices.gpu_unavailable_reason() is None
    assert devices.gpu_unavailable_reason(1) == "--gpu 1 asked for but only 1 GPU(s) are visible"


@pytest.mark.parametrize("raw, uuid", [
    (bytes(range(16)), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"),
    (bytes(range(17)), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"),  # CUDA's field: the first 16 bytes
    ("".join(map(chr, range(0xF0, 0x100))), "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff"),  # bytes read as a str
    (b"\x01\x02", ""), (b"", ""), (None, ""),
])
def test_cuda_uuid_bytes_are_spelled_as_nvidia_smi_spells_them(raw, uuid):
    assert devices._uuid(raw) == uuid


# ----------------------------------------------------------------------------------------------
# with a stand-in CuPy module


@pytest.fixture
def fake_cupy(monkeypatch):
    cp = types.ModuleType("cupy")
    monkeypatch.setitem(sys.modules, "cupy", cp)
    return cp


def test_without_cupy_no_gpu_is_visible(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert devices.visible_gpu_count() == 0


def test_the_visible_gpu_count_is_the_drivers(fake_cupy):
    fake_cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 3))
    assert devices.visible_gpu_count() == 3


def test_a_gpu_the_compiler_cannot_build_for_is_named_by_its_own_arch(fake_cupy):
    """GPU 1 is the new one; GPU 0 (the default index) is not asked about."""
    arches = {0: "90", 1: "999"}
    fake_cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 2),
                                           Device=lambda i: types.SimpleNamespace(compute_capability=arches[i]))
    reason = devices.gpu_unavailable_reason(1)
    assert reason.startswith("GPU 1 is sm_999, which cannot be compiled for here: ")
    assert devices.gpu_unavailable_reason(0) is None


def test_the_cpus_near_a_gpu_come_from_nvmls_affinity_mask_word_by_word():
    # a two-socket host, the GPU on the second socket's CPUs 32-63 and 96-127 (two 64-bit words)
    mask = [0xFFFFFFFF00000000, 0xFFFFFFFF00000000]
    cpus = devices.cpus_of_mask(mask)
    assert cpus == set(range(32, 64)) | set(range(96, 128))
    assert devices.cpu_list(cpus) == "32-63,96-127"
    assert devices.cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8" and devices.cpu_list(None) == "any"
    assert devices.cpus_of_mask([0]) == set() and devices.cpus_of_mask([1 << 63]) == {63}


def test_on_cpus_runs_the_block_on_the_cpus_given_and_gives_back_those_allowed_before():
    import os
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with devices.on_cpus(one):
        assert os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError), devices.on_cpus(one):
        raise RuntimeError("a failed copy")
    assert os.sched_getaffinity(0) == before
    with devices.on_cpus(None):  # NVML said nothing: the thread stays where it was allowed
        assert os.sched_getaffinity(0) == before
