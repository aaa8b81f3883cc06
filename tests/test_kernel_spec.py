"""KernelSpec (kernel_spec.py): its defaults, and the label every message names a kernel by."""

from pytest_gpuprops.kernel_spec import KernelSpec


def test_kernel_spec_label_and_defaults():
    s = KernelSpec("ffma.cu", "ffma", {"ILP": 2}, grid=3, block=64)
    assert s.label() == "ffma from ffma.cu {'ILP': 2} grid=3 block=64"
    d = KernelSpec("a.cu", "a")
    assert (d.defines, d.grid, d.block, d.args, d.patch, d.region, d.region_other) == ({}, 1, 32, None, None, None, 0)


def _spec(**kw) -> KernelSpec:
    return KernelSpec("cluster_dsmem.cu", "dsmem_chase", **kw)


def test_a_kernel_records_its_timer_where_built_with_timer_1():
    assert KernelSpec("tma_load.cu", "tma_stream", {"TIMER": 1}).timer
    assert not KernelSpec("tma_load.cu", "tma_stream", {"TIMER": 0}).timer
    assert not KernelSpec("tma_load.cu", "tma_stream", {"STAGES": 4}).timer


def test_the_label_names_the_cluster_and_shared_memory_only_where_given():
    base = "dsmem_chase from cluster_dsmem.cu {} grid=4 block=32"
    assert _spec(grid=4, block=32).label() == base
    assert _spec(grid=4, block=32, cluster=4).label() == base + " cluster=4"
    assert _spec(grid=4, block=32, shared_mem=100).label() == base + " shared_mem=100"
    assert _spec(grid=4, block=32, cluster=2, shared_mem=100).label() == base + " cluster=2 shared_mem=100"
