"""The health checks' verdicts (pytest_gpuprops/health_verdicts.py, their thresholds in health_judges.py)
against a stand-in NVML (tests/nvml_stand_in.py): a healthy H100-like GPU, then each memory, clock,
power and mode fault planted on it, with the exact verdict and what it tells the operator to do; and
hwtests/test_health.py on a fake GPU through the plugin's own recording path. The PCIe link's checks
are tests/test_health_link.py's."""

import json
from pathlib import Path

from gp_testing import fake_gpu_conftest
from nvml_stand_in import (
    GPU,
    FakeNvml,
    NVMLError,
    NVMLError_GpuIsLost,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
    judge,
    planted_load,
    row,
)

from pytest_gpuprops import devices, health, health_load, health_verdicts
from pytest_gpuprops.assertions import FAIL, PASS, SKIPPED

REPO = Path(__file__).parent.parent


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
        assert health_verdicts.reason(v) == v.flags[0]


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
    monkeypatch.setattr(health_load, "copy_load", copy_load)
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
