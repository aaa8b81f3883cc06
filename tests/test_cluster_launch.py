"""The cluster facts end to end, on the CPU: the tensor-map request of hwtests/specs_async.py, and
hwtests/test_async_units.py's cluster facts when the driver refuses their launch (red on sm_90,
which has clusters and facts for them; a skip only below) or lets them run. The launch itself:
tests/test_driver_launch.py."""

import json
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuprops import driver_launch

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import specs_async as sa  # noqa: E402

driver = pytest.importorskip("cuda.bindings.driver")


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
        "  refused:  dsmem_chase from cluster_dsmem.cu, 8 clusters of 16 CTAs x 32 threads, 122880 bytes of dynamic "
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
        raise driver_launch.KernelLaunchError(f"planted: {name} went on to be measured")
    runner = SimpleNamespace(cluster_refusal=refusal, measure=measured)
    monkeypatch.setattr(session.GpuPropsState, "runner", lambda self, index=None: runner)
    # a second run rewrites the conftest within the second at the same size ("sm_86" -> "sm_90"): a
    # cached .pyc of the first would pass as current where bytecode is kept
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    # the 12 facts with values in the facts file (the DSMEM bandwidth sweep over cluster sizes has none yet:
    # its facts skip, saying how to record them, before any launch)
    return pytester.runpytest_inprocess("-p", "no:randomly", "-rs", "-k",
                                        "(dsmem or cluster_barrier) and not bytes_per_cycle_cluster",
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
        "*refused:  dsmem_chase from cluster_dsmem.cu, 8 clusters of 16 CTAs x 32 threads, 122880 bytes of dynamic "
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
