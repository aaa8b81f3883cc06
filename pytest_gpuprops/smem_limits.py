"""measure layer: how much shared memory one block gets, and one SM holds, found by launching.

* ``smem_max_per_block_bytes``: the largest dynamic shared memory S a one-block launch of
  ``smem_touch_last`` (kernels/smem_limits.cu) is allowed, runs with and uses to its last byte:
  cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, S), cuLaunchKernelEx with S bytes, and the kernel
  reports the size it was given (%dynamic_smem_size) and reads back what it wrote to its first and last
  byte. S + 1 is refused (by the attribute, or by the launch). The device's own
  MAX_SHARED_MEMORY_PER_BLOCK_OPTIN and one byte more are probed first; only where the attribute is not
  the boundary is the boundary bisected for (:func:`largest_fitting`);
* ``smem_max_per_sm_bytes``: the largest S at which two blocks of ``smem_pair_resident`` are resident
  on one SM at once (each counts the blocks on its SM; carve-out preference 100 % shared memory), as
  the shared memory they hold together: 2 x (S + the driver's reserved shared memory per block,
  RESERVED_SHARED_MEMORY_PER_BLOCK, 1 KiB on sm_80..sm_90). Where the SM's capacity is not a multiple of
  the allocation unit in halves this is a lower bound within two units; on sm_90 it is exact. The
  search starts at MAX_SHARED_MEMORY_PER_MULTIPROCESSOR / 2 - reserved.

Both are facts of the arch: the CUDA C++ Programming Guide gives them per compute capability.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .measurement import Measurement

SOURCE = "smem_limits.cu"
#: the search's ceiling: four times the largest shared memory of any SM so far (256 KiB with L1)
SEARCH_LIMIT = 1 << 20
#: the bytes smem_touch_last writes to the last (low byte) and first byte of its shared memory
PATTERN = 0xA5C3
#: how long a block of smem_pair_resident waits for a second one on its SM (all of one launch's
#: resident blocks start within microseconds)
PAIR_WAIT_NS = 1_000_000
#: counters per SM id the host gives smem_pair_resident (more than any %smid so far)
SM_SLOTS = 1024
BLOCK_METHOD = ("one block of 32 threads, dynamic shared memory only: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, "
                "S) then cuLaunchKernelEx with S bytes; the kernel reads %dynamic_smem_size and writes and reads back "
                "its first and last byte (smem_limits.cu smem_touch_last). The value is the largest S that runs so, "
                "S + 1 refused; MAX_SHARED_MEMORY_PER_BLOCK_OPTIN and one byte more probed first, bisection otherwise")
SM_METHOD = ("a grid of two blocks per SM (32 threads, S bytes of dynamic shared memory each, carve-out preference 100 % "
             "shared); each block counts the blocks resident on its SM (%smid) and waits up to 1 ms for a second "
             "(smem_limits.cu smem_pair_resident). The value is 2 x (S + the reserved shared memory per block) for the "
             "largest S at which an SM holds two at once, S + 1 holding one; S = MAX_SHARED_MEMORY_PER_MULTIPROCESSOR / "
             "2 - reserved and one byte more probed first, bisection otherwise")


class SmemMisreport(RuntimeError):
    """A launch ran, but the kernel did not get (or could not use) the shared memory it asked for."""


@dataclasses.dataclass(frozen=True)
class Probe:
    size: int
    fits: bool
    why: str


def largest_fitting(fits: Callable[[int], tuple[bool, str]], guess: int, limit: int = SEARCH_LIMIT
                    ) -> tuple[int, list[Probe]]:
    """The largest size in 0..``limit`` for which ``fits(size) -> (fits, why)`` holds (0 is taken to
    fit; ``fits`` is monotone: what fits, every smaller size fits), and every probe made. ``guess``
    (the driver's own figure) and ``guess + 1`` are probed first: two probes where the driver is right."""
    probes: list[Probe] = []

    def probe(size: int) -> bool:
        ok, why = fits(size)
        probes.append(Probe(size, bool(ok), why))
        return bool(ok)

    if limit < 1:
        raise ValueError(f"the search's limit must be at least 1 byte, not {limit}")
    guess = min(max(guess, 1), limit)
    lo, hi = 0, limit + 1  # fits(lo) (0 by assumption); hi does not fit (limit + 1: never probed)
    if probe(guess):
        lo = guess
        if guess == limit or not probe(guess + 1):
            return guess, probes
        lo = guess + 1
    else:
        hi = guess
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes


def refusal_text(boundary: int, probes: list[Probe]) -> str:
    """What happened one byte past the boundary: the probe's reason, or that the search's limit was
    reached without a refusal."""
    past = next((p for p in probes if p.size == boundary + 1 and not p.fits), None)
    if past is None:
        return f"{boundary + 1} bytes not probed: the search stopped at its limit of {boundary} bytes without a refusal"
    return f"{past.size} bytes: {past.why}"


def per_sm_bytes(pair_size: int, reserved_per_block: int) -> int:
    """The shared memory two co-resident blocks of ``pair_size`` dynamic bytes hold on their SM."""
    if pair_size < 0 or reserved_per_block < 0:
        raise ValueError(f"sizes must be >= 0, not {pair_size} and {reserved_per_block}")
    return 2 * (pair_size + reserved_per_block)


def limit_measurement(name: str, value: int, probes: list[Probe], *, kernel: str, launch: dict,
                      remeasure: Callable[[], Measurement] | None = None) -> Measurement:
    """An exact size (one reading of a search) as the suite's Measurement, with every probe kept."""
    return Measurement(name=name, unit="bytes", values=[float(value)], stop_reason=f"search, {len(probes)} probes",
                       noise_target=0.01, overhead_cycles=0.0, sm_clock_mhz=None, throttle=[], kernel=kernel,
                       launch={**launch, "probes": [[p.size, p.fits, p.why] for p in probes]}, remeasure=remeasure)


def check_touch(size: int, out: list[int]) -> None:
    """smem_touch_last's report (given size, last byte, first byte read back) for a launch of ``size``
    bytes; SmemMisreport where the block got another size or could not use its last byte."""
    got, last, first = (int(v) for v in out[:3])
    want_last, want_first = PATTERN & 0xFF, (PATTERN >> 8) & 0xFF
    if got != size:
        raise SmemMisreport(f"a launch with {size} bytes of dynamic shared memory ran, but the block was given {got} "
                            "(%dynamic_smem_size): the driver did not give what it accepted")
    if size and (last, first) != (want_last, want_first):
        raise SmemMisreport(f"a block of {size} bytes of dynamic shared memory read back 0x{last:02x} from its last "
                            f"byte and 0x{first:02x} from its first, not the 0x{want_last:02x} and 0x{want_first:02x} "
                            "it wrote: its shared memory does not hold what was written")


class SmemProbe:  # pragma: no mutate block  (GPU only)
    """smem_limits.cu's kernels on one GPU (a runner's), launched through the driver API."""

    def __init__(self, runner, timeout_s: float = 10.0):
        from . import driver_launch
        self.dl, self.drv = driver_launch, driver_launch.cuda_driver()
        self.cp, self.index, self.sms, self.timeout_s = runner.cp, runner.info.index, runner.info.sm_count, timeout_s
        cubin = runner.compile(SOURCE).cubin
        with self.cp.cuda.Device(self.index):
            self.touch = runner.load(cubin, "smem_touch_last")
            self.pair = runner.load(cubin, "smem_pair_resident")

    def attribute(self, name: str) -> int:
        """A device attribute (CU_DEVICE_ATTRIBUTE_<name>) of this GPU."""
        err, value = self.drv.cuDeviceGetAttribute(getattr(self.drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"),
                                                   self.drv.CUdevice(self.index))
        if int(err) != 0:
            raise RuntimeError(f"cuDeviceGetAttribute({name}) failed: {self.dl.driver_error(self.drv, err)}")
        return int(value)

    def _set(self, fn, attr: str, value: int) -> str | None:
        f = self.drv.CUfunction(self.dl.function_handle(fn))
        (err,) = self.drv.cuFuncSetAttribute(f, getattr(self.drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attr}"), value)
        return None if int(err) == 0 else f"refused by cuFuncSetAttribute({attr}, {value}): {self.dl.driver_error(self.drv, err)}"

    def _run(self, fn, spec, args) -> str | None:
        """Launch without touching the function's attributes; None once it has run, else the refusal."""
        import ctypes
        params, _keep = self.dl.kernel_params(args)
        config = self.dl.launch_config(self.drv, spec, self.cp.cuda.get_current_stream().ptr)
        (err,) = self.drv.cuLaunchKernelEx(config, self.drv.CUfunction(self.dl.function_handle(fn)),
                                           ctypes.addressof(params), 0)
        if int(err) != 0:
            return f"refused by cuLaunchKernelEx: {self.dl.driver_error(self.drv, err)}"
        done = self.cp.cuda.Event()
        done.record()
        self.dl.wait_for(done, self.timeout_s, spec.label())
        return None

    def block_fits(self, size: int) -> tuple[bool, str]:
        from .kernel_spec import KernelSpec
        with self.cp.cuda.Device(self.index):
            why = self._set(self.touch, "MAX_DYNAMIC_SHARED_SIZE_BYTES", size)
            if why:
                return False, why
            out = self.cp.zeros(3, dtype=self.cp.uint32)
            why = self._run(self.touch, KernelSpec(SOURCE, "smem_touch_last", shared_mem=size),
                            (out, self.cp.uint32(PATTERN)))
            if why:
                return False, why
            check_touch(size, out.get().tolist())
        return True, f"ran: the block was given {size} bytes and read back its first and last byte"

    def pair_resident(self, size: int) -> tuple[bool, str]:
        from .kernel_spec import KernelSpec
        cp = self.cp
        with cp.cuda.Device(self.index):
            why = (self._set(self.pair, "MAX_DYNAMIC_SHARED_SIZE_BYTES", size)
                   or self._set(self.pair, "PREFERRED_SHARED_MEMORY_CARVEOUT", 100))
            if why:
                return False, why
            residents, peak = cp.zeros(SM_SLOTS, dtype=cp.uint32), cp.zeros(SM_SLOTS, dtype=cp.uint32)
            done = cp.zeros(2, dtype=cp.uint32)
            grid = 2 * self.sms
            why = self._run(self.pair, KernelSpec(SOURCE, "smem_pair_resident", grid=grid, shared_mem=size),
                            (residents, peak, done, cp.uint32(SM_SLOTS), cp.uint64(PAIR_WAIT_NS)))
            if why:
                return False, why
            ran, lost = (int(v) for v in done.get())
            seen = [int(v) for v in peak.get() if v]
        if ran != grid or lost:
            raise SmemMisreport(f"smem_pair_resident: {ran} of {grid} blocks counted, {lost} on an SM id past {SM_SLOTS}")
        pairs = sum(v >= 2 for v in seen)
        return pairs > 0, f"{pairs} of {len(seen)} SMs held two blocks of {size} bytes at once"
