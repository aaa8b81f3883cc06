"""The health checks (pytest_gpuprops/health.py) against a stand-in NVML: a healthy H100-like GPU,
then each fault planted on it, with the exact verdict and what it tells the operator to do. No GPU:
the stand-in has pynvml's function names, constants and exception classes (a test checks them
against the installed nvidia-ml-py), and hwtests/test_health.py runs on a fake GPU through the
plugin's own recording path."""

import json
from pathlib import Path

import pytest
from gp_testing import fake_gpu_conftest

from pytest_gpuprops import devices, health
from pytest_gpuprops.assertions import FAIL, PASS, SKIPPED

REPO = Path(__file__).parent.parent


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
    """pynvml's surface as health.py uses it, returning ``values`` (an exception class raises)."""
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
    return {v.fact: v for v in health.verdicts(health.read_health(nvml, "handle", load=load), GPU, arch="sm_90")}


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


# ----------------------------------------------------------------------------------------------
# a healthy GPU


def test_a_healthy_h100_passes_every_check_with_what_nvml_said():
    got = judge()
    assert list(got) == list(health.CHECKS)
    assert {k: row(v) for k, v in got.items()} == {
        "health_ecc_mode": (PASS, "enabled (pending: enabled)", []),
        "health_ecc_uncorrectable_volatile": (PASS, "0 uncorrectable", []),
        "health_ecc_uncorrectable_aggregate": (PASS, "0 uncorrectable", []),
        "health_row_remap_pending": (PASS, "not pending (remapped rows: 0 correctable, 0 uncorrectable)", []),
        "health_row_remap_failure": (PASS, "no failure (remapped rows: 0 correctable, 0 uncorrectable)", []),
        "health_pcie_link_width": (PASS, "x16 of x16", []),
        "health_pcie_link_gen": (PASS, "Gen5 of Gen5 (P0, clock events: gpu_idle)", []),
        "health_pcie_link_max_gen": (PASS, "Gen5 link maximum, GPU Gen5", []),
        "health_app_clocks_default": (PASS, "SM 1980 MHz (default 1980), memory 2619 MHz (default 2619)", []),
        "health_locked_clocks": (PASS, "clock events: gpu_idle; SM 345 MHz (default application clock 1980)", []),
        "health_power_limit_default": (PASS, "limit 700 W (default 700 W, enforced 700 W)", []),
        "health_persistence_mode": (PASS, "enabled", []),
        "health_compute_mode": (PASS, "DEFAULT", []),
    }
    v = got["health_power_limit_default"]
    assert (v.kind, v.arch, v.gpu, v.measured, v.unit, v.expected, v.scope) == \
        ("health", "sm_90", GPU, 700.0, "W", "limit and enforced >= default", "gpu")
    assert got["health_pcie_link_width"].measured == 16.0 and got["health_ecc_uncorrectable_volatile"].measured == 0.0


def test_each_nvml_query_is_made_once_and_only_the_asked_checks_read():
    nvml = FakeNvml()
    health.read_health(nvml, "handle")
    assert nvml.calls.count("nvmlDeviceGetEccMode") == 1  # three checks use it
    assert nvml.calls.count("nvmlDeviceGetVirtualizationMode") == 1
    assert "nvmlDeviceGetRetiredPagesPendingStatus" not in nvml.calls  # rows are remapped: no fallback
    nvml = FakeNvml()
    (r,) = health.read_health(nvml, "handle", ["health_compute_mode"])
    assert nvml.calls == ["nvmlDeviceGetComputeMode"] and r.values == {"nvmlDeviceGetComputeMode": 0}
    with pytest.raises(ValueError, match="unknown health check 'health_x'; the checks are health_ecc_mode, "):
        health.read_health(nvml, "handle", ["health_x"])


# ----------------------------------------------------------------------------------------------
# each fault planted


