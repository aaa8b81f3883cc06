"""health layer, reading: what NVML says about a GPU before any fact is measured on it, read without
launching a kernel. Uncorrectable ECC errors, pending or failed row remaps, the PCIe link against its
maximum, application clocks, locked clocks and the power limit against their defaults, persistence
and compute mode: what a driver update, a reset or a reseat most often leaves wrong.

No pytest here. :func:`read_health` takes the NVML module as a parameter (pynvml, or a stand-in
with the same function names, constants and exception classes) and returns what each check read, a
query NVML did not answer kept as an :class:`Unread`; given a ``load`` (health_load.copy_load:
host<->device copies), the PCIe width and generation are also sampled while it keeps the link busy,
since an idle link trains down to save power. Judging the readings is health_verdicts.py's (the
thresholds in health_judges.py and health_link.py); docs/validation.md lists the checks, their
thresholds and DCGM's corresponding checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

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
