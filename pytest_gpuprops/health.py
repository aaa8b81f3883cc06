"""health layer: what NVML says about a GPU before any fact is measured on it, read without launching
a kernel. Uncorrectable ECC errors, pending or failed row remaps, the PCIe link against its maximum,
application clocks, locked clocks and the power limit against their defaults, persistence and
compute mode: what a driver update, a reset or a reseat most often leaves wrong.

No pytest here. :func:`read_health` takes the NVML module as a parameter (pynvml, or a stand-in
with the same function names, constants and exception classes) and returns what each check read;
given a ``load`` (:func:`copy_load`: host<->device copies), the PCIe width and generation are read
while it keeps the link busy, since an idle link trains down to save power
(:func:`judge_link_under_load` judges those readings);
:func:`verdicts` judges the readings, one :class:`~pytest_gpuprops.assertions.Verdict` per check
(kind ``"health"``, named ``health_<what>``); :func:`record` hands one to a test's FactChecker, so it
reaches the report as a fact's verdict does. A check NVML cannot answer on this GPU (NotSupported,
a binding without the call) is SKIPPED with the reason, never a PASS that asserts nothing; any other
NVML error (a lost GPU) is a FAIL. A health verdict skips nothing else: the facts still run.
docs/validation.md lists the checks, their thresholds and DCGM's corresponding checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from . import assertions

PASS, FAIL, SKIPPED = assertions.PASS, assertions.FAIL, assertions.SKIPPED

ECC_MODE = "health_ecc_mode"
ECC_VOLATILE = "health_ecc_uncorrectable_volatile"
ECC_AGGREGATE = "health_ecc_uncorrectable_aggregate"
REMAP_PENDING = "health_row_remap_pending"
REMAP_FAILURE = "health_row_remap_failure"
PCIE_WIDTH = "health_pcie_link_width"
PCIE_GEN = "health_pcie_link_gen"
PCIE_MAX_GEN = "health_pcie_link_max_gen"
APP_CLOCKS = "health_app_clocks_default"
LOCKED_CLOCKS = "health_locked_clocks"
POWER_LIMIT = "health_power_limit_default"
PERSISTENCE = "health_persistence_mode"
COMPUTE_MODE = "health_compute_mode"
#: the checks read under load when read_health is given one: the link trains down when idle
UNDER_LOAD = (PCIE_WIDTH, PCIE_GEN)
#: what a reading under load holds: NVML's current generation and width, one per sample (or an Unread),
#: and what the load was
GEN_UNDER_LOAD = "nvmlDeviceGetCurrPcieLinkGeneration under load"
WIDTH_UNDER_LOAD = "nvmlDeviceGetCurrPcieLinkWidth under load"
LOAD = "load"
#: every check, in the order they run and report
CHECKS = (ECC_MODE, ECC_VOLATILE, ECC_AGGREGATE, REMAP_PENDING, REMAP_FAILURE, PCIE_WIDTH, PCIE_GEN, PCIE_MAX_GEN,
          APP_CLOCKS, LOCKED_CLOCKS, POWER_LIMIT, PERSISTENCE, COMPUTE_MODE)

#: retired pages (single- plus double-bit causes) at which DCGM fails a GPU (DcgmGPUHardwareLimits.h); used
#: only on GPUs that retire pages instead of remapping rows (before Ampere)
RETIRED_PAGES_LIMIT = 63
#: NVML clock-event (throttle) reason bits, as nvidia-smi names them
EVENT_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
              0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
              0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
IDLE_BIT, APP_CLOCKS_BIT = 0x1, 0x2
VIRTUALIZATION = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
#: per-lane PCIe bandwidth by generation (GB/s after encoding), to say how much a slower link costs
_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

_DCGM = "DCGM diagnostics (dcgmi diag -r 1)"
_SOURCE = {
    ECC_MODE: "NVML API reference, nvmlDeviceGetEccMode",
    ECC_VOLATILE: "NVML API reference, nvmlDeviceGetTotalEccErrors; DCGM health watches (memory)",
    ECC_AGGREGATE: "NVML API reference, nvmlDeviceGetTotalEccErrors; DCGM health watches (memory)",
    REMAP_PENDING: f"NVML API reference, nvmlDeviceGetRemappedRows; {_DCGM}, software deployment checks: "
                   "page retirement / row remap",
    REMAP_FAILURE: f"NVML API reference, nvmlDeviceGetRemappedRows; {_DCGM}, software deployment checks: "
                   "page retirement / row remap",
    PCIE_WIDTH: "NVML API reference, nvmlDeviceGetCurrPcieLinkWidth; DCGM PCIe plugin, min_pci_width",
    PCIE_GEN: "NVML API reference, nvmlDeviceGetCurrPcieLinkGeneration; DCGM PCIe plugin, min_pci_generation "
              "(judged in P0 only)",
    PCIE_MAX_GEN: "NVML API reference, nvmlDeviceGetMaxPcieLinkGeneration / nvmlDeviceGetGpuMaxPcieLinkGeneration",
    APP_CLOCKS: "NVML API reference, nvmlDeviceGetApplicationsClock / nvmlDeviceGetDefaultApplicationsClock",
    LOCKED_CLOCKS: "NVML API reference, nvmlDeviceGetCurrentClocksEventReasons "
                   "(nvmlClocksEventReasonApplicationsClocksSetting)",
    POWER_LIMIT: "NVML API reference, nvmlDeviceGetPowerManagementLimit / nvmlDeviceGetPowerManagementDefaultLimit "
                 "/ nvmlDeviceGetEnforcedPowerLimit",
    PERSISTENCE: f"NVML API reference, nvmlDeviceGetPersistenceMode; {_DCGM}, software deployment checks: "
                 "persistence mode (a warning there)",
    COMPUTE_MODE: "NVML API reference, nvmlDeviceGetComputeMode",
}
_METHOD = {
    ECC_MODE: "NVML nvmlDeviceGetEccMode: current and pending mode",
    ECC_VOLATILE: "NVML nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE): since the driver loaded",
    ECC_AGGREGATE: "NVML nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE): over the GPU's life (InfoROM)",
    REMAP_PENDING: "NVML nvmlDeviceGetRemappedRows isPending; without row remapping, "
                   "nvmlDeviceGetRetiredPagesPendingStatus",
    REMAP_FAILURE: "NVML nvmlDeviceGetRemappedRows failureOccurred; without row remapping, the retired-page count "
                   f"(nvmlDeviceGetRetiredPages) against {RETIRED_PAGES_LIMIT}",
    PCIE_WIDTH: "NVML nvmlDeviceGetCurrPcieLinkWidth, the widest of the readings taken while host<->device copies "
                "keep the link busy, vs nvmlDeviceGetMaxPcieLinkWidth (the device's and slot's max)",
    PCIE_GEN: "NVML nvmlDeviceGetCurrPcieLinkGeneration, the highest of the readings taken while host<->device "
              "copies keep the link busy (an idle GPU lowers it to save power), vs "
              "nvmlDeviceGetMaxPcieLinkGeneration (the most the GPU and the slot support); read without a load, a "
              "lower generation is judged only when the GPU is busy (P0, not gpu_idle)",
    PCIE_MAX_GEN: "NVML nvmlDeviceGetMaxPcieLinkGeneration (device and system) vs "
                  "nvmlDeviceGetGpuMaxPcieLinkGeneration (the GPU alone)",
    APP_CLOCKS: "NVML nvmlDeviceGetApplicationsClock vs nvmlDeviceGetDefaultApplicationsClock, SM and memory",
    LOCKED_CLOCKS: "NVML clock-event reason applications_clocks_setting with the SM clock (nvmlDeviceGetClockInfo) "
                   "below the default application clock (NVML has no getter for the locked range)",
    POWER_LIMIT: "NVML nvmlDeviceGetPowerManagementLimit and nvmlDeviceGetEnforcedPowerLimit vs "
                 "nvmlDeviceGetPowerManagementDefaultLimit",
    PERSISTENCE: "NVML nvmlDeviceGetPersistenceMode",
    COMPUTE_MODE: "NVML nvmlDeviceGetComputeMode",
}
_EXPECTED = {
    ECC_MODE: "current == pending (enabled on datacenter GPUs)",
    ECC_VOLATILE: "0 since the driver loaded",
    ECC_AGGREGATE: "0 over the GPU's life",
    REMAP_PENDING: "no row remap pending",
    REMAP_FAILURE: "no row remap failure",
    PCIE_WIDTH: "current width = max width",
    PCIE_GEN: "current gen = max gen (busy GPU)",
    PCIE_MAX_GEN: "link max gen = GPU max gen",
    APP_CLOCKS: "SM and memory >= default",
    LOCKED_CLOCKS: "SM clock not held below default",
    POWER_LIMIT: "limit and enforced >= default",
    PERSISTENCE: "reported (enabled recommended)",
    COMPUTE_MODE: "not PROHIBITED",
}
_UNIT = {ECC_MODE: "", ECC_VOLATILE: "errors", ECC_AGGREGATE: "errors", REMAP_PENDING: "", REMAP_FAILURE: "",
         PCIE_WIDTH: "lanes", PCIE_GEN: "gen", PCIE_MAX_GEN: "gen", APP_CLOCKS: "MHz", LOCKED_CLOCKS: "MHz",
         POWER_LIMIT: "W", PERSISTENCE: "", COMPUTE_MODE: ""}


# ----------------------------------------------------------------------------------------------
# reading


@dataclasses.dataclass(frozen=True)
class Unread:
    """An NVML query that returned no value. ``why``: "unsupported" (NotSupported, FunctionNotFound,
    or a binding without the function: the GPU, driver or binding has no such query), "no permission",
    or "error" (anything else: a lost GPU, NVML not initialised), which is a health failure."""
    call: str
    error: str
    why: str

    def __str__(self) -> str:
        return f"{self.call}: {self.error}"


@dataclasses.dataclass
class HealthReading:
    """What one check read: each NVML query as written (``nvmlDeviceGetTotalEccErrors(UNCORRECTED,
    VOLATILE)``) to what NVML returned, or an :class:`Unread`."""
    check: str
    values: dict[str, object]

    def get(self, call: str, default=None):
        return self.values.get(call, default)


_SHORT = {"NVML_MEMORY_ERROR_TYPE_UNCORRECTED": "UNCORRECTED", "NVML_VOLATILE_ECC": "VOLATILE",
          "NVML_AGGREGATE_ECC": "AGGREGATE", "NVML_CLOCK_SM": "SM", "NVML_CLOCK_MEM": "MEM",
          "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS": "SINGLE_BIT",
          "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR": "DOUBLE_BIT"}


def _key(fn: str, consts: tuple[str, ...]) -> str:
    return fn + (f"({', '.join(_SHORT.get(c, c) for c in consts)})" if consts else "")


class _Reader:
    """Calls NVML once per query (several checks read the same one) and keeps what each check read."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        self._cache: dict[str, object] = {}
        self.touched: dict[str, object] = {}

    def __call__(self, fn: str, *consts: str):
        key = _key(fn, consts)
        if key not in self._cache:
            self._cache[key] = self._call(key, fn, consts)
        self.touched[key] = self._cache[key]
        return self._cache[key]

    def _call(self, key: str, fn: str, consts: tuple[str, ...]):
        nv = self.nvml
        func = getattr(nv, fn, None)
        missing = [c for c in consts if not hasattr(nv, c)]
        if func is None or missing:
            return Unread(key, f"not in this NVML binding ({', '.join(missing) or fn})", "unsupported")
        try:
            return func(self.handle, *(getattr(nv, c) for c in consts))
        except nv.NVMLError as exc:
            return _unread(nv, key, exc)


