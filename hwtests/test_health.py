"""Health before facts: what NVML says about the GPU under test, read without launching a kernel.
Uncorrectable ECC errors, pending or failed row remaps, the PCIe link against its maximum,
application clocks, locked clocks and the power limit against their defaults, persistence and
compute mode (pytest_gpuprops/health.py reads them, health_verdicts.py judges them;
docs/validation.md lists the thresholds and DCGM's corresponding checks). The PCIe width and
generation are read while host<->device copies keep the link busy (health_load.copy_load, a quarter
second each, the GPU's lock held): an idle link trains down to save power, so only a busy one shows what it trained to.

One test per check, named by its verdict: `pytest hwtests -k health_pcie`. A check NVML cannot answer
on this GPU skips with the reason; a failing one says what to do. A GPU that fails health still runs
its facts: nothing here skips another test. The whole file takes about half a second:
`pytest hwtests -m validation`."""

import contextlib

import pytest

from pytest_gpuprops import devices, gpulock, health, health_load, health_verdicts
from pytest_gpuprops.assertions import SKIPPED

pytestmark = [pytest.mark.gpu, pytest.mark.validation]


@pytest.fixture
def nvml_handle(gpu):
    """(pynvml, handle) of the GPU under test, found by its PCI bus id as devices.py finds it."""
    nvml, handle = devices._nvml_handle(gpu.pci_bus_id)
    if handle is None:
        pytest.skip(f"NVML cannot be read for GPU {gpu.index} ({gpu.pci_bus_id}): install nvidia-ml-py "
                    "(pytest-gpuprops[cuda13] or [cuda12]) and check the GPU with nvidia-smi")
    return nvml, handle


@pytest.mark.fact("{check}")
@pytest.mark.parametrize("check", health.CHECKS, ids=health.CHECKS)
def test_health(check, gpuprops, gpu, nvml_handle):
    nvml, handle = nvml_handle
    if check in health.UNDER_LOAD:  # the link under load: an idle one trains down to save power
        load, held = health_load.copy_load(gpu.index), gpulock.gpu_lock(gpu.index)
    else:
        load, held = None, contextlib.nullcontext()
    with held:
        reading = health.read_health(nvml, handle, [check], load=load)
    v = health_verdicts.verdicts(reading, gpu.identity(), arch=gpu.arch)[0]
    health_verdicts.record(gpuprops, v)  # a FAIL raises here, saying what to do
    if v.status == SKIPPED:
        pytest.skip(f"{check}: {health_verdicts.reason(v)}")
