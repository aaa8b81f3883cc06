"""health layer, the load: host<->device copies that keep a GPU's PCIe link busy while NVML's
current width and generation are read (health.read_health's ``load``): an idle link trains down to
save power, so only a busy one shows what it trained to. GPU only (CuPy)."""

from __future__ import annotations

from collections.abc import Callable


def copy_load(device: int, *, seconds: float = 0.25, nbytes: int = 64 << 20, rounds: int = 5
              ) -> Callable[[Callable[[], None]], str]:  # pragma: no mutate block  (GPU only)
    """A load for health.read_health: back-to-back host->device and device->host copies of ``nbytes``
    from pinned memory on GPU ``device`` (CuPy), for ``seconds`` and at least ``rounds`` rounds, calling
    ``sample()`` while each round's two copies are in flight. Returns the load in words, with the
    bandwidth it reached. The caller holds the GPU's lock (gpulock.gpu_lock)."""
    def load(sample: Callable[[], None]) -> str:
        import ctypes
        import time

        import cupy
        with cupy.cuda.Device(device):
            host = cupy.cuda.alloc_pinned_memory(nbytes)
            dev = cupy.cuda.alloc(nbytes)
            stream = cupy.cuda.Stream(non_blocking=True)
            done, start = 0, time.perf_counter()
            while done < rounds or time.perf_counter() - start < seconds:
                dev.copy_from_host_async(ctypes.c_void_p(host.ptr), nbytes, stream)
                dev.copy_to_host_async(ctypes.c_void_p(host.ptr), nbytes, stream)
                sample()
                stream.synchronize()
                done += 1
            took = time.perf_counter() - start
        return (f"{done} rounds of {nbytes >> 20} MiB host->device + device->host copies, pinned, in {took:.2f} s: "
                f"{2 * done * nbytes / took / 1e9:.1f} GB/s")
    return load