def _unread(nv, key: str, exc: Exception) -> Unread:
    name = type(exc).__name__.replace("NVMLError_", "")
    if name == "NVMLError":
        name = f"NVMLError ({exc})"
    kinds = {"unsupported": ("NVMLError_NotSupported", "NVMLError_FunctionNotFound"),
             "no permission": ("NVMLError_NoPermission",)}
    for why, classes in kinds.items():
        if any(isinstance(exc, c) for c in (getattr(nv, n, None) for n in classes) if isinstance(c, type)):
            return Unread(key, name, why)
    return Unread(key, name, "error")


def _event_reasons(read):
    got = read("nvmlDeviceGetCurrentClocksEventReasons")
    if isinstance(got, Unread) and got.why == "unsupported" and got.error.startswith("not in this NVML binding"):
        got = read("nvmlDeviceGetCurrentClocksThrottleReasons")  # nvidia-ml-py before 12.535
    return got


def _read_remap(read, fallback):
    rows = read("nvmlDeviceGetRemappedRows")
    if isinstance(rows, Unread) and rows.why == "unsupported":
        fallback()


_READS = {
    ECC_MODE: lambda r: r("nvmlDeviceGetEccMode"),
    ECC_VOLATILE: lambda r: (r("nvmlDeviceGetTotalEccErrors", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                               "NVML_VOLATILE_ECC"), r("nvmlDeviceGetEccMode")),
    ECC_AGGREGATE: lambda r: (r("nvmlDeviceGetTotalEccErrors", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                                "NVML_AGGREGATE_ECC"), r("nvmlDeviceGetEccMode")),
    REMAP_PENDING: lambda r: _read_remap(r, lambda: r("nvmlDeviceGetRetiredPagesPendingStatus")),
    REMAP_FAILURE: lambda r: _read_remap(r, lambda: (
        r("nvmlDeviceGetRetiredPages", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
        r("nvmlDeviceGetRetiredPages", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"))),
    PCIE_WIDTH: lambda r: (r("nvmlDeviceGetCurrPcieLinkWidth"), r("nvmlDeviceGetMaxPcieLinkWidth"),
                           r("nvmlDeviceGetVirtualizationMode")),
    PCIE_GEN: lambda r: (r("nvmlDeviceGetCurrPcieLinkGeneration"), r("nvmlDeviceGetMaxPcieLinkGeneration"),
                         r("nvmlDeviceGetPerformanceState"), _event_reasons(r), r("nvmlDeviceGetVirtualizationMode")),
    PCIE_MAX_GEN: lambda r: (r("nvmlDeviceGetMaxPcieLinkGeneration"), r("nvmlDeviceGetGpuMaxPcieLinkGeneration"),
                             r("nvmlDeviceGetVirtualizationMode")),
    APP_CLOCKS: lambda r: (r("nvmlDeviceGetApplicationsClock", "NVML_CLOCK_SM"),
                           r("nvmlDeviceGetDefaultApplicationsClock", "NVML_CLOCK_SM"),
                           r("nvmlDeviceGetApplicationsClock", "NVML_CLOCK_MEM"),
                           r("nvmlDeviceGetDefaultApplicationsClock", "NVML_CLOCK_MEM")),
    LOCKED_CLOCKS: lambda r: (_event_reasons(r), r("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
                              r("nvmlDeviceGetDefaultApplicationsClock", "NVML_CLOCK_SM")),
    POWER_LIMIT: lambda r: (r("nvmlDeviceGetPowerManagementLimit"), r("nvmlDeviceGetPowerManagementDefaultLimit"),
                            r("nvmlDeviceGetEnforcedPowerLimit")),
    PERSISTENCE: lambda r: r("nvmlDeviceGetPersistenceMode"),
    COMPUTE_MODE: lambda r: r("nvmlDeviceGetComputeMode"),
}


def read_health(nvml, handle, checks: Iterable[str] = CHECKS, *,
                load: Callable[[Callable[[], None]], str] | None = None) -> list[HealthReading]:
    """What NVML says for each of ``checks`` (default all) on the GPU behind ``handle``. ``nvml`` is the
    pynvml module (already initialised) or a stand-in with its names; nothing here raises for an NVML
    error: a query that fails is kept as an :class:`Unread`. With a ``load`` (:func:`copy_load`), the
    checks of :data:`UNDER_LOAD` also get the link's width and generation sampled while it runs
    (:func:`sample_under_load`), and are judged on those."""
    checks = list(checks)
    for check in checks:
        if check not in _READS:
            raise ValueError(f"unknown health check {check!r}; the checks are {', '.join(CHECKS)}")
    loaded = sample_under_load(nvml, handle, load) if load and any(c in UNDER_LOAD for c in checks) else {}
    reader = _Reader(nvml, handle)
    readings = []
    for check in checks:
        reader.touched = {}
        _READS[check](reader)
        values = dict(reader.touched)
        if loaded and check in UNDER_LOAD:
            key = WIDTH_UNDER_LOAD if check == PCIE_WIDTH else GEN_UNDER_LOAD
            values.update({key: loaded[key], LOAD: loaded[LOAD]})
        readings.append(HealthReading(check, values))
    return readings


def sample_under_load(nvml, handle, load: Callable[[Callable[[], None]], str]) -> dict[str, object]:
    """NVML's current PCIe generation and width, read each time ``load`` calls the function it is
    given (while its copies are in flight): {GEN_UNDER_LOAD: [...], WIDTH_UNDER_LOAD: [...], LOAD: what
    ``load`` returned, the load in words}. A reading NVML refuses is kept as an :class:`Unread`."""
    reader = _Reader(nvml, handle)
    gens: list[object] = []
    widths: list[object] = []

    def sample() -> None:
        gens.append(reader._call("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkGeneration", ()))
        widths.append(reader._call("nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetCurrPcieLinkWidth", ()))
    what = load(sample)
    return {GEN_UNDER_LOAD: gens, WIDTH_UNDER_LOAD: widths, LOAD: str(what)}


def copy_load(device: int, *, seconds: float = 0.25, nbytes: int = 64 << 20, rounds: int = 5
              ) -> Callable[[Callable[[], None]], str]:  # pragma: no mutate block  (GPU only)
    """A load for :func:`read_health`: back-to-back host->device and device->host copies of ``nbytes``
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


# ----------------------------------------------------------------------------------------------
# judging


@dataclasses.dataclass
class _Judged:
    status: str
    text: str  # what NVML said, in words
    measured: float | None = None
    flags: list[str] = dataclasses.field(default_factory=list)


def _not_read(u: Unread, why: str = "") -> _Judged:
    if u.why == "unsupported":
        return _Judged(SKIPPED, str(u), flags=[f"not supported here ({u}){': ' + why if why else ''}"])
    if u.why == "no permission":
        return _Judged(SKIPPED, str(u), flags=[f"NVML refused the query ({u}): run as a user allowed to query "
                                               "the GPU"])
    return _Judged(FAIL, str(u), flags=[f"NVML could not read the GPU ({u}): check it with nvidia-smi -q and "
                                        "the kernel log (Xid); a GPU that fell off the bus reads this way"])


def _first_unread(*values) -> Unread | None:
    return next((v for v in values if isinstance(v, Unread)), None)


def _events(bits: int) -> str:
    names = [n for b, n in EVENT_BITS.items() if bits & b]
    return "+".join(names) if names else "none"


def _events_read(r: HealthReading):
    """The clock-event reasons as read: from nvmlDeviceGetCurrentClocksEventReasons, or from the older
    nvmlDeviceGetCurrentClocksThrottleReasons where the binding has only that."""
    new, old = r.get("nvmlDeviceGetCurrentClocksEventReasons"), r.get("nvmlDeviceGetCurrentClocksThrottleReasons")
    return old if old is not None and isinstance(new, Unread) else new


def _vm(r: HealthReading) -> str:
    mode = r.get("nvmlDeviceGetVirtualizationMode")
    if isinstance(mode, Unread) or mode is None:
        return ""
    return "" if mode == 0 else f"; virtualization: {VIRTUALIZATION.get(mode, mode)}"


def _in_vm(r: HealthReading) -> bool:
    mode = r.get("nvmlDeviceGetVirtualizationMode")
    return isinstance(mode, int) and mode in (1, 2)


def _share(fraction: float) -> str:
    if abs(fraction - 0.5) < 0.03:
        return "halved"
    if abs(fraction - 0.25) < 0.02:
        return "cut to a quarter"
    return f"cut to about {fraction:.0%}"


def _ecc_mode(r: HealthReading) -> _Judged:
    mode = r.get("nvmlDeviceGetEccMode")
    if isinstance(mode, Unread):
        return _not_read(mode, "this GPU has no ECC")
    current, pending = (int(x) for x in mode)
    word = {0: "disabled", 1: "enabled"}
    text = f"{word.get(current, current)} (pending: {word.get(pending, pending)})"
    if current != pending:
        return _Judged(FAIL, text, float(current), [f"ECC mode change pending ({word.get(current, current)} now, "
                                             f"{word.get(pending, pending)} after a reset): it takes effect at the "
                                             "next GPU reset (nvidia-smi -r) or reboot"])
    if not current:
        return _Judged(PASS, text, float(current), ["ECC disabled: uncorrectable memory errors go undetected; datacenter "
                                             "GPUs ship with it on (nvidia-smi -e 1, then reset the GPU)"])
    return _Judged(PASS, text, float(current))


def _ecc_count(r: HealthReading, counter: str) -> _Judged:
    count = r.get(f"nvmlDeviceGetTotalEccErrors(UNCORRECTED, {counter})")
    if isinstance(count, Unread):
        mode = r.get("nvmlDeviceGetEccMode")
        off = not isinstance(mode, Unread) and mode is not None and not int(mode[0])
        return _not_read(count, "ECC is disabled on this GPU, so there are no counts" if off else
                         "no ECC error counts on this GPU")
    text = f"{count} uncorrectable"
    if not count:
        return _Judged(PASS, text, 0.0)
    if counter == "VOLATILE":
        advice = (f"{count} uncorrectable ECC error(s) since the driver loaded: the memory returned data it could not "
                  "correct; drain the GPU, read the kernel log for Xid 48/63/64/94/95 and nvidia-smi -q -d "
                  "ECC,ROW_REMAPPER, then reset it (nvidia-smi -r) so the failing rows are remapped")
    else:
        advice = (f"{count} uncorrectable ECC error(s) over the GPU's life (kept in its InfoROM): if the volatile count "
                  "is 0 and row remapping repaired them (health_row_remap_failure passes) it may stay in service; "
                  "errors that come back mean an RMA (NVIDIA's field diagnostic)")
    return _Judged(FAIL, text, float(count), [advice])


def _neither(rows: Unread, pages: Unread) -> _Judged:
    """No row remapping and no page retirement: a GPU without ECC memory repair, or a MIG GPU with
    instances (NVML does not report remapped rows there)."""
    return _Judged(SKIPPED, f"{rows}; {pages}", flags=[
        f"not supported here ({rows}; {pages}): no row remapping or page retirement to check (a GPU without ECC, or "
        "a MIG GPU with instances)"])


def _remap_pending(r: HealthReading) -> _Judged:
    rows = r.get("nvmlDeviceGetRemappedRows")
    if not isinstance(rows, Unread):
        corr, unc, pending, _failure = (int(x) for x in rows)
        text = f"{'pending' if pending else 'not pending'} (remapped rows: {corr} correctable, {unc} uncorrectable)"
        if pending:
            return _Judged(FAIL, text, 1.0, ["pending row remap: reset the GPU (nvidia-smi -r) when idle or reboot; "
                                             "until then the remapped rows are not in use"])
        return _Judged(PASS, text, 0.0)
    pages = r.get("nvmlDeviceGetRetiredPagesPendingStatus")
    if pages is None or rows.why != "unsupported":
        return _not_read(rows)
    if isinstance(pages, Unread):
        return _neither(rows, pages) if pages.why == "unsupported" else _not_read(pages)
    text = f"retired pages {'pending' if pages else 'not pending'} (row remapping: {rows.error})"
    if pages:
        return _Judged(FAIL, text, 1.0, ["memory pages pending retirement: reset the GPU (nvidia-smi -r) when idle "
                                         "or reboot, so they are retired"])
    return _Judged(PASS, text, 0.0)


def _remap_failure(r: HealthReading) -> _Judged:
    rows = r.get("nvmlDeviceGetRemappedRows")
    if not isinstance(rows, Unread):
        corr, unc, _pending, failure = (int(x) for x in rows)
        text = f"{'failure occurred' if failure else 'no failure'} (remapped rows: {corr} correctable, {unc} " \
               "uncorrectable)"
        if failure:
            return _Judged(FAIL, text, 1.0, ["row remapping failed: a memory bank has no spare rows left; drain the "
                                             "GPU and RMA it (NVIDIA's field diagnostic confirms)"])
        return _Judged(PASS, text, 0.0)
    single = r.get("nvmlDeviceGetRetiredPages(SINGLE_BIT)")
    double = r.get("nvmlDeviceGetRetiredPages(DOUBLE_BIT)")
    if single is None or rows.why != "unsupported":
        return _not_read(rows)
    bad = _first_unread(single, double)
    if bad is not None:
        return _neither(rows, bad) if bad.why == "unsupported" else _not_read(bad)
    total = len(single) + len(double)
    text = (f"{total} retired pages ({len(double)} double-bit, {len(single)} single-bit; row remapping: "
            f"{rows.error})")
    if total >= RETIRED_PAGES_LIMIT:
        return _Judged(FAIL, text, float(total), [f"{total} retired pages, at or over the limit of "
                                                  f"{RETIRED_PAGES_LIMIT}: drain the GPU and RMA it"])
    return _Judged(PASS, text, float(total))


def _link(r: HealthReading, cur_call: str, max_call: str, fmt, what: str):
    """((current, maximum), None) for a link reading NVML answered sensibly, else (None, the verdict)."""
    cur, top = r.get(cur_call), r.get(max_call)
    bad = _first_unread(cur, top)
    if bad is not None:
        return None, _not_read(bad)
    cur, top = int(cur), int(top)
    if cur <= 0 or top <= 0 or cur > top:
        return None, _Judged(SKIPPED, f"{fmt(cur)} {what} {fmt(top)}{_vm(r)}", float(cur), [
            f"NVML reads {fmt(cur)} {what} {fmt(top)}, not a trained link: nothing to judge (it says this under some "
            "virtual machines; read lspci -vv on the host)"])
    return (cur, top), None


def _gen_share(cur: int, top: int) -> str:
    return _share(_LANE_GBPS[cur] / _LANE_GBPS[top] if cur in _LANE_GBPS and top in _LANE_GBPS else cur / top)


def judge_link_under_load(kind: str, samples: Sequence[int], top: int, load: str, *, vm: str = "") -> _Judged:
    """The PCIe link's ``kind`` ("gen" or "width") as NVML read it ``samples`` times while ``load`` kept
    the link busy, against ``top``, the most the GPU and the slot support (nvmlDeviceGetMaxPcieLinkGeneration
    / nvmlDeviceGetMaxPcieLinkWidth). A busy link trains up to its maximum, so the best reading is what
    it trained to: below ``top`` FAILs, equal PASSes. Readings that are not a trained link (0, above the
    maximum: some virtual machines) are SKIPPED as read; no reading at all FAILs (the check did not
    look). ``vm``: "; virtualization: ..." where not bare metal."""
    fmt = (lambda g: f"Gen{g}") if kind == "gen" else (lambda w: f"x{w}")
    if not samples:
        return _Judged(FAIL, f"no reading under load ({load}){vm}", None, [
            f"the PCIe {kind} was not read while the load ran ({load}): the check could not look at a busy link; "
            "read it with nvidia-smi -q -d PCIE while a copy runs"])
    best = max(samples)
    seen = ", ".join(f"{fmt(v)} in {samples.count(v)}" for v in sorted(set(samples), reverse=True))
    text = f"{fmt(best)} of {fmt(top)} under load (best of {len(samples)} readings: {seen}; {load}){vm}"
    if best <= 0 or top <= 0 or best > top:
        return _Judged(SKIPPED, text, float(best), [
            f"NVML reads {fmt(best)} of {fmt(top)} under load, not a trained link: nothing to judge (it says this "
            "under some virtual machines; read lspci -vv on the host)"])
    if best == top:
        return _Judged(PASS, text, float(best))
    if kind == "gen":
        return _Judged(FAIL, text, float(best), [
            f"PCIe Gen{best} of Gen{top} while copies kept the link busy: it trained below the most the GPU and this "
            "slot support; reseat, check the riser/slot/retimer and the BIOS PCIe speed setting; bandwidth to the "
            f"host is {_gen_share(best, top)}"])
    return _Judged(FAIL, text, float(best), [
        f"PCIe x{best} of x{top} while copies kept the link busy: it trained narrower than the GPU and this slot "
        f"support; reseat or check the riser/slot; bandwidth to the host is {_share(best / top)}"])


def _under_load(r: HealthReading, kind: str) -> _Judged:
    key, max_call = ((GEN_UNDER_LOAD, "nvmlDeviceGetMaxPcieLinkGeneration") if kind == "gen"
                     else (WIDTH_UNDER_LOAD, "nvmlDeviceGetMaxPcieLinkWidth"))
    samples, top = list(r.get(key)), r.get(max_call)
    bad = _first_unread(top, *samples)
    if bad is not None:
        return _not_read(bad)
    return judge_link_under_load(kind, [int(v) for v in samples], int(top), str(r.get(LOAD)), vm=_vm(r))


def _pcie_width(r: HealthReading) -> _Judged:
    if r.get(WIDTH_UNDER_LOAD) is not None:
        return _under_load(r, "width")
    got, early = _link(r, "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth", lambda w: f"x{w}", "of")
    if early:
        return early
    cur, top = got
    text = f"x{cur} of x{top}{_vm(r)}"
    if cur < top:
        return _Judged(FAIL, text, float(cur), [f"PCIe x{cur} of x{top}: reseat or check the riser/slot; bandwidth to "
                                                f"the host is {_share(cur / top)}"])
    return _Judged(PASS, text, float(cur))


def _pcie_gen(r: HealthReading) -> _Judged:
    if r.get(GEN_UNDER_LOAD) is not None:
        return _under_load(r, "gen")
    got, early = _link(r, "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
                       lambda g: f"Gen{g}", "of")
    if early:
        return early
    cur, top = got
    pstate = r.get("nvmlDeviceGetPerformanceState")
    events = _events_read(r)
    known = not isinstance(pstate, Unread) and pstate is not None and not isinstance(events, Unread) \
        and events is not None
    state = [f"P{pstate}" if not isinstance(pstate, Unread) and pstate is not None else f"pstate {pstate}",
             f"clock events: {_events(int(events))}" if not isinstance(events, Unread) and events is not None
             else f"clock events {events}"]
    text = f"Gen{cur} of Gen{top} ({', '.join(state)}){_vm(r)}"
    if cur == top:
        return _Judged(PASS, text, float(cur))
    if not known:
        return _Judged(SKIPPED, text, float(cur), [f"Gen{cur} of Gen{top}, and NVML cannot say whether the GPU is idle "
                                                   "(an idle GPU lowers the generation to save power): read it under "
                                                   "load (nvidia-smi -q -d PCIE while a copy runs)"])
    if pstate != 0 or int(events) & IDLE_BIT:
        return _Judged(SKIPPED, text, float(cur), [f"Gen{cur} of Gen{top} on an idle GPU: it lowers the generation "
                                                   "to save power at idle, so this reading cannot tell a downtrained "
                                                   "link from a resting one; read it under load (nvidia-smi -q -d PCIE "
                                                   "while a copy runs)"])
    return _Judged(FAIL, text, float(cur), [f"PCIe Gen{cur} of Gen{top} on a busy GPU: the link trained below its "
                                            "maximum; reseat, check the riser/slot/retimer and the BIOS PCIe speed "
                                            f"setting; bandwidth to the host is {_gen_share(cur, top)}"])


def _pcie_max_gen(r: HealthReading) -> _Judged:
    got, early = _link(r, "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetGpuMaxPcieLinkGeneration",
                       lambda g: f"Gen{g}", "link maximum, GPU")
    if early:
        return early
    link, gpu = got
    text = f"Gen{link} link maximum, GPU Gen{gpu}{_vm(r)}"
    if link == gpu:
        return _Judged(PASS, text, float(link))
    if _in_vm(r):
        return _Judged(SKIPPED, text, float(link), [f"inside a virtual machine NVML reads the link's maximum as "
                                                    f"Gen{link} of the GPU's Gen{gpu}: the virtual bridge may set "
                                                    "that, not the host slot; check the slot on the host"])
    return _Judged(FAIL, text, float(link), [f"the slot or host caps the link at Gen{link} though the GPU does "
                                             f"Gen{gpu}: check the BIOS PCIe speed setting, the riser/retimer or the "
                                             f"slot; bandwidth to the host is {_gen_share(link, gpu)}"])


def _app_clocks(r: HealthReading) -> _Judged:
    sm, sm_def = r.get("nvmlDeviceGetApplicationsClock(SM)"), r.get("nvmlDeviceGetDefaultApplicationsClock(SM)")
    mem, mem_def = r.get("nvmlDeviceGetApplicationsClock(MEM)"), r.get("nvmlDeviceGetDefaultApplicationsClock(MEM)")
    bad = _first_unread(sm, sm_def, mem, mem_def)
    if bad is not None:
        return _not_read(bad, "this GPU has no application clocks")
    text = f"SM {sm} MHz (default {sm_def}), memory {mem} MHz (default {mem_def})"
    low = [f"{what} {v} of {d} MHz" for what, v, d in (("SM", sm, sm_def), ("memory", mem, mem_def)) if v < d]
    if low:
        return _Judged(FAIL, text, float(sm), [f"application clocks below the default ({', '.join(low)}): someone set "
                                               "them with nvidia-smi -ac; restore with nvidia-smi -rac"])
    high = [f"{what} {v} over {d} MHz" for what, v, d in (("SM", sm, sm_def), ("memory", mem, mem_def)) if v > d]
    flags = [f"application clocks above the default ({', '.join(high)}): facts recorded at the default may move"] \
        if high else []
    return _Judged(PASS, text, float(sm), flags)


def _locked_clocks(r: HealthReading) -> _Judged:
    events = _events_read(r)
    clock, default = r.get("nvmlDeviceGetClockInfo(SM)"), r.get("nvmlDeviceGetDefaultApplicationsClock(SM)")
    if isinstance(events, Unread):
        return _not_read(events)
    events = int(events)
    text = f"clock events: {_events(events)}"
    have_clocks = _first_unread(clock, default) is None
    if have_clocks:
        text += f"; SM {clock} MHz (default application clock {default})"
    if not events & APP_CLOCKS_BIT:
        return _Judged(PASS, text, float(clock) if have_clocks else None)
    if not have_clocks:
        return _not_read(_first_unread(clock, default))
    if clock < default:
        return _Judged(FAIL, text, float(clock), [f"SM clock {clock} MHz held below its default {default} MHz by the "
                                                  "applications-clocks or locked-clocks setting (nvidia-smi -lgc, "
                                                  "-ac): reset with nvidia-smi -rgc (and -rmc, -rac)"])
    return _Judged(PASS, text, float(clock), [f"applications_clocks_setting active at SM {clock} MHz, not below the "
                                              f"default {default} MHz"])


def _power_limit(r: HealthReading) -> _Judged:
    limit = r.get("nvmlDeviceGetPowerManagementLimit")
    default = r.get("nvmlDeviceGetPowerManagementDefaultLimit")
    enforced = r.get("nvmlDeviceGetEnforcedPowerLimit")
    bad = _first_unread(limit, default)
    if bad is not None:
        return _not_read(bad, "this GPU has no settable power limit")
    w = lambda mw: f"{mw / 1000:g} W"  # noqa: E731
    text = f"limit {w(limit)} (default {w(default)}, enforced " + \
        (f"{w(enforced)})" if not isinstance(enforced, Unread) else f"unread: {enforced.error})")
    lowest = min(limit, enforced) if not isinstance(enforced, Unread) else limit
    if limit < default:
        return _Judged(FAIL, text, lowest / 1000, [f"power limit {w(limit)} below the default {w(default)}: clocks drop "
                                                   f"earlier under load; restore with nvidia-smi -pl {default / 1000:g}"])
    if lowest < default:
        return _Judged(FAIL, text, lowest / 1000, [f"enforced power limit {w(lowest)} below the default {w(default)} "
                                                   f"while the set limit is {w(limit)}: another limit (the BMC, "
                                                   "out of band, or a system power policy) caps it; clear it there"])
    return _Judged(PASS, text, lowest / 1000)


def _persistence(r: HealthReading) -> _Judged:
    mode = r.get("nvmlDeviceGetPersistenceMode")
    if isinstance(mode, Unread):
        return _not_read(mode)
    if int(mode):
        return _Judged(PASS, "enabled", 1.0)
    return _Judged(PASS, "disabled", 0.0, ["persistence mode off: the driver tears the GPU down when its last client "
                                           "exits (a slow first CUDA start; settings may not stick); enable it with "
                                           "nvidia-persistenced or nvidia-smi -pm 1"])


def _compute_mode(r: HealthReading) -> _Judged:
    mode = r.get("nvmlDeviceGetComputeMode")
    if isinstance(mode, Unread):
        return _not_read(mode)
    mode = int(mode)
    name = COMPUTE_MODES.get(mode, f"unknown ({mode})")
    if mode == 2:
        return _Judged(FAIL, name, 2.0, ["compute mode PROHIBITED: no CUDA context can be created, nothing runs; set "
                                         "it back with nvidia-smi -c DEFAULT"])
    if mode not in COMPUTE_MODES:
        return _Judged(FAIL, name, float(mode), [f"compute mode {mode} is none NVML documents: check nvidia-smi -q "
                                                 "and set it with nvidia-smi -c DEFAULT"])
    if mode in (1, 3):
        return _Judged(PASS, name, float(mode), [f"{name}: one CUDA process at a time on this GPU; pytest-xdist "
                                                 "workers need a GPU each (--gpuprops-gpus)"])
    return _Judged(PASS, name, 0.0)


_JUDGES = {
    ECC_MODE: _ecc_mode,
    ECC_VOLATILE: lambda r: _ecc_count(r, "VOLATILE"),
    ECC_AGGREGATE: lambda r: _ecc_count(r, "AGGREGATE"),
    REMAP_PENDING: _remap_pending,
    REMAP_FAILURE: _remap_failure,
    PCIE_WIDTH: _pcie_width,
    PCIE_GEN: _pcie_gen,
    PCIE_MAX_GEN: _pcie_max_gen,
    APP_CLOCKS: _app_clocks,
    LOCKED_CLOCKS: _locked_clocks,
    POWER_LIMIT: _power_limit,
    PERSISTENCE: _persistence,
    COMPUTE_MODE: _compute_mode,
}


def verdicts(readings: Iterable[HealthReading], gpu_identity: dict | None, *, arch: str = "") -> list[
        assertions.Verdict]:
    """One verdict per reading: kind "health", PASS / FAIL / SKIPPED. A FAIL's first flag says what to do;
    a SKIPPED's says why nothing could be judged; a PASS may carry a note (ECC off, persistence off)."""
    out = []
    for r in readings:
        j = _JUDGES[r.check](r)
        out.append(assertions.Verdict(
            fact=r.check, arch=arch, status=j.status, expected=_EXPECTED[r.check], measured=j.measured,
            measured_text=j.text, unit=_UNIT[r.check], method=_METHOD[r.check], source=_SOURCE[r.check],
            kind="health", flags=list(j.flags), gpu=dict(gpu_identity) if gpu_identity else None, scope="gpu"))
    return out


def reason(v: assertions.Verdict) -> str:
    """What a verdict's flags say, in one line (the skip reason of a SKIPPED health verdict)."""
    return "; ".join(v.flags) or v.measured_text


def record(checker, verdict: assertions.Verdict) -> assertions.Verdict:
    """Record a health verdict through a test's FactChecker (``gpuprops`` fixture), as a fact's is: it
    joins the test's report part, and a FAIL raises with the verdict's message (what to do)."""
    if not verdict.reproduce:
        verdict.reproduce = checker.reproduce()
    return checker._finish(verdict)