def test_pcie_x8_of_x16_fails_saying_reseat_and_that_bandwidth_is_halved():
    v = judge(width=8)["health_pcie_link_width"]
    assert row(v) == (FAIL, "x8 of x16", ["PCIe x8 of x16: reseat or check the riser/slot; bandwidth to the host is "
                                          "halved"])
    assert v.measured == 8.0
    assert judge(width=4)["health_pcie_link_width"].flags == [
        "PCIe x4 of x16: reseat or check the riser/slot; bandwidth to the host is cut to a quarter"]


def test_a_volatile_uncorrectable_ecc_error_fails_and_says_drain_and_reset():
    got = judge(ecc_volatile=1)
    assert row(got["health_ecc_uncorrectable_volatile"]) == (FAIL, "1 uncorrectable", [
        "1 uncorrectable ECC error(s) since the driver loaded: the memory returned data it could not correct; drain "
        "the GPU, read the kernel log for Xid 48/63/64/94/95 and nvidia-smi -q -d ECC,ROW_REMAPPER, then reset it "
        "(nvidia-smi -r) so the failing rows are remapped"])
    assert got["health_ecc_uncorrectable_aggregate"].status == PASS
    agg = judge(ecc_aggregate=3)["health_ecc_uncorrectable_aggregate"]
    assert (agg.status, agg.measured) == (FAIL, 3.0)
    assert agg.flags[0].startswith("3 uncorrectable ECC error(s) over the GPU's life (kept in its InfoROM)")


def test_a_pending_row_remap_fails_saying_reset_the_gpu():
    got = judge(remapped_rows=(0, 1, 1, 0))
    assert row(got["health_row_remap_pending"]) == (
        FAIL, "pending (remapped rows: 0 correctable, 1 uncorrectable)",
        ["pending row remap: reset the GPU (nvidia-smi -r) when idle or reboot; until then the remapped rows are not "
         "in use"])
    assert got["health_row_remap_failure"].status == PASS


def test_a_row_remap_failure_fails_saying_rma():
    v = judge(remapped_rows=(2, 5, 0, 1))["health_row_remap_failure"]
    assert row(v) == (FAIL, "failure occurred (remapped rows: 2 correctable, 5 uncorrectable)",
                      ["row remapping failed: a memory bank has no spare rows left; drain the GPU and RMA it (NVIDIA's "
                       "field diagnostic confirms)"])


def test_application_clocks_below_the_default_fail_saying_nvidia_smi_rac():
    got = judge(app_sm=1500)
    assert row(got["health_app_clocks_default"]) == (
        FAIL, "SM 1500 MHz (default 1980), memory 2619 MHz (default 2619)",
        ["application clocks below the default (SM 1500 of 1980 MHz): someone set them with nvidia-smi -ac; restore "
         "with nvidia-smi -rac"])
    above = judge(app_mem=2700)["health_app_clocks_default"]
    assert row(above) == (PASS, "SM 1980 MHz (default 1980), memory 2700 MHz (default 2619)",
                          ["application clocks above the default (memory 2700 over 2619 MHz): facts recorded at the "
                           "default may move"])


def test_a_power_limit_below_the_default_fails_saying_nvidia_smi_pl():
    v = judge(power_limit=500000, power_enforced=500000)["health_power_limit_default"]
    assert row(v) == (FAIL, "limit 500 W (default 700 W, enforced 500 W)",
                      ["power limit 500 W below the default 700 W: clocks drop earlier under load; restore with "
                       "nvidia-smi -pl 700"])
    assert v.measured == 500.0
    oob = judge(power_enforced=450000)["health_power_limit_default"]
    assert row(oob) == (FAIL, "limit 700 W (default 700 W, enforced 450 W)",
                        ["enforced power limit 450 W below the default 700 W while the set limit is 700 W: another "
                         "limit (the BMC, out of band, or a system power policy) caps it; clear it there"])
    assert judge(power_limit=750000, power_enforced=750000)["health_power_limit_default"].status == PASS


