"""CPU tests of pytest_gpuprops/vmm.py's page order (the mapping itself needs a GPU: hwtests/
test_cache_capacity.py's TLB condition over pages out of order)."""

import math

import pytest

from pytest_gpuprops import vmm


@pytest.mark.parametrize("n", [5, 7, 8, 9, 64, 100, 8192, 20480])
def test_every_physical_page_is_mapped_once_and_no_two_neighbours_are_neighbours(n):
    order = vmm.page_order(n)
    assert sorted(order) == list(range(n))
    assert all(abs(b - a) not in (1, n - 1) for a, b in zip(order, order[1:]))


def test_the_stride_is_coprime_near_the_golden_section_and_never_next_door():
    assert vmm.coprime_stride(8192) == 5063  # round(8192 / 1.618...) = 5063, odd: coprime to 2^13
    assert vmm.coprime_stride(9) == 5  # 6 shares 3 with 9; 5 and 7 are as near: the lower first
    assert vmm.coprime_stride(5) == 3  # 3 = n - 2 is still not next door
    assert vmm.coprime_stride(10) == 7  # 6, 5 and 4 share a factor with 10: the nearest above wins
    for n in (5, 10, 12, 30, 210, 8191):
        p = vmm.coprime_stride(n)
        assert math.gcd(p, n) == 1 and 1 < p < n - 1
    with pytest.raises(ValueError, match="6 pages: no stride through them skips every neighbour"):
        vmm.coprime_stride(6)  # 1 and 5 are its only coprime strides


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_too_few_pages_to_shuffle_are_refused(n):
    with pytest.raises(ValueError, match=f"{n} pages: at least 5"):
        vmm.page_order(n)


def test_a_driver_error_says_what_failed_and_what_to_check():
    class Driver:
        def cuGetErrorName(self, err):
            return (0, b"CUDA_ERROR_NOT_SUPPORTED") if err == 801 else (1, None)

        def cuGetErrorString(self, err):
            return (0, b"operation not supported") if err == 801 else (1, None)
    with pytest.raises(RuntimeError, match=r"^cuMemCreate: CUDA_ERROR_NOT_SUPPORTED \(operation not supported\); the GPU's "
                                           r"driver must support virtual memory management "
                                           r"\(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED\)$"):
        vmm._ok(Driver(), (801, None), "cuMemCreate")
    assert vmm._ok(Driver(), (0, 7), "x") == 7
    assert vmm._ok(Driver(), 0, "cuMemMap") == []  # a call that returns its status alone
