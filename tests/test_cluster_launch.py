"""CPU tests of the launches CuPy's kernel call cannot make (pytest_gpuprops.measure): thread-block
clusters through cuLaunchKernelEx, kernel parameters passed by value as bytes (a CUtensorMap), the
per-block span of a cluster launch, and the tensor-map request of hwtests/specs_async.py. The driver
calls are made against a stand-in that records them; the launch structures are cuda-python's own."""

import ctypes
import json
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_gpuprops import measure
from pytest_gpuprops.measure import (
    KernelSpec,
    check_cluster,
    kernel_params,
    launch_config,
    launch_value,
    needs_launch_ex,
)

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


def test_the_label_names_the_cluster_and_shared_memory_only_where_given():
    base = "dsmem_chase from cluster_dsmem.cu {} grid=4 block=32"
    assert _spec(grid=4, block=32).label() == base
    assert _spec(grid=4, block=32, cluster=4).label() == base + " cluster=4"
    assert _spec(grid=4, block=32, shared_mem=100).label() == base + " shared_mem=100"
    assert _spec(grid=4, block=32, cluster=2, shared_mem=100).label() == base + " cluster=2 shared_mem=100"


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
# the Runner's Ex launch and cluster check, against a stand-in driver


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
    monkeypatch.setattr(measure, "cuda_driver", lambda: fake)
    r = object.__new__(measure.Runner)
    r.cp = SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: SimpleNamespace(ptr=0)))
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
    r = _runner(monkeypatch, fake)
    tmap = bytes(range(128))
    r.launch_ex(SimpleNamespace(ptr=0xF00), _spec(grid=cluster, block=32, cluster=cluster, shared_mem=shared_mem),
                (_DeviceArray(0xABC0), np.uint32(1), tmap))
    launch = ("launch", 0xF00, cluster, 32, 1, struct.pack("<Q", 0xABC0), struct.pack("<I", 1), tmap)
    assert fake.calls == allowed + [launch]


def test_a_refused_shared_memory_size_is_a_launch_error(monkeypatch):
    r = _runner(monkeypatch, _Driver(set_attr=1))
    with pytest.raises(measure.KernelLaunchError, match="refused 65536 bytes of dynamic shared memory"):
        r.launch_ex(SimpleNamespace(ptr=1), _spec(shared_mem=65536), (_DeviceArray(0), np.uint32(1), b"\0" * 128))


def test_ex_launch_failure_names_the_kernel_and_the_error(monkeypatch):
    r = _runner(monkeypatch, _Driver(launch=1))
    with pytest.raises(measure.KernelLaunchError, match=r"dsmem_chase .* cluster=2: cuLaunchKernelEx failed: "
                                                        r"CUDA_ERROR_INVALID_CLUSTER_SIZE \(invalid cluster size\)"):
        r.launch_ex(SimpleNamespace(ptr=1), _spec(grid=2, cluster=2), (_DeviceArray(0), np.uint32(1), b"\0" * 128))


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


# ----------------------------------------------------------------------------------------------
# one value per launch: the per-block span


def test_block_span_is_the_median_of_each_block_s_own_span():
    # three blocks of two warps, each on its own SM clock (far apart)
    pairs = [(1000, 1500), (1010, 1600), (9_000_000, 9_000_400), (9_000_050, 9_000_420), (5, 905), (0, 800)]
    value, per_warp = launch_value(pairs, 10.0, 2.0, "block_span", warps_per_block=2)
    assert value == (600 - 10) / 2  # spans 600, 420, 905: median 600
    assert per_warp == [(b - a - 10.0) / 2 for a, b in pairs]


def test_block_span_of_one_warp_blocks_is_the_warp_median():
    pairs = [(0, 100), (0, 300), (0, 200)]
    assert launch_value(pairs, 0.0, 1.0, "block_span", warps_per_block=1)[0] == launch_value(pairs, 0.0, 1.0, "warp")[0]


def test_block_span_needs_whole_blocks_and_its_block_size():
    with pytest.raises(ValueError, match="3 clock pairs are not whole blocks of 2 warps"):
        launch_value([(0, 1)] * 3, 0.0, 1.0, "block_span", warps_per_block=2)
    with pytest.raises(ValueError, match="'block_span' with warps_per_block, not 'block_span'"):
        launch_value([(0, 1)], 0.0, 1.0, "block_span")


