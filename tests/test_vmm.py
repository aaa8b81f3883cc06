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


class FakeDriver:
    """cuda.bindings.driver's VMM calls, logged; ``fail_map_at``: cuMemMap fails at that slot."""

    class _NS:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    CUmemAllocationType = _NS(CU_MEM_ALLOCATION_TYPE_PINNED=1)
    CUmemLocationType = _NS(CU_MEM_LOCATION_TYPE_DEVICE=1)
    CUmemAllocationGranularity_flags = _NS(CU_MEM_ALLOC_GRANULARITY_MINIMUM=0)
    CUmemAccess_flags = _NS(CU_MEM_ACCESS_FLAGS_PROT_READWRITE=3)

    def __init__(self, page=2 << 20, fail_map_at=None):
        self.page, self.fail_map_at, self.log, self.handles = page, fail_map_at, [], 0

    def CUmemAllocationProp(self):
        return self._NS(type=None, location=self._NS(type=None, id=None))

    def CUmemAccessDesc(self):
        return self._NS(location=self._NS(type=None, id=None), flags=None)

    def cuMemGetAllocationGranularity(self, prop, flag):
        return 0, self.page

    def cuMemAddressReserve(self, size, align, addr, flags):
        self.log.append(("reserve", size))
        return 0, 0x7000_0000_0000

    def cuMemCreate(self, size, prop, flags):
        self.handles += 1
        return 0, f"h{self.handles - 1}"

    def cuMemMap(self, va, size, offset, handle, flags):
        slot = (va - 0x7000_0000_0000) // self.page
        if slot == self.fail_map_at:
            return (2,)
        self.log.append(("map", slot, handle))
        return (0,)

    def cuMemSetAccess(self, va, size, descs, count):
        self.log.append(("access", size, descs[0].flags))
        return (0,)

    def cuMemUnmap(self, va, size):
        self.log.append(("unmap", (va - 0x7000_0000_0000) // self.page))

    def cuMemRelease(self, h):
        self.log.append(("release", h))

    def cuMemAddressFree(self, va, size):
        self.log.append(("free", size))

    def cuGetErrorName(self, err):
        return 0, b"CUDA_ERROR_OUT_OF_MEMORY"

    def cuGetErrorString(self, err):
        return 0, b"out of memory"


class FakeCupy:
    def __init__(self):
        from types import SimpleNamespace
        self.synced = 0
        cp = self
        self.cuda = SimpleNamespace(
            runtime=SimpleNamespace(free=lambda p: None, deviceSynchronize=lambda: setattr(cp, "synced", cp.synced + 1)),
            UnownedMemory=lambda ptr, size, owner: ("mem", ptr, size),
            MemoryPointer=lambda mem, off: ("ptr", mem, off))
        self.uint64 = "uint64"

    def ndarray(self, shape, dtype, memptr):
        return ("array", shape, dtype, memptr)


def test_pages_are_mapped_in_page_order_with_access_and_all_released_at_the_end(monkeypatch):
    d = FakeDriver()
    monkeypatch.setattr(vmm, "cuda_driver", lambda: d)
    pages = vmm.PagesOutOfOrder(FakeCupy(), 0, 7 * (2 << 20) + 5)  # rounded down to 7 whole pages
    assert (pages.page, pages.pages, pages.nbytes) == (2 << 20, 7, 7 * (2 << 20))
    with pages as words:
        assert words[1:3] == ((7 * (2 << 20) // 8,), "uint64")
        maps = [e for e in d.log if e[0] == "map"]
        assert [h for _, _, h in maps] == [f"h{k}" for k in vmm.page_order(7)]
        assert d.log[0] == ("reserve", 7 * (2 << 20)) and d.log[-1] == ("access", 7 * (2 << 20), 3)
    after = d.log[d.log.index(("access", 7 * (2 << 20), 3)) + 1:]
    assert [e for e in after if e[0] == "unmap"] == [("unmap", k) for k in range(7)]
    assert sorted(h for op, h in after if op == "release") == sorted(f"h{k}" for k in range(7))
    assert after[-1] == ("free", 7 * (2 << 20))


def test_a_mapping_that_fails_half_way_undoes_what_it_did_and_says_why(monkeypatch):
    d = FakeDriver(fail_map_at=3)
    monkeypatch.setattr(vmm, "cuda_driver", lambda: d)
    with pytest.raises(RuntimeError, match="cuMemMap: CUDA_ERROR_OUT_OF_MEMORY"):
        with vmm.PagesOutOfOrder(FakeCupy(), 0, 7 * (2 << 20)):
            pass
    assert [e for e in d.log if e[0] == "unmap"] == [("unmap", k) for k in range(3)]  # the three mapped
    assert len([e for e in d.log if e[0] == "release"]) == 7 and d.log[-1][0] == "free"
