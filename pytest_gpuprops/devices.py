"""The GPUs this process sees: whether one can be used (and if not, the one-line reason a fact skips
with), what each is (GpuInfo: name, arch, SMs, driver and CUDA versions, VBIOS, UUID, clock ceiling),
and NVML's clock-event (throttle) reasons, recorded with every measurement; the CPUs local to a GPU (its
NUMA node's), which host copies run on. NVML is optional: where
it is absent the reasons are empty and the driver version is the CUDA driver API's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

from . import compile as gp_compile

#: NVML clock-event reasons that mean the clocks were held down (not idle, not app settings).
_THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}


class GpuUnavailable(Exception):
    """No usable GPU: the message is the one-line skip reason."""


def gpu_unavailable_reason(index: int = 0) -> str | None:
    """None when GPU ``index`` can be used; otherwise a one-line reason naming what is missing."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library load failure inside cupy
        return f"CuPy is not importable ({type(exc).__name__}: {exc}); install pytest-gpuprops[cuda13] or [cuda12]"
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA driver or GPU ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if n == 0:
        return "no CUDA GPU visible"
    if index >= n:
        return f"--gpu {index} asked for but only {n} GPU(s) are visible"
    try:  # a GPU newer than the compiler: nothing can be built for it, so every fact skips with this
        arch = f"sm_{cupy.cuda.Device(index).compute_capability}"
        gp_compile.check_arch(arch)
    except gp_compile.ArchError as exc:
        return f"GPU {index} is {arch}, which cannot be compiled for here: {exc}"
    except Exception:
        pass  # gpu_info reads the device again and says what is wrong
    return None


def visible_gpu_count() -> int:
    """How many CUDA GPUs this process sees (0 without CuPy or a driver)."""
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    arch: str
    sm_count: int
    driver_version: str  # NVML's "580.159.04" where NVML works, else the CUDA driver API number
    cuda_driver_version: str  # "13.0"
    cuda_runtime_version: str
    pci_bus_id: str
    max_sm_clock_mhz: int | None
    uuid: str = ""
    host: str = ""
    vbios_version: str = ""  # NVML's; a unit's baseline says when it changed

    def identity(self) -> dict:
        """What a verdict carries to say which GPU it was measured on, and with which driver, VBIOS
        and clock ceiling (a unit's baseline says what changed between its runs)."""
        return {"index": self.index, "name": self.name, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id,
                "host": self.host, "driver_version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version, "cuda_runtime_version": self.cuda_runtime_version,
                "vbios_version": self.vbios_version, "max_sm_clock_mhz": self.max_sm_clock_mhz}

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=None)
def _nvml_handle(pci_bus_id: str):  # pragma: no mutate block  (GPU only)
    """(pynvml, handle) for the GPU at ``pci_bus_id``, or (None, None) where NVML is absent. NVML is
    initialised once per process and the handle kept: every measurement reads throttle reasons twice."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
    except Exception:
        return None, None


def _ver(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def gpu_info(index: int = 0) -> GpuInfo:  # pragma: no mutate block  (GPU only)
    reason = gpu_unavailable_reason(index)
    if reason:
        raise GpuUnavailable(reason)
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    arch = f"sm_{props['major']}{props['minor']}"
    with cupy.cuda.Device(index):
        pci = cupy.cuda.Device(index).pci_bus_id
    nvml, handle = _nvml_handle(pci)
    driver = _ver(cupy.cuda.runtime.driverGetVersion())
    nvml_driver, max_clock, nvml_uuid, vbios = None, None, "", ""
    if handle is not None:
        try:
            nvml_driver = nvml.nvmlSystemGetDriverVersion()
            nvml_driver = nvml_driver.decode() if isinstance(nvml_driver, bytes) else nvml_driver
            max_clock = int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
            # NVML's spelling first: CuPy hands CUDA's 16 UUID bytes over as a C string, cut at the
            # first zero byte (GPU-7a297dd4-e640-6039-38ad-1782008ffbe6 came back 12 bytes long)
            raw = nvml.nvmlDeviceGetUUID(handle)
            nvml_uuid = raw.decode() if isinstance(raw, bytes) else str(raw)
            raw = nvml.nvmlDeviceGetVbiosVersion(handle)
            vbios = raw.decode() if isinstance(raw, bytes) else str(raw)
        except Exception:
            pass
    import socket
    return GpuInfo(index, name, arch, int(props["multiProcessorCount"]), nvml_driver or driver, driver,
                   _ver(cupy.cuda.runtime.runtimeGetVersion()), pci, max_clock, nvml_uuid or _uuid(props.get("uuid")),
                   socket.gethostname(), vbios)


def _uuid(raw) -> str:
    """CUDA's 16 UUID bytes in nvidia-smi's spelling, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; "" when
    fewer than 16 arrive (CuPy cuts them at a zero byte: NVML's UUID is preferred, see gpu_info)."""
    if not raw:
        return ""
    b = bytes(raw) if not isinstance(raw, str) else raw.encode("latin-1")
    h = b[:16].hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}" if len(h) == 32 else ""


def throttle_reasons(info: GpuInfo) -> tuple[list[str], int | None]:  # pragma: no mutate block  (GPU only)
    """(active throttle reasons, current SM clock in MHz) from NVML; ([], None) where NVML is absent."""
    nvml, handle = _nvml_handle(info.pci_bus_id)
    if handle is None:
        return [], None
    try:
        getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        bits = int(getter(handle))
        clock = int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    except Exception:
        return [], None
    return [name for bit, name in _THROTTLE_BITS.items() if bits & bit], clock


def gpu_temperature_c(info: GpuInfo) -> int | None:  # pragma: no mutate block  (GPU only)
    """The GPU's core temperature (NVML, degrees C); None where NVML is absent. A stress records it at its
    start and end: the clock a stress sustains under the power cap follows the GPU's thermal state."""
    nvml, handle = _nvml_handle(info.pci_bus_id)
    if handle is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    except Exception:
        return None


def cpus_of_mask(words, word_bits: int = 64) -> set[int]:
    """The CPU numbers set in an NVML CPU-affinity mask (``words``: unsigned integers, word 0 holding CPUs
    0 .. word_bits - 1, as nvmlDeviceGetCpuAffinity returns it on a 64-bit host)."""
    return {w * word_bits + b for w, word in enumerate(words) for b in range(word_bits) if int(word) >> b & 1}


def cpus_near(pci_bus_id: str) -> set[int] | None:  # pragma: no mutate block  (GPU only)
    """The CPUs NVML calls local to the GPU at ``pci_bus_id`` (its NUMA node's) that this process may run
    on; None where NVML is absent, says nothing, or none of them is allowed."""
    import os
    nvml, handle = _nvml_handle(pci_bus_id)
    if handle is None:
        return None
    try:
        words = nvml.nvmlDeviceGetCpuAffinity(handle, max(1, -(-(os.cpu_count() or 1) // 64)))
    except Exception:
        return None
    near = cpus_of_mask(words) & os.sched_getaffinity(0)
    return near or None


@contextlib.contextmanager
def on_cpus(cpus: set[int] | None):
    """The calling thread runs on ``cpus`` (None: where it was) until the block ends, then where it
    was allowed before. Pinned host memory allocated inside lands on their NUMA node."""
    import os
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cpu_list(cpus: set[int] | None) -> str:
    """``cpus`` as Linux writes a CPU list ("0-31,64-95"); "any" for None."""
    if not cpus:
        return "any"
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