def test_the_other_modes_ignore_the_block_size():
    pairs = [(0, 100), (50, 300)]
    for mode in ("warp", "span"):
        assert launch_value(pairs, 1.0, 1.0, mode, warps_per_block=2) == launch_value(pairs, 1.0, 1.0, mode)


# ----------------------------------------------------------------------------------------------
# the tensor map request (hwtests/specs_async.py)


def test_tensor_map_request_of_a_2d_tile():
    req = sa.tensor_map_request(0x7000_0000, (64, 64), (32, 32))
    assert req == {"tensorRank": 2, "globalAddress": 0x7000_0000, "globalDim": [64, 64], "globalStrides": [256],
                   "boxDim": [32, 32], "elementStrides": [1, 1]}


def test_tensor_map_request_strides_are_bytes_of_every_outer_dimension():
    req = sa.tensor_map_request(0, (8, 4, 3), (4, 2, 1), elem_bytes=8)
    assert req["globalStrides"] == [64, 256] and req["tensorRank"] == 3


@pytest.mark.parametrize("address, shape, box, match", [
    (8, (64,), (16,), "not 16-byte aligned"),
    (0, (64,), (2,), "inner extent, 8 bytes, is not a multiple of 16"),
    (0, (1024,), (512,), "each size 1..256"),
    (0, (64,), (128,), "within the tensor"),
    (0, (6, 4), (4, 2), "global stride 24 bytes is not a multiple of 16"),
    (0, (64, 64), (32,), "one box size per dimension"),
    (0, (), (), "rank 1..5"),
])
def test_tensor_map_request_refuses_what_the_driver_would(address, shape, box, match):
    with pytest.raises(ValueError, match=match):
        sa.tensor_map_request(address, shape, box)


def test_tensor_map_bytes_are_the_16_words_little_endian():
    raw = sa.tensor_map_bytes([driver.cuuint64_t(i) for i in range(16)])
    assert len(raw) == 128 and struct.unpack("<16Q", raw) == tuple(range(16))
    assert sa.tensor_map_bytes(driver.CUtensorMap().opaque) == b"\0" * 128
    with pytest.raises(ValueError, match="16 64-bit words, not 15"):
        sa.tensor_map_bytes(range(15))


def test_every_tma_shape_is_one_the_driver_takes_and_its_bytes_fit_the_kernel():
    for dim, (shape, box) in sa.TMA_SHAPES.items():
        req = sa.tensor_map_request(0x1000, shape, box)
        assert req["tensorRank"] == dim
        assert sa.tma_bytes(dim) <= 16384  # kernels/tma_load.cu SMEM_BYTES
    assert [sa.tma_bytes(d) for d in sorted(sa.TMA_SHAPES)] == list(sa.BULK_BYTES)  # the bulk copies' sizes


# ----------------------------------------------------------------------------------------------
# a refused cluster launch: red on sm_90, which has clusters and facts for them; a skip only below


def test_a_refused_cluster_fails_on_sm_90_with_the_driver_s_reason_and_what_to_check():
    spec = sa.dsmem_chase(16, 1)
    refusal = ("no cluster of 16 CTAs x 32 threads x 122880 bytes of shared memory of dsmem_chase fits on this GPU "
               "(cuOccupancyMaxActiveClusters = 0)")
    skip, message = sa.refused_cluster("sm_90", spec, refusal, "dsmem_latency_cluster16_cycles", "200.5 ± 2.5 cycles")
    assert skip is False
    assert message == (
        "dsmem_latency_cluster16_cycles: the driver refused the cluster launch on sm_90, which has thread-block "
        "clusters and the fact dsmem_latency_cluster16_cycles = 200.5 ± 2.5 cycles for them.\n"
        "  refused:  dsmem_chase from cluster_dsmem.cu, 4 clusters of 16 CTAs x 32 threads, 122880 bytes of dynamic "
        f"shared memory per CTA: {refusal}\n"
        "  expected: the launch to run, as it did on the GPUs the fact was measured on\n"
        "  check:    other processes, MPS or MIG on this GPU (nvidia-smi; nvidia-smi mig -lgi: a MIG instance has "
        "fewer SMs per GPC), the driver version (nvidia-smi; clusters need a CUDA 12 driver or newer); a cluster of "
        "16 is non-portable: it needs one GPC with 16 SMs free, which not every sm_90 SKU or MIG slice has (such a "
        "GPU needs facts of its own: --gpuprops-record); then run this test again")
    # a portable size says nothing of non-portable clusters; sm_90a and newer archs have clusters too
    for arch in ("sm_90a", "sm_100"):
        skip, message = sa.refused_cluster(arch, sa.cluster_barrier(2), "CUDA_ERROR_X",
                                           "cluster_barrier_cluster2_cycles", None)
        assert skip is False and "non-portable" not in message
        assert message.startswith(f"cluster_barrier_cluster2_cycles: the driver refused the cluster launch on {arch}")


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_a_refused_cluster_skips_only_on_an_arch_without_clusters(arch):
    skip, reason = sa.refused_cluster(arch, sa.dsmem_chase(2, 1), "CUDA_ERROR_NOT_SUPPORTED",
                                      "dsmem_latency_cluster2_cycles", None)
    assert skip is True
    assert reason == (f"dsmem_latency_cluster2_cycles: {arch} has no thread-block clusters (sm_90 and newer have "
                      "them), so the driver refused the launch: CUDA_ERROR_NOT_SUPPORTED")
    with pytest.raises(ValueError, match="arch 'sm_': expected sm_NN"):
        sa.arch_number("sm_")


