"""The launches CuPy's kernel call cannot make (driver_launch.py), on the CPU: thread-block clusters
through cuLaunchKernelEx, dynamic shared memory, kernel parameters passed by value as bytes (a
CUtensorMap). The launch structures are cuda-python's own; the driver calls are made against a
stand-in that records them."""

import ctypes
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_gpuprops import driver_launch, measure
from pytest_gpuprops.driver_launch import check_cluster, kernel_params, launch_config, needs_launch_ex
from pytest_gpuprops.kernel_spec import KernelSpec

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import specs_async as sa  # noqa: E402

driver = pytest.importorskip("cuda.bindings.driver")


def _spec(**kw) -> KernelSpec:
    return KernelSpec("cluster_dsmem.cu", "dsmem_chase", **kw)


def _pointed(params, k: int, n: int) -> bytes:
    return ctypes.string_at(params[k], n)


class _DeviceArray:  # what kernel_params reads of a CuPy array
    def __init__(self, ptr):
        self.data = SimpleNamespace(ptr=ptr)


# ----------------------------------------------------------------------------------------------
# kernel parameters


def test_kernel_params_point_at_each_parameter_s_bytes():
    tmap = bytes(range(128))
    params, keep = kernel_params((_DeviceArray(0x7F00_0000_1000), np.uint32(7), np.int32(-2), np.uint64(1 << 40),
                                  tmap))
    assert len(params) == 5 and len(keep) == 5
    assert _pointed(params, 0, 8) == struct.pack("<Q", 0x7F00_0000_1000)
    assert _pointed(params, 1, 4) == struct.pack("<I", 7)
    assert _pointed(params, 2, 4) == struct.pack("<i", -2)
    assert _pointed(params, 3, 8) == struct.pack("<Q", 1 << 40)
    assert _pointed(params, 4, 128) == tmap
    assert all(p % 64 == 0 for p in params)  # a CUtensorMap's alignment, for every parameter


def test_kernel_params_align_as_asked_and_take_a_tensor_map_arg():
    arg = sa.TensorMapArg(b"\x01" * 128)
    arg.tensor = object()
    params, _ = kernel_params((arg,), align=128)
    assert params[0] % 128 == 0 and _pointed(params, 0, 128) == b"\x01" * 128


def test_kernel_params_of_no_arguments_is_an_array_of_one_null():
    params, keep = kernel_params(())
    assert keep == [] and len(params) == 1 and params[0] is None


@pytest.mark.parametrize("bad", [5, 2.0, b"", np.zeros(3, dtype=np.uint32), "x"])
def test_kernel_params_refuse_what_has_no_size_or_no_bytes(bad):
    with pytest.raises(TypeError):
        kernel_params((bad,))


def test_a_python_int_is_refused_with_what_to_give():
    with pytest.raises(TypeError, match=r"kernel parameter 5 \(int\): give a CuPy array, a NumPy scalar"):
        kernel_params((5,))


def test_a_zero_d_array_is_a_scalar():
    params, _ = kernel_params((np.array(3, dtype=np.int16),))
    assert _pointed(params, 0, 2) == struct.pack("<h", 3)


# ----------------------------------------------------------------------------------------------
# which launch, and the cluster shape


def test_only_clusters_and_by_value_bytes_take_the_ex_launch():
    assert not needs_launch_ex(_spec(), (np.uint32(1), _DeviceArray(8)))
    assert needs_launch_ex(_spec(grid=2, cluster=2), ())
    assert needs_launch_ex(_spec(cluster=1), ())
    assert needs_launch_ex(_spec(shared_mem=1024), ())
    assert needs_launch_ex(_spec(), (np.uint32(1), b"\0" * 128))
    assert needs_launch_ex(_spec(), (bytearray(16),))
    assert needs_launch_ex(_spec(), (sa.TensorMapArg(b"\0" * 128),))


@pytest.mark.parametrize("grid, cluster", [(2, 2), (16, 16), (32, 8), (1, 1)])
def test_whole_clusters_of_1_to_16_are_accepted(grid, cluster):
    check_cluster(_spec(grid=grid, cluster=cluster))


