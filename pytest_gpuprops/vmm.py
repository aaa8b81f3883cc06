"""measure layer: device memory whose pages a test places, through the driver's virtual memory management
API (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess).

cudaMalloc maps a large buffer with 2 MiB pages in physical order, and an MMU may cover physically
contiguous pages with one translation. :class:`PagesOutOfOrder` maps physical pages of the allocation
granularity (the smallest page device memory can be mapped with: 2 MiB on sm_90) so that neighbouring
virtual pages are never neighbours in physical memory: each page needs a translation of its own, and a
TLB sweep over them reads the TLBs' reach in pages of that size.
"""

from __future__ import annotations

import math

from .driver_launch import cuda_driver, driver_error


def coprime_stride(n: int) -> int:
    """A stride through ``n`` pages that visits each once (coprime to ``n``) and never steps to a
    neighbour (not 1 or n - 1): the one nearest n / golden ratio. Refused: fewer than 5 pages, and 6 (the
    only strides coprime to it are 1 and 5)."""
    if n < 5:
        raise ValueError(f"{n} pages: at least 5 are needed to map them out of order")
    best = round(n / ((1 + 5 ** 0.5) / 2))
    for d in range(n):
        for p in (best - d, best + d):
            if 1 < p < n - 1 and math.gcd(p, n) == 1:
                return p
    raise ValueError(f"{n} pages: no stride through them skips every neighbour; map one page more or fewer")


def page_order(n: int) -> list[int]:
    """Which physical page (in the order they were created) each of ``n`` virtual pages maps: page i maps
    physical page (i x stride) mod n (:func:`coprime_stride`), so neighbours are stride pages apart."""
    p = coprime_stride(n)
    return [(i * p) % n for i in range(n)]


def _ok(driver, result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"{what}: {driver_error(driver, err)}; the GPU's driver must support virtual memory "
                           "management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)")
    return rest[0] if len(rest) == 1 else rest


class PagesOutOfOrder:  # pragma: no mutate block  (GPU only)
    """``nbytes`` (rounded down to whole pages) of GPU ``device``'s memory, its pages mapped in
    :func:`page_order`; as a context manager, a CuPy uint64 array over them (CuPy's current device must be
    ``device``), unmapped and released at the end."""

    def __init__(self, cp, device: int, nbytes: int):
        d = self.driver = cuda_driver()
        self.cp = cp
        prop = d.CUmemAllocationProp()
        prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        self.prop, self.device = prop, device
        self.page = int(_ok(d, d.cuMemGetAllocationGranularity(
            prop, d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity"))
        self.pages = nbytes // self.page
        self.nbytes = self.pages * self.page
        self.va, self.handles, self.mapped = 0, [], 0

    def __enter__(self):
        d, cp = self.driver, self.cp
        cp.cuda.runtime.free(0)  # the context exists before the driver's calls
        try:
            self.va = int(_ok(d, d.cuMemAddressReserve(self.nbytes, self.page, 0, 0), "cuMemAddressReserve"))
            for _ in range(self.pages):
                self.handles.append(_ok(d, d.cuMemCreate(self.page, self.prop, 0), "cuMemCreate"))
            for slot, k in enumerate(page_order(self.pages)):
                _ok(d, d.cuMemMap(self.va + slot * self.page, self.page, 0, self.handles[k], 0), "cuMemMap")
                self.mapped += 1
            access = d.CUmemAccessDesc()
            access.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = self.device
            access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            _ok(d, d.cuMemSetAccess(self.va, self.nbytes, [access], 1), "cuMemSetAccess")
        except Exception:
            self.__exit__()
            raise
        mem = cp.cuda.UnownedMemory(self.va, self.nbytes, owner=self)
        return cp.ndarray((self.nbytes // 8,), dtype=cp.uint64, memptr=cp.cuda.MemoryPointer(mem, 0))

    def __exit__(self, *exc):
        d = self.driver
        self.cp.cuda.runtime.deviceSynchronize()
        for slot in range(self.mapped):
            d.cuMemUnmap(self.va + slot * self.page, self.page)
        for h in self.handles:
            d.cuMemRelease(h)
        if self.va:
            d.cuMemAddressFree(self.va, self.nbytes)
        self.va, self.handles, self.mapped = 0, [], 0
        return False