def test_compute_mode_prohibited_fails_and_exclusive_process_passes_with_a_note():
    assert row(judge(compute=2)["health_compute_mode"]) == (
        FAIL, "PROHIBITED", ["compute mode PROHIBITED: no CUDA context can be created, nothing runs; set it back with "
                             "nvidia-smi -c DEFAULT"])
    assert row(judge(compute=3)["health_compute_mode"]) == (
        PASS, "EXCLUSIVE_PROCESS", ["EXCLUSIVE_PROCESS: one CUDA process at a time on this GPU; pytest-xdist workers "
                                    "need a GPU each (--gpuprops-gpus)"])
    assert judge(compute=7)["health_compute_mode"].status == FAIL


def test_without_row_remapping_page_retirement_answers_and_without_both_the_checks_skip_saying_so():
    # before Ampere: no row remapping, page retirement instead
    got = judge(remapped_rows=NVMLError_NotSupported, retired_pending=0, retired_single=[1, 2], retired_double=[3])
    assert row(got["health_row_remap_pending"]) == (PASS, "retired pages not pending (row remapping: NotSupported)", [])
    assert row(got["health_row_remap_failure"]) == (
        PASS, "3 retired pages (1 double-bit, 2 single-bit; row remapping: NotSupported)", [])
    pending = judge(remapped_rows=NVMLError_NotSupported, retired_pending=1)["health_row_remap_pending"]
    assert row(pending) == (FAIL, "retired pages pending (row remapping: NotSupported)",
                            ["memory pages pending retirement: reset the GPU (nvidia-smi -r) when idle or reboot, so "
                             "they are retired"])
    full = judge(remapped_rows=NVMLError_NotSupported, retired_pending=0, retired_double=list(range(63)))
    assert row(full["health_row_remap_failure"]) == (
        FAIL, "63 retired pages (63 double-bit, 0 single-bit; row remapping: NotSupported)",
        ["63 retired pages, at or over the limit of 63: drain the GPU and RMA it"])
    # neither (a GPU without ECC, or MIG with instances): a skip that says so, not a pass
    none = judge(remapped_rows=NVMLError_NotSupported, retired_single=NVMLError_NotSupported,
                 retired_double=NVMLError_NotSupported)
    for check, call in (("health_row_remap_pending", "nvmlDeviceGetRetiredPagesPendingStatus"),
                        ("health_row_remap_failure", "nvmlDeviceGetRetiredPages(SINGLE_BIT)")):
        v = none[check]
        said = f"nvmlDeviceGetRemappedRows: NotSupported; {call}: NotSupported"
        assert (v.status, v.measured, v.measured_text) == (SKIPPED, None, said)
        assert v.flags == [f"not supported here ({said}): no row remapping or page retirement to check (a GPU without "
                           "ECC, or a MIG GPU with instances)"]
        assert health.reason(v) == v.flags[0]


# ----------------------------------------------------------------------------------------------
# the PCIe link read honestly


def test_a_lower_generation_on_an_idle_gpu_skips_and_on_a_busy_one_fails():
    idle = judge(gen=1)["health_pcie_link_gen"]
    assert row(idle) == (SKIPPED, "Gen1 of Gen5 (P0, clock events: gpu_idle)", [
        "Gen1 of Gen5 on an idle GPU: it lowers the generation to save power at idle, so this reading cannot tell a "
        "downtrained link from a resting one; read it under load (nvidia-smi -q -d PCIE while a copy runs)"])
    assert idle.measured == 1.0
    assert judge(gen=1, pstate=8, events=0)["health_pcie_link_gen"].status == SKIPPED
    busy = judge(gen=4, events=0)["health_pcie_link_gen"]
    assert row(busy) == (FAIL, "Gen4 of Gen5 (P0, clock events: none)", [
        "PCIe Gen4 of Gen5 on a busy GPU: the link trained below its maximum; reseat, check the riser/slot/retimer and "
        "the BIOS PCIe speed setting; bandwidth to the host is halved"])
    unknown = judge(gen=4, pstate=NVMLError_NotSupported)["health_pcie_link_gen"]
    assert unknown.status == SKIPPED and unknown.measured_text.startswith("Gen4 of Gen5 (pstate nvmlDeviceGet")
    assert "NVML cannot say whether the GPU is idle" in unknown.flags[0]