@pytest.mark.parametrize("grid, cluster, match", [
    (4, 0, "cluster size must be an integer 1..16, not 0"),
    (17, 17, "cluster size must be an integer 1..16, not 17"),
    (2, True, "not True"),
    (2, 2.0, "not 2.0"),
    (6, 4, "grid 6 is not a whole number of clusters of 4"),
    (1, None, "is not a cluster launch"),
])
def test_impossible_clusters_are_refused(grid, cluster, match):
    with pytest.raises(ValueError, match=match):
        check_cluster(_spec(grid=grid, cluster=cluster))


def test_launch_config_carries_grid_block_stream_and_the_cluster_dimension():
    c = launch_config(driver, _spec(grid=16, block=64, cluster=8, shared_mem=122880), stream=0x1234)
    assert (c.gridDimX, c.gridDimY, c.gridDimZ) == (16, 1, 1)
    assert (c.blockDimX, c.blockDimY, c.blockDimZ) == (64, 1, 1)
    assert c.sharedMemBytes == 122880 and int(c.hStream) == 0x1234
    assert c.numAttrs == 1
    (attr,) = c.attrs
    assert attr.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    dim = attr.value.clusterDim
    assert (dim.x, dim.y, dim.z) == (8, 1, 1)


def test_launch_config_without_a_cluster_has_no_attribute():
    c = launch_config(driver, _spec(grid=3, block=32))
    assert c.numAttrs == 0 and list(c.attrs) == [] and c.gridDimX == 3 and c.sharedMemBytes == 0


def test_launch_config_refuses_a_grid_of_partial_clusters():
    with pytest.raises(ValueError, match="not a whole number of clusters"):
        launch_config(driver, _spec(grid=3, cluster=2))


# ----------------------------------------------------------------------------------------------
# the Ex launch and the cluster check, against a stand-in driver


class _Driver:
    """cuda-python's driver module for its types; the calls recorded and answered as set."""

    def __init__(self, launch=0, set_attr=0, occupancy=(0, 4)):
        self.calls = []
        self._launch, self._set_attr, self._occupancy = launch, set_attr, occupancy

    def __getattr__(self, name):
        return getattr(driver, name)

    def cuFuncSetAttribute(self, f, attr, value):
        self.calls.append(("set", int(f), attr, value))
        return (self._set_attr,)

    def cuLaunchKernelEx(self, config, f, params, extra):
        ptrs = (ctypes.c_void_p * 3).from_address(params)
        self.calls.append(("launch", int(f), config.gridDimX, config.blockDimX, config.numAttrs,
                           ctypes.string_at(ptrs[0], 8), ctypes.string_at(ptrs[1], 4), ctypes.string_at(ptrs[2], 128)))
        return (self._launch,)

    def cuOccupancyMaxActiveClusters(self, f, config):
        self.calls.append(("occupancy", int(f), config.attrs[0].value.clusterDim.x))
        return self._occupancy

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_INVALID_CLUSTER_SIZE")

    def cuGetErrorString(self, err):
        return (0, b"invalid cluster size")


def _runner(monkeypatch, fake):
    """A Runner whose build and load stand in for a GPU's, on the stand-in driver: its cluster check is
    driver_launch.cluster_refusal of the kernel it loaded."""
    monkeypatch.setattr(driver_launch, "cuda_driver", lambda: fake)
    r = object.__new__(measure.Runner)
    r.build = lambda spec: (b"cubin", [])
    r.load = lambda cubin, kernel: SimpleNamespace(ptr=0xF00)
    return r


NON_PORTABLE = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
MAX_SHARED = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