def _run_cluster_tests(pytester, monkeypatch, arch, refusal):
    """hwtests/test_async_units.py's 12 cluster facts on a fake H100 of ``arch`` whose runner's cluster
    check answers ``refusal(spec)`` (None: the clusters fit, and the test goes on to measure)."""
    from gp_testing import fake_gpu_conftest

    from pytest_gpuprops import session
    hwtests = Path(__file__).parent.parent / "hwtests"
    conftest = fake_gpu_conftest(arch).replace('"Fake GPU"', '"NVIDIA H100 80GB HBM3"')
    pytester.makeconftest(conftest + f"\nimport sys\nsys.path.insert(0, {str(hwtests)!r})\n")
    pytester.makepyfile(test_async_clusters=(hwtests / "test_async_units.py").read_text())
    def measured(name, spec, **kw):
        raise measure.KernelLaunchError(f"planted: {name} went on to be measured")
    runner = SimpleNamespace(cluster_refusal=refusal, measure=measured)
    monkeypatch.setattr(session.GpuPropsState, "runner", lambda self, index=None: runner)
    return pytester.runpytest_inprocess("-p", "no:randomly", "-rs", "-k", "dsmem or cluster_barrier",
                                        "--gpuprops-report", "r.json")


def test_the_cluster_facts_fail_on_sm_90_when_the_driver_refuses_their_launch(pytester, monkeypatch):
    def refusal(spec):
        return (f"no cluster of {spec.cluster} CTAs x {spec.block} threads x {spec.shared_mem} bytes of shared memory "
                f"of {spec.kernel} fits on this GPU (cuOccupancyMaxActiveClusters = 0)")
    r = _run_cluster_tests(pytester, monkeypatch, "sm_90", refusal)
    r.assert_outcomes(failed=12)  # dsmem 2/4/8/16, self, load, store; barriers 2/4/8/16, release
    r.stdout.fnmatch_lines([
        "*dsmem_latency_cluster16_cycles: the driver refused the cluster launch on sm_90, which has thread-block "
        "clusters and the fact dsmem_latency_cluster16_cycles = * cycles for them.",
        "*refused:  dsmem_chase from cluster_dsmem.cu, 4 clusters of 16 CTAs x 32 threads, 122880 bytes of dynamic "
        "shared memory per CTA: no cluster of 16 CTAs x 32 threads x 122880 bytes of shared memory of dsmem_chase "
        "fits on this GPU (cuOccupancyMaxActiveClusters = 0)",
        "*check:    other processes, MPS or MIG on this GPU*"])
    facts = json.loads((pytester.path / "r.json").read_text())["facts"]
    assert len(facts) == 12 and {v["status"] for v in facts} == {"ERROR"}


def test_the_cluster_facts_skip_below_sm_90_and_a_cluster_that_fits_goes_on_to_be_measured(pytester, monkeypatch):
    r = _run_cluster_tests(pytester, monkeypatch, "sm_86", lambda spec: "CUDA_ERROR_NOT_SUPPORTED")
    r.assert_outcomes(skipped=12)
    r.stdout.fnmatch_lines(["*SKIPPED*fact is defined for sm_90; this GPU is sm_86*"])
    r = _run_cluster_tests(pytester, monkeypatch, "sm_90", lambda spec: None)
    r.assert_outcomes(failed=12)
    assert r.stdout.str().count("went on to be measured") >= 12 and "refused the cluster launch" not in r.stdout.str()