def test_a_slot_that_caps_the_generation_fails_on_bare_metal_and_skips_in_a_vm():
    v = judge(max_gen=4, gen=4)
    assert row(v["health_pcie_link_max_gen"]) == (FAIL, "Gen4 link maximum, GPU Gen5", [
        "the slot or host caps the link at Gen4 though the GPU does Gen5: check the BIOS PCIe speed setting, the "
        "riser/retimer or the slot; bandwidth to the host is halved"])
    assert v["health_pcie_link_gen"].status == PASS  # Gen4 of the link's Gen4
    vm = judge(max_gen=4, virtualization=1)["health_pcie_link_max_gen"]
    assert row(vm) == (SKIPPED, "Gen4 link maximum, GPU Gen5; virtualization: passthrough", [
        "inside a virtual machine NVML reads the link's maximum as Gen4 of the GPU's Gen5: the virtual bridge may set "
        "that, not the host slot; check the slot on the host"])


def test_odd_link_readings_are_reported_as_read_and_judged_by_nobody():
    got = judge(width=0, virtualization=1)
    assert row(got["health_pcie_link_width"]) == (SKIPPED, "x0 of x16; virtualization: passthrough", [
        "NVML reads x0 of x16, not a trained link: nothing to judge (it says this under some virtual machines; read "
        "lspci -vv on the host)"])
    assert row(got["health_pcie_link_gen"]) == (
        PASS, "Gen5 of Gen5 (P0, clock events: gpu_idle); virtualization: passthrough", [])
    assert judge(gen=6)["health_pcie_link_gen"].status == SKIPPED  # above its maximum
    assert judge(max_gen=6)["health_pcie_link_max_gen"].status == SKIPPED


# ----------------------------------------------------------------------------------------------
# the PCIe link under load: an idle link trains down, a busy one shows what it trained to


@pytest.mark.parametrize("kind, samples, top, status, text, flag", [
    ("gen", [1, 4, 4], 5, FAIL, "Gen4 of Gen5 under load (best of 3 readings: Gen4 in 2, Gen1 in 1; copies)",
     "PCIe Gen4 of Gen5 while copies kept the link busy: it trained below the most the GPU and this slot support; "
     "reseat, check the riser/slot/retimer and the BIOS PCIe speed setting; bandwidth to the host is halved"),
    ("gen", [3], 5, FAIL, "Gen3 of Gen5 under load (best of 1 readings: Gen3 in 1; copies)",
     "PCIe Gen3 of Gen5 while copies kept the link busy: it trained below the most the GPU and this slot support; "
     "reseat, check the riser/slot/retimer and the BIOS PCIe speed setting; bandwidth to the host is cut to a quarter"),
    ("width", [8, 8], 16, FAIL, "x8 of x16 under load (best of 2 readings: x8 in 2; copies)",
     "PCIe x8 of x16 while copies kept the link busy: it trained narrower than the GPU and this slot support; "
     "reseat or check the riser/slot; bandwidth to the host is halved"),
    ("gen", [1, 5, 5], 5, PASS, "Gen5 of Gen5 under load (best of 3 readings: Gen5 in 2, Gen1 in 1; copies)", None),
    ("width", [16], 16, PASS, "x16 of x16 under load (best of 1 readings: x16 in 1; copies)", None),
    ("gen", [0, 0], 5, SKIPPED, "Gen0 of Gen5 under load (best of 2 readings: Gen0 in 2; copies)",
     "NVML reads Gen0 of Gen5 under load, not a trained link: nothing to judge (it says this under some virtual "
     "machines; read lspci -vv on the host)"),
    ("width", [32], 16, SKIPPED, "x32 of x16 under load (best of 1 readings: x32 in 1; copies)",
     "NVML reads x32 of x16 under load, not a trained link: nothing to judge (it says this under some virtual "
     "machines; read lspci -vv on the host)"),
    ("gen", [], 5, FAIL, "no reading under load (copies)",
     "the PCIe gen was not read while the load ran (copies): the check could not look at a busy link; read it with "
     "nvidia-smi -q -d PCIE while a copy runs"),
])
def test_the_link_under_load_is_judged_by_its_best_reading_against_the_maximum(kind, samples, top, status, text, flag):
    j = health.judge_link_under_load(kind, samples, top, "copies")
    assert (j.status, j.text, j.flags) == (status, text, [flag] if flag else [])
    assert j.measured == (float(max(samples)) if samples else None)


