"""measure layer for the node: what NVML says of a GPU's NVLinks (links up, their version and speed,
error counters), read without loading them; hwtests/test_node_links.py judges them, pytest_gpuprops/
links.py measures what the links carry."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from . import devices

#: NVML's nvmlNvlinkVersion_t -> the NVLink generation it names
NVLINK_VERSIONS = {1: 1.0, 2: 2.0, 3: 2.2, 4: 3.0, 5: 3.1, 6: 4.0, 7: 5.0}
NVLINK_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")
#: the counters whose growth under load fails a link: DCGM's hardware limits allow less than one
#: NVLink replay or recovery (DCGM_LIMIT_MAX_LWLINK_ERROR = 1), and a healthy link's flit CRC stays 0.
#: The data CRC counter is reported, not judged: on the H100 nodes measured (2026-11-26) it grew by
#: 1-8 per link under 14 GiB of copies each way while `nvidia-smi nvlink -e` read "CRC Errors: 0".
JUDGED_COUNTERS = ("replay", "recovery", "crc_flit")
MAX_NVLINKS = 18


@dataclasses.dataclass
class NvLinkState:
    """One GPU's NVLinks as NVML reports them: which are up, their version and speed, and their error
    counters (cumulative since the driver loaded; what matters is their growth during a run)."""

    links_up: list[int]
    links_down: list[int]
    version: float | None  # NVLink generation (4.0 on Hopper)
    speed_gbps: dict[int, float]  # per link, where NVML reports it
    errors: dict[int, dict[str, int]]
    #: GPUs NVML sees on the machine (whatever CUDA_VISIBLE_DEVICES hides); None where it cannot say
    machine_gpus: int | None = None

    @property
    def count(self) -> int:
        return len(self.links_up)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def error_growth(before: NvLinkState, after: NvLinkState, counters: Sequence[str] = NVLINK_ERROR_COUNTERS
                 ) -> dict[str, int]:
    """Per 'link <k> <counter>': how much each of ``counters`` grew between two readings (only those
    that grew)."""
    grown = {}
    for link, values in sorted(after.errors.items()):
        for name, value in values.items():
            if name not in counters:
                continue
            delta = value - before.errors.get(link, {}).get(name, value)
            if delta > 0:  # a counter that fell was reset (by the driver or nvidia-smi), not grown
                grown[f"link {link} {name}"] = delta
    return grown


def no_fabric(state: NvLinkState) -> str | None:
    """Why this GPU's link facts do not apply, or None where they do: a machine whose NVML sees one GPU
    and none of its links up has no NVLink fabric to check (a VM given one GPU of an NVLink board reads
    0 links up, as every single-GPU H100 machine lent on 2026-11-26 did). A GPU with a peer on the
    machine, or with any link up, is judged: its links down are a finding, not a skip."""
    if state.machine_gpus == 1 and not state.links_up:
        return (f"NVML sees 1 GPU on this machine and none of its {len(state.links_down)} NVLinks up: a single-GPU "
                "machine (a VM given one GPU of an NVLink board, or a PCIe card) has no NVLink fabric to check; "
                "run on a node with its peers to check the links")
    return None


def nvlink_state(info: devices.GpuInfo) -> NvLinkState | None:  # pragma: no mutate block  (GPU only)
    """What NVML says of GPU ``info``'s NVLinks; None where NVML cannot be read."""
    nv, handle = devices._nvml_handle(info.pci_bus_id)
    if handle is None:
        return None
    counters = {"replay": nv.NVML_NVLINK_ERROR_DL_REPLAY, "recovery": nv.NVML_NVLINK_ERROR_DL_RECOVERY,
                "crc_flit": nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, "crc_data": nv.NVML_NVLINK_ERROR_DL_CRC_DATA}
    up, down, versions, speeds, errors = [], [], set(), {}, {}
    for link in range(MAX_NVLINKS):
        try:
            active = nv.nvmlDeviceGetNvLinkState(handle, link)
        except nv.NVMLError:
            continue  # no such link on this GPU
        (up if active else down).append(link)
        if not active:
            continue
        try:
            versions.add(nv.nvmlDeviceGetNvLinkVersion(handle, link))
        except nv.NVMLError:
            pass
        errors[link] = {}
        for name, counter in counters.items():
            try:
                errors[link][name] = int(nv.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
            except nv.NVMLError:
                pass
        try:
            (field,) = nv.nvmlDeviceGetFieldValues(handle, [(nv.NVML_FI_DEV_NVLINK_GET_SPEED, link)])
            if field.nvmlReturn == 0 and field.value.uiVal:
                speeds[link] = field.value.uiVal / 1000.0  # MB/s -> GB/s
        except (nv.NVMLError, AttributeError, TypeError):
            pass
    version = NVLINK_VERSIONS.get(max(versions)) if versions else None
    try:
        machine_gpus = int(nv.nvmlDeviceGetCount())
    except (nv.NVMLError, AttributeError, TypeError):
        machine_gpus = None
    return NvLinkState(links_up=up, links_down=down, version=version, speed_gbps=speeds, errors=errors,
                       machine_gpus=machine_gpus)
