"""How much shared memory a block may have and an SM holds, found by launching
(pytest_gpuprops/smem_limits.py has the method):

* smem_max_per_block_bytes: the largest dynamic shared memory a block is given and uses to its last
  byte, one byte more refused (sm_90: 227 KiB = 232448 B);
* smem_max_per_sm_bytes: what two blocks that share an SM hold together at the largest size that lets
  them (sm_90: 228 KiB = 233472 B, the 1 KiB reserved per block included).

Facts of the arch: the CUDA C++ Programming Guide's "Memory Information per Compute Capability" table
gives both per compute capability.

Not here: the L2's line and sector sizes by a stride sweep. What such a sweep steps at is the fetch
granularity of the level that misses, which policies (sector promotion, prefetch) can widen; telling
that from the line and the sector needs readings on a GPU to decide, which this fact was not yet
measured with.
"""

import pytest

from pytest_gpuprops import gpulock
from pytest_gpuprops import smem_limits as sl

pytestmark = pytest.mark.gpu


def _specs_of(item):
    """No timed builds: the kernels here carry no clock pairs and need no timing patch, so the session's
    prefetch compiles nothing for this file (its two small kernels compile in the first test)."""
    return []


@pytest.fixture(scope="module")
def smem_probe(gpuprops_state, gpuprops_gpu_index):
    return sl.SmemProbe(gpuprops_state.runner(gpuprops_gpu_index))


def _search(gpuprops, name, run):
    def once():
        try:
            with gpulock.gpu_lock(gpuprops.gpu.index):
                m = run()
        except sl.SmemMisreport as exc:
            pytest.fail(f"{name}: {exc}", pytrace=False)
        m.remeasure = once
        return m
    return once()


@pytest.mark.fact("smem_max_per_block_bytes")
def test_largest_shared_memory_of_a_block(gpuprops, smem_probe):
    name = gpuprops.fact_name

    def run():
        optin = smem_probe.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        size, probes = sl.largest_fitting(smem_probe.block_fits, optin)
        return sl.limit_measurement(name, size, probes, kernel="smem_touch_last", launch={
            "optin_attribute": optin, "one_byte_more": sl.refusal_text(size, probes)})
    gpuprops.check(name, _search(gpuprops, name, run), method=sl.BLOCK_METHOD)


@pytest.mark.fact("smem_max_per_sm_bytes")
def test_shared_memory_two_blocks_hold_on_one_sm(gpuprops, smem_probe):
    name = gpuprops.fact_name

    def run():
        per_sm = smem_probe.attribute("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR")
        reserved = smem_probe.attribute("RESERVED_SHARED_MEMORY_PER_BLOCK")
        optin = smem_probe.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        size, probes = sl.largest_fitting(smem_probe.pair_resident, per_sm // 2 - reserved, limit=optin)
        return sl.limit_measurement(name, sl.per_sm_bytes(size, reserved), probes, kernel="smem_pair_resident", launch={
                                        "pair_size": size, "reserved_per_block": reserved, "per_sm_attribute": per_sm,
                                        "one_byte_more": sl.refusal_text(size, probes)})
    gpuprops.check(name, _search(gpuprops, name, run), method=sl.SM_METHOD)
