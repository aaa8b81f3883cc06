"""A stand-in for pynvml as the health checks read it (pytest_gpuprops/health.py): pynvml's function
names, constants and exception classes, returning the values of a healthy H100 SXM at idle unless a
test plants others (tests/test_health_reading.py checks the names against the installed
nvidia-ml-py). Shared by the health tests: reading, the link's judges and the verdicts."""

from pytest_gpuprops import health, health_verdicts


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's names)
    pass


class NVMLError_NoPermission(NVMLError):  # noqa: N801
    pass


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    pass


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    pass


#: an H100 SXM at idle, healthy (what NVML returns, by the stand-in's key)
H100 = {
    "ecc_mode": [1, 1], "ecc_volatile": 0, "ecc_aggregate": 0,
    "remapped_rows": (0, 0, 0, 0), "retired_pending": NVMLError_NotSupported, "retired_single": [],
    "retired_double": [],
    "width": 16, "max_width": 16, "gen": 5, "max_gen": 5, "gpu_max_gen": 5, "pstate": 0, "events": 0x1,
    "virtualization": 0,
    "app_sm": 1980, "default_sm": 1980, "app_mem": 2619, "default_mem": 2619, "clock_sm": 345,
    "power_limit": 700000, "power_default": 700000, "power_enforced": 700000,
    "persistence": 1, "compute": 0,
}


class FakeNvml:
    """pynvml's surface as health.py reads it, returning ``values`` (an exception class raises)."""
    NVMLError, NVMLError_NotSupported, NVMLError_NoPermission = NVMLError, NVMLError_NotSupported, NVMLError_NoPermission
    NVMLError_GpuIsLost, NVMLError_FunctionNotFound = NVMLError_GpuIsLost, NVMLError_FunctionNotFound
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 0, 1

    def __init__(self, missing=(), **planted):
        unknown = set(planted) - set(H100)
        assert not unknown, unknown
        self.values = {**H100, **planted}
        self.calls: list[str] = []
        for name in missing:  # a binding without the function
            setattr(self, name, None)

    def _v(self, key, handle):
        assert handle == "handle"
        v = self.values[key]
        if isinstance(v, type) and issubclass(v, Exception):
            raise v()
        return v

    def _track(name):  # noqa: N805
        def deco(fn):
            def wrapped(self, *args):
                self.calls.append(name)
                return fn(self, *args)
            return wrapped
        return deco

    @_track("nvmlDeviceGetEccMode")
    def nvmlDeviceGetEccMode(self, h):
        return self._v("ecc_mode", h)

    @_track("nvmlDeviceGetTotalEccErrors")
    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        assert error_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        return self._v({0: "ecc_volatile", 1: "ecc_aggregate"}[counter], h)

    @_track("nvmlDeviceGetRemappedRows")
    def nvmlDeviceGetRemappedRows(self, h):
        return self._v("remapped_rows", h)

    @_track("nvmlDeviceGetRetiredPagesPendingStatus")
    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._v("retired_pending", h)

    @_track("nvmlDeviceGetRetiredPages")
    def nvmlDeviceGetRetiredPages(self, h, cause):
        return self._v({0: "retired_single", 1: "retired_double"}[cause], h)

    @_track("nvmlDeviceGetCurrPcieLinkWidth")
    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._v("width", h)

    @_track("nvmlDeviceGetMaxPcieLinkWidth")
    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._v("max_width", h)

    @_track("nvmlDeviceGetCurrPcieLinkGeneration")
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._v("gen", h)

    @_track("nvmlDeviceGetMaxPcieLinkGeneration")
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._v("max_gen", h)

    @_track("nvmlDeviceGetGpuMaxPcieLinkGeneration")
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self._v("gpu_max_gen", h)

    @_track("nvmlDeviceGetPerformanceState")
    def nvmlDeviceGetPerformanceState(self, h):
        return self._v("pstate", h)

    @_track("nvmlDeviceGetCurrentClocksEventReasons")
    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._v("events", h)

    @_track("nvmlDeviceGetCurrentClocksThrottleReasons")
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._v("events", h)

    @_track("nvmlDeviceGetVirtualizationMode")
    def nvmlDeviceGetVirtualizationMode(self, h):
        return self._v("virtualization", h)

    @_track("nvmlDeviceGetApplicationsClock")
    def nvmlDeviceGetApplicationsClock(self, h, clock):
        return self._v({1: "app_sm", 2: "app_mem"}[clock], h)

    @_track("nvmlDeviceGetDefaultApplicationsClock")
    def nvmlDeviceGetDefaultApplicationsClock(self, h, clock):
        return self._v({1: "default_sm", 2: "default_mem"}[clock], h)

    @_track("nvmlDeviceGetClockInfo")
    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == self.NVML_CLOCK_SM
        return self._v("clock_sm", h)

    @_track("nvmlDeviceGetPowerManagementLimit")
    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._v("power_limit", h)

    @_track("nvmlDeviceGetPowerManagementDefaultLimit")
    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._v("power_default", h)

    @_track("nvmlDeviceGetEnforcedPowerLimit")
    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._v("power_enforced", h)

    @_track("nvmlDeviceGetPersistenceMode")
    def nvmlDeviceGetPersistenceMode(self, h):
        return self._v("persistence", h)

    @_track("nvmlDeviceGetComputeMode")
    def nvmlDeviceGetComputeMode(self, h):
        return self._v("compute", h)

    del _track


GPU = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "pci_bus_id": "0000:01:00.0", "host": "n1"}


def judge(nvml=None, *, load=None, **planted) -> dict:
    """{check: verdict} for the stand-in with ``planted`` values (read under ``load`` if given)."""
    nvml = nvml or FakeNvml(**planted)
    return {v.fact: v for v in health_verdicts.verdicts(health.read_health(nvml, "handle", load=load), GPU, arch="sm_90")}


def planted_load(nvml, samples=3, **during):
    """A load for read_health: NVML reads ``during``'s values while it runs (a link that trains up, or
    does not, under copies), calling the sample function ``samples`` times; the idle values after."""
    def load(sample):
        idle = dict(nvml.values)
        nvml.values.update(during)
        try:
            for _ in range(samples):
                sample()
        finally:
            nvml.values = idle
        return "planted copies, 25.0 GB/s"
    return load


def row(v):
    return v.status, v.measured_text, v.flags