@pytest.mark.parametrize("cluster, shared_mem, allowed", [
    (2, 0, []),
    (8, 48 * 1024, []),
    (16, 0, [("set", 0xF00, NON_PORTABLE, 1)]),
    (2, 48 * 1024 + 1, [("set", 0xF00, MAX_SHARED, 48 * 1024 + 1)]),
    (16, 122880, [("set", 0xF00, NON_PORTABLE, 1), ("set", 0xF00, MAX_SHARED, 122880)]),
])
def test_ex_launch_allows_what_it_needs_first_and_passes_the_parameters(monkeypatch, cluster, shared_mem, allowed):
    fake = _Driver()
    monkeypatch.setattr(driver_launch, "cuda_driver", lambda: fake)
    tmap = bytes(range(128))
    driver_launch.launch_ex(SimpleNamespace(ptr=0xF00),
                            _spec(grid=cluster, block=32, cluster=cluster, shared_mem=shared_mem),
                            (_DeviceArray(0xABC0), np.uint32(1), tmap))
    launch = ("launch", 0xF00, cluster, 32, 1, struct.pack("<Q", 0xABC0), struct.pack("<I", 1), tmap)
    assert fake.calls == allowed + [launch]


def test_a_refused_shared_memory_size_is_a_launch_error(monkeypatch):
    monkeypatch.setattr(driver_launch, "cuda_driver", lambda: _Driver(set_attr=1))
    with pytest.raises(driver_launch.KernelLaunchError, match="refused 65536 bytes of dynamic shared memory"):
        driver_launch.launch_ex(SimpleNamespace(ptr=1), _spec(shared_mem=65536),
                                (_DeviceArray(0), np.uint32(1), b"\0" * 128))


def test_ex_launch_failure_names_the_kernel_and_the_error(monkeypatch):
    monkeypatch.setattr(driver_launch, "cuda_driver", lambda: _Driver(launch=1))
    with pytest.raises(driver_launch.KernelLaunchError, match=r"dsmem_chase .* cluster=2: cuLaunchKernelEx failed: "
                                                              r"CUDA_ERROR_INVALID_CLUSTER_SIZE \(invalid cluster size\)"):
        driver_launch.launch_ex(SimpleNamespace(ptr=1), _spec(grid=2, cluster=2),
                                (_DeviceArray(0), np.uint32(1), b"\0" * 128))


def test_cluster_refusal_says_why_or_nothing(monkeypatch):
    spec = _spec(grid=16, block=32, cluster=16)
    assert _runner(monkeypatch, _Driver()).cluster_refusal(spec) is None
    refused = _runner(monkeypatch, _Driver(set_attr=1)).cluster_refusal(spec)
    assert refused.startswith("cluster size 16 is non-portable (over 8) and the driver refused a non-portable "
                              "cluster size for this kernel: CUDA_ERROR_INVALID_CLUSTER_SIZE")
    big = _runner(monkeypatch, _Driver(set_attr=1)).cluster_refusal(_spec(grid=2, cluster=2, shared_mem=65536))
    assert big.startswith("cluster size 2: the driver refused 65536 bytes of dynamic shared memory")
    none_fit = _runner(monkeypatch, _Driver(occupancy=(0, 0))).cluster_refusal(spec)
    assert none_fit == ("no cluster of 16 CTAs x 32 threads of dsmem_chase fits on this GPU "
                        "(cuOccupancyMaxActiveClusters = 0)")
    with_smem = _runner(monkeypatch, _Driver(occupancy=(0, 0))).cluster_refusal(
        _spec(grid=16, cluster=16, shared_mem=122880))
    assert with_smem.startswith("no cluster of 16 CTAs x 32 threads x 122880 bytes of shared memory of dsmem_chase")
    failed = _runner(monkeypatch, _Driver(occupancy=(1, 0))).cluster_refusal(_spec(grid=4, cluster=4))
    assert failed.startswith("the driver cannot place clusters of 4 CTAs x 32 threads for dsmem_chase: "
                             "cuOccupancyMaxActiveClusters failed: CUDA_ERROR_INVALID_CLUSTER_SIZE")


def test_cluster_refusal_of_a_portable_size_sets_no_attribute(monkeypatch):
    fake = _Driver()
    assert _runner(monkeypatch, fake).cluster_refusal(_spec(grid=8, cluster=8)) is None
    assert fake.calls == [("occupancy", 0xF00, 8)]