def test_a_link_stuck_below_its_generation_under_load_fails_even_where_it_idled_at_gen1():
    """At idle the generation reads Gen1 in P8, which the idle reading can only skip; under the copies it
    must train to Gen5: a link that stays at Gen4 fails, one that reaches Gen5 passes."""
    idle = dict(gen=1, pstate=8, events=0x1)
    assert judge(**idle)["health_pcie_link_gen"].status == SKIPPED  # no load: nothing to judge at idle
    nvml = FakeNvml(**idle)
    stuck = judge(nvml, load=planted_load(nvml, gen=4, pstate=0, events=0))["health_pcie_link_gen"]
    assert row(stuck) == (FAIL, "Gen4 of Gen5 under load (best of 3 readings: Gen4 in 3; planted copies, 25.0 GB/s)", [
        "PCIe Gen4 of Gen5 while copies kept the link busy: it trained below the most the GPU and this slot support; "
        "reseat, check the riser/slot/retimer and the BIOS PCIe speed setting; bandwidth to the host is halved"])
    assert stuck.measured == 4.0 and stuck.expected == "current gen = max gen (busy GPU)"
    nvml = FakeNvml(**idle)
    assert judge(nvml, load=planted_load(nvml, gen=5))["health_pcie_link_gen"].status == PASS
    nvml = FakeNvml(width=8)
    narrow = judge(nvml, load=planted_load(nvml, width=8))["health_pcie_link_width"]
    assert narrow.status == FAIL and narrow.measured_text.startswith("x8 of x16 under load")
    nvml = FakeNvml(width=8)  # narrower at idle only: it trains to x16 under load
    assert judge(nvml, load=planted_load(nvml, width=16))["health_pcie_link_width"].status == PASS


def test_under_load_a_gpu_without_the_query_skips_saying_so_and_an_nvml_error_fails():
    nvml = FakeNvml(gen=NVMLError_NotSupported)
    v = judge(nvml, load=planted_load(nvml))["health_pcie_link_gen"]
    assert row(v) == (SKIPPED, "nvmlDeviceGetCurrPcieLinkGeneration: NotSupported", [
        "not supported here (nvmlDeviceGetCurrPcieLinkGeneration: NotSupported)"])
    nvml = FakeNvml()
    lost = judge(nvml, load=planted_load(nvml, width=NVMLError_GpuIsLost))["health_pcie_link_width"]
    assert lost.status == FAIL and lost.measured_text == "nvmlDeviceGetCurrPcieLinkWidth: GpuIsLost"
    nvml = FakeNvml(max_gen=NVMLError_NotSupported)
    assert judge(nvml, load=planted_load(nvml))["health_pcie_link_gen"].status == SKIPPED


def test_the_load_runs_only_for_the_link_checks_and_its_readings_are_kept_with_them():
    ran = []

    def load(sample):
        ran.append(1)
        sample()
        return "copies"
    nvml = FakeNvml()
    (r,) = health.read_health(nvml, "handle", ["health_compute_mode"], load=load)
    assert ran == [] and nvml.calls == ["nvmlDeviceGetComputeMode"]
    width, gen = health.read_health(nvml, "handle", ["health_pcie_link_width", "health_pcie_link_gen"], load=load)
    assert ran == [1]  # one load serves both checks
    assert width.values[health.WIDTH_UNDER_LOAD] == [16] and width.values[health.LOAD] == "copies"
    assert gen.values[health.GEN_UNDER_LOAD] == [5] and health.WIDTH_UNDER_LOAD not in gen.values


# ----------------------------------------------------------------------------------------------
# clocks, modes, and what NVML could not answer


