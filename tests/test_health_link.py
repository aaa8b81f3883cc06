"""The PCIe link's health checks (pytest_gpuprops/health_link.py) on a stand-in NVML
(tests/nvml_stand_in.py): width and generation at rest and under a load, the slot's maximum against
the GPU's, readings that are not a trained link, each with the exact verdict and what it tells the
operator to do."""

import pytest
from nvml_stand_in import FakeNvml, NVMLError_GpuIsLost, NVMLError_NotSupported, judge, planted_load, row

from pytest_gpuprops import health_link
from pytest_gpuprops.assertions import FAIL, PASS, SKIPPED


def test_pcie_x8_of_x16_fails_saying_reseat_and_that_bandwidth_is_halved():
    v = judge(width=8)["health_pcie_link_width"]
    assert row(v) == (FAIL, "x8 of x16", ["PCIe x8 of x16: reseat or check the riser/slot; bandwidth to the host is "
                                          "halved"])
    assert v.measured == 8.0
    assert judge(width=4)["health_pcie_link_width"].flags == [
        "PCIe x4 of x16: reseat or check the riser/slot; bandwidth to the host is cut to a quarter"]


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
    j = health_link.judge_link_under_load(kind, samples, top, "copies")
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
