"""health layer, verdicts: one :class:`~pytest_gpuprops.assertions.Verdict` per check read (kind
``"health"``, named ``health_<what>``), with what it expected, how NVML was asked and the source of
the threshold; :func:`record` hands one to a test's FactChecker, so it reaches the report as a fact's
verdict does. A check NVML cannot answer on this GPU (NotSupported, a binding without the call) is
SKIPPED with the reason, never a PASS that asserts nothing; any other NVML error (a lost GPU) is a
FAIL. A health verdict skips nothing else: the facts still run. docs/validation.md lists the
checks, their thresholds and DCGM's corresponding checks.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import assertions, health_judges, health_link
from .health import (
    APP_CLOCKS,
    COMPUTE_MODE,
    ECC_AGGREGATE,
    ECC_MODE,
    ECC_VOLATILE,
    LOCKED_CLOCKS,
    PCIE_GEN,
    PCIE_MAX_GEN,
    PCIE_WIDTH,
    PERSISTENCE,
    POWER_LIMIT,
    REMAP_FAILURE,
    REMAP_PENDING,
    HealthReading,
)
from .health_judges import RETIRED_PAGES_LIMIT

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
_JUDGES = {**health_judges.JUDGES, **health_link.JUDGES}


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