def test_locked_clocks_below_the_default_fail_and_the_setting_at_the_default_passes():
    v = judge(events=0x2, clock_sm=1000)["health_locked_clocks"]
    assert row(v) == (FAIL, "clock events: applications_clocks_setting; SM 1000 MHz (default application clock 1980)", [
        "SM clock 1000 MHz held below its default 1980 MHz by the applications-clocks or locked-clocks setting "
        "(nvidia-smi -lgc, -ac): reset with nvidia-smi -rgc (and -rmc, -rac)"])
    at = judge(events=0x2, clock_sm=1980)["health_locked_clocks"]
    assert (at.status, at.flags) == (PASS, ["applications_clocks_setting active at SM 1980 MHz, not below the default "
                                            "1980 MHz"])
    busy = judge(events=0x4 | 0x40, clock_sm=1500)["health_locked_clocks"]  # power and thermal: not a setting
    assert row(busy) == (PASS, "clock events: sw_power_cap+hw_thermal_slowdown; SM 1500 MHz (default application "
                               "clock 1980)", [])


def test_older_bindings_read_the_throttle_reasons_instead():
    nvml = FakeNvml(missing=["nvmlDeviceGetCurrentClocksEventReasons"], events=0x2, clock_sm=1000)
    got = judge(nvml)
    assert got["health_locked_clocks"].status == FAIL
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in nvml.calls


def test_ecc_disabled_passes_with_a_note_and_its_counts_skip_saying_why():
    got = judge(ecc_mode=[0, 0], ecc_volatile=NVMLError_NotSupported, ecc_aggregate=NVMLError_NotSupported)
    assert row(got["health_ecc_mode"]) == (PASS, "disabled (pending: disabled)", [
        "ECC disabled: uncorrectable memory errors go undetected; datacenter GPUs ship with it on (nvidia-smi -e 1, "
        "then reset the GPU)"])
    v = got["health_ecc_uncorrectable_volatile"]
    assert row(v) == (SKIPPED, "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE): NotSupported", [
        "not supported here (nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE): NotSupported): ECC is disabled on "
        "this GPU, so there are no counts"])
    pending = judge(ecc_mode=[0, 1])["health_ecc_mode"]
    assert row(pending) == (FAIL, "disabled (pending: enabled)", [
        "ECC mode change pending (disabled now, enabled after a reset): it takes effect at the next GPU reset "
        "(nvidia-smi -r) or reboot"])
    no_ecc = judge(ecc_mode=NVMLError_NotSupported, ecc_volatile=NVMLError_NotSupported)
    assert no_ecc["health_ecc_mode"].flags == ["not supported here (nvmlDeviceGetEccMode: NotSupported): this GPU has "
                                               "no ECC"]
    assert no_ecc["health_ecc_uncorrectable_volatile"].flags[0].endswith(": no ECC error counts on this GPU")


def test_persistence_off_passes_with_a_note():
    assert row(judge(persistence=0)["health_persistence_mode"]) == (PASS, "disabled", [
        "persistence mode off: the driver tears the GPU down when its last client exits (a slow first CUDA start; "
        "settings may not stick); enable it with nvidia-persistenced or nvidia-smi -pm 1"])


def test_an_nvml_error_fails_a_missing_query_or_permission_skips():
    lost = judge(compute=NVMLError_GpuIsLost)["health_compute_mode"]
    assert row(lost) == (FAIL, "nvmlDeviceGetComputeMode: GpuIsLost", [
        "NVML could not read the GPU (nvmlDeviceGetComputeMode: GpuIsLost): check it with nvidia-smi -q and the "
        "kernel log (Xid); a GPU that fell off the bus reads this way"])
    denied = judge(power_limit=NVMLError_NoPermission)["health_power_limit_default"]
    assert row(denied) == (SKIPPED, "nvmlDeviceGetPowerManagementLimit: NoPermission", [
        "NVML refused the query (nvmlDeviceGetPowerManagementLimit: NoPermission): run as a user allowed to query "
        "the GPU"])
    gone = judge(FakeNvml(missing=["nvmlDeviceGetGpuMaxPcieLinkGeneration"]))["health_pcie_link_max_gen"]
    assert row(gone) == (SKIPPED, "nvmlDeviceGetGpuMaxPcieLinkGeneration: not in this NVML binding "
                                  "(nvmlDeviceGetGpuMaxPcieLinkGeneration)", [
        "not supported here (nvmlDeviceGetGpuMaxPcieLinkGeneration: not in this NVML binding "
        "(nvmlDeviceGetGpuMaxPcieLinkGeneration))"])
    plain = judge(persistence=NVMLError)["health_persistence_mode"]
    assert plain.status == FAIL and plain.measured_text == "nvmlDeviceGetPersistenceMode: NVMLError ()"
    no_app = judge(app_sm=NVMLError_NotSupported)["health_app_clocks_default"]
    assert no_app.status == SKIPPED and no_app.flags[0].endswith(": this GPU has no application clocks")
    failed_remap_query = judge(remapped_rows=NVMLError_GpuIsLost)
    assert failed_remap_query["health_row_remap_pending"].status == FAIL  # an error is not "unsupported": no fallback


def test_the_stand_in_matches_the_installed_pynvml():
    """Names, constant values and exception classes the stand-in copies, and every NVML function health.py
    calls, as the installed nvidia-ml-py has them."""
    pynvml = pytest.importorskip("pynvml")
    for name in dir(FakeNvml):
        if name.startswith("NVML_"):
            assert getattr(pynvml, name) == getattr(FakeNvml, name), name
        elif name.startswith("NVMLError"):
            assert issubclass(getattr(pynvml, name), pynvml.NVMLError), name
        elif name.startswith("nvml"):
            assert callable(getattr(pynvml, name)), name
    nvml = FakeNvml()
    health.read_health(nvml, "handle")
    assert set(nvml.calls) <= {n for n in dir(pynvml) if n.startswith("nvml")}
    assert all(getattr(pynvml, f"nvmlClocksEventReason{n}") == b for b, n in [
        (0x1, "GpuIdle"), (0x2, "ApplicationsClocksSetting"), (0x4, "SwPowerCap"), (0x8, "HwSlowdown"),
        (0x20, "SwThermalSlowdown"), (0x40, "HwThermalSlowdown"), (0x80, "HwPowerBrakeSlowdown")])
    assert [pynvml.NVML_COMPUTEMODE_DEFAULT, pynvml.NVML_COMPUTEMODE_PROHIBITED,
            pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS] == [0, 2, 3]
    assert pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH == 1


# ----------------------------------------------------------------------------------------------
# through the plugin: hwtests/test_health.py on a fake GPU


def _run_hwtest(pytester, monkeypatch, nvml, *args, under_load=None):
    """hwtests/test_health.py on a fake GPU whose NVML is ``nvml``; its copy load planted: NVML reads
    ``under_load``'s values while it runs (default: as at idle)."""
    pytester.makeconftest(fake_gpu_conftest("sm_90"))
    # not named test_health: hwtests/test_health.py may be imported in this process already
    pytester.makepyfile(test_gpu_health=(REPO / "hwtests" / "test_health.py").read_text())
    monkeypatch.setattr(devices, "_nvml_handle", lambda pci: (nvml, "handle") if nvml else (None, None))
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(pytester.path))
    loads = []

    def copy_load(device, **kw):
        loads.append(device)
        return planted_load(nvml, **(under_load or {}))
    monkeypatch.setattr(health, "copy_load", copy_load)
    r = pytester.runpytest_inprocess("-p", "no:randomly", "-rs", *args)
    r.loads = loads
    return r


def test_the_gpu_file_records_health_verdicts_and_a_failure_says_what_to_do(pytester, monkeypatch):
    r = _run_hwtest(pytester, monkeypatch, FakeNvml(width=8, remapped_rows=NVMLError_NotSupported,
                                                    retired_single=NVMLError_NotSupported),
                    "--gpuprops-report", "r.json")
    r.assert_outcomes(passed=10, failed=1, skipped=2)
    r.stdout.fnmatch_lines(["*FactMismatch: fact health_pcie_link_width on sm_90 does not hold:",
                            "*expected: current width = max width",
                            "*measured: x8 of x16 under load (best of 3 readings: x8 in 3; planted copies, 25.0 GB/s)",
                            "*flags:    PCIe x8 of x16 while copies kept the link busy: it trained narrower than "
                            "the GPU and this slot support; reseat or check the riser/slot; bandwidth to the host is "
                            "halved",
                            "*reproduce: pytest 'test_gpu_health.py::test_health[[]health_pcie_link_width[]]'"])
    assert r.loads == [0, 0]  # the width and the generation, each under its own load on GPU 0
    r.stdout.fnmatch_lines(["*SKIPPED*health_row_remap_pending: not supported here (nvmlDeviceGetRemappedRows: "
                            "NotSupported; nvmlDeviceGetRetiredPagesPendingStatus: NotSupported)*"])
    data = json.loads((pytester.path / "r.json").read_text())
    by_fact = {v["fact"]: v for v in data["facts"]}
    assert set(by_fact) == set(health.CHECKS)
    assert by_fact["health_pcie_link_width"]["verdict"] == (
        "FAIL (PCIe x8 of x16 while copies kept the link busy: it trained narrower than the GPU and this slot "
        "support; reseat or check the riser/slot; bandwidth to the host is halved)")
    assert by_fact["health_row_remap_failure"]["status"] == "SKIPPED"
    assert by_fact["health_compute_mode"]["gpu"]["pci_bus_id"] == "0000:00:00.0"
    assert {v["kind"] for v in data["facts"]} == {"health"}
    r.stdout.fnmatch_lines(["all facts for sm_90;*", "*health — 13: 1 FAIL, 10 PASS, 2 SKIPPED",
                            "  health_pcie_link_width * current width = max width * x8 of x16 * FAIL (PCIe x8*"])


def test_k_selects_a_health_check_and_without_nvml_it_skips_saying_so(pytester, monkeypatch):
    r = _run_hwtest(pytester, monkeypatch, FakeNvml(), "-k", "health_pcie")
    r.assert_outcomes(passed=3, deselected=10)
    r = _run_hwtest(pytester, monkeypatch, None, "-k", "health_compute_mode")
    r.assert_outcomes(skipped=1, deselected=12)
    r.stdout.fnmatch_lines(["*SKIPPED*NVML cannot be read for GPU 0 (0000:00:00.0): install nvidia-ml-py*"])


def test_the_gpu_file_reads_the_link_under_load_so_a_link_stuck_below_gen5_fails_red(pytester, monkeypatch):
    """An idle GPU (P8, gpu_idle) reads Gen1 of Gen5, which alone can only skip; under the copies the link
    stays at Gen3: the test fails, saying so. A GPU whose NVML has no such query skips, saying why."""
    nvml = FakeNvml(gen=1, pstate=8, events=0x1)
    r = _run_hwtest(pytester, monkeypatch, nvml, "-k", "health_pcie_link_gen", under_load=dict(gen=3, pstate=0))
    r.assert_outcomes(failed=1, deselected=12)
    r.stdout.fnmatch_lines(["*FactMismatch: fact health_pcie_link_gen on sm_90 does not hold:",
                            "*measured: Gen3 of Gen5 under load (best of 3 readings: Gen3 in 3; planted copies*",
                            "*flags:    PCIe Gen3 of Gen5 while copies kept the link busy: it trained below the most "
                            "the GPU and this slot support; reseat*"])
    r = _run_hwtest(pytester, monkeypatch, FakeNvml(gen=NVMLError_NotSupported), "-k", "health_pcie_link_gen")
    r.assert_outcomes(skipped=1, deselected=12)
    r.stdout.fnmatch_lines(["*SKIPPED*health_pcie_link_gen: not supported here (nvmlDeviceGetCurrPcieLinkGeneration: "
                            "NotSupported)*"])
