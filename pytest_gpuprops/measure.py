"""measure layer: load a cubin, launch it, and turn per-warp clock64 pairs into a measurement.

Method (docs/method.md):
* every timed kernel writes one (start, stop) clock64 pair per warp (kernels/gpuprops.cuh);
* before launch both clock reads are patched to wait on all six scoreboards: the start read, so
  nothing issued before the region (an input load, a store) finishes inside it; the stop read, so
  the region ends only when its last variable-latency result is in (the seeds' sm_86 listings show
  the compiler does not always make it wait, which biased short chains low: 22.62 cycles at
  UNROLL 50). A region that is still not clean after the patch is refused (sass.region_hazards);
* the clock-read overhead (two back-to-back reads, patched the same way) is measured once per GPU
  and subtracted;
* launches repeat until the relative standard deviation of the per-launch values is under the noise
  target (after a minimum count), or a time budget or a sample cap ends it: nvbench's rule. Which
  one ended it is part of the result;
* the SM clock the kernels saw (clock64 against %globaltimer) and NVML's clock-event (throttle)
  reasons are recorded with every measurement;
* one process at a time measures on a GPU (a file lock), so pytest-xdist workers never overlap.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import compile as gp_compile
from . import sass
from .launch import LOCK_TIMEOUT_S

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


class KernelLaunchError(Exception):
    """A kernel failed to load, launch or finish; the message names kernel and launch shape."""


class UncleanRegion(sass.PatchRefused):
    """The timed region, as it would be launched, is not clean at both ends (see sass.region_hazards)."""


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


def gpu_lock_path(index: int) -> Path:
    """The file of GPU ``index``'s lock ($GPUPROPS_LOCK_DIR, else the temp folder)."""
    return Path(os.environ.get("GPUPROPS_LOCK_DIR", tempfile.gettempdir())) / f"gpuprops-gpu{index}.lock"


_GPU_LOCKS: dict[tuple[str, float], object] = {}


def gpu_lock(index: int, timeout: float = LOCK_TIMEOUT_S):
    """A per-GPU file lock: only one process measures on a GPU at a time. One lock object per file
    and timeout, kept: a session takes it once per measurement (about 1 300 times a run), and a new
    FileLock each time cost 0.1 ms of filelock's instance bookkeeping."""
    from filelock import FileLock
    key = (str(gpu_lock_path(index)), timeout)
    lock = _GPU_LOCKS.get(key)
    if lock is None:
        lock = _GPU_LOCKS[key] = FileLock(key[0], timeout=timeout)
    return lock


# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Measurement:
    """Per-launch values of one quantity, and how they were obtained."""

    name: str
    unit: str
    values: list[float]
    stop_reason: str  # "converged", "time budget", "sample cap"
    noise_target: float
    overhead_cycles: float
    sm_clock_mhz: float | None
    throttle: list[str]
    kernel: str
    launch: dict
    per_warp: list[float] = dataclasses.field(default_factory=list)  # last launch, for reports
    #: measure again with fresh launches (set by Runner.measure; a failure is confirmed with it)
    remeasure: Callable[[], Measurement] | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def noise(self) -> float:
        """Relative standard deviation of the per-launch values (nvbench's 'noise')."""
        return relative_noise(self.values)

    @property
    def settled(self) -> bool:
        return self.noise <= self.noise_target

    def summary(self) -> str:
        return (f"{self.median:.3f} {self.unit} (min {self.min:.3f}, max {self.max:.3f}, noise {self.noise:.2%}, "
                f"n={self.n}, {self.stop_reason})")

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "remeasure"}
        d = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
        d.update(median=self.median, min=self.min, max=self.max, noise=self.noise, n=self.n)
        return d

    @classmethod
    def given(cls, name: str, values: Sequence[float], unit: str = "cycles", **kw) -> Measurement:
        """A measurement from given numbers (tests of the assertion and report layers)."""
        base = dict(stop_reason="converged", noise_target=0.01, overhead_cycles=0.0, sm_clock_mhz=None,
                    throttle=[], kernel="(given)", launch={})
        base.update(kw)
        return cls(name=name, unit=unit, values=list(values), **base)


@dataclasses.dataclass(frozen=True)
class StopRule:
    noise_target: float = 0.01
    min_samples: int = 5
    max_samples: int = 100
    time_budget_s: float = 2.0


@dataclasses.dataclass
class KernelSpec:
    """What to compile and how to launch it.

    ``args(cupy) -> tuple`` builds the arguments after the cycles buffer; ``patch(cubin, kernel) ->
    list[Edit]`` adds edits to the automatic clock-read waits. ``region`` is what the timed region
    must hold (opcode -> count, padding aside) and ``region_other`` how many other, non-memory
    instructions (loop control) may sit beside them: a kernel that does not measure what its name
    says is refused before it runs, on every arch.
    """

    source: str
    kernel: str
    defines: dict = dataclasses.field(default_factory=dict)
    grid: int = 1
    block: int = 32
    args: Callable | None = None
    patch: Callable | None = None
    region: dict | None = None
    region_other: int = 0
    #: thread-block cluster size: None launches as usual; k launches clusters of k CTAs along x
    #: (cuLaunchKernelEx with a cluster-dimension attribute; the kernel is compiled with
    #: ``__cluster_dims__()``, so one build serves every size). Above PORTABLE_CLUSTER_SIZE the
    #: function is allowed a non-portable size first.
    cluster: int | None = None
    #: dynamic shared memory per CTA, bytes (0: none). Any launches through cuLaunchKernelEx, which
    #: allows the function that much first; more than half an SM's keeps CTAs on separate SMs.
    shared_mem: int = 0

    def label(self) -> str:
        base = f"{self.kernel} from {self.source} {self.defines} grid={self.grid} block={self.block}"
        if self.cluster is not None:
            base += f" cluster={self.cluster}"
        return base + (f" shared_mem={self.shared_mem}" if self.shared_mem else "")


#: (cubin bytes' SHA-256, kernel, edits, region) -> what build_for_timing returned for them: a GPU run
#: asks for the same build again and again (every repeat of a fact, every line of an L2 chase, every
#: shape of a sweep). The answer is a function of those inputs alone (the patch verified against
#: nvdisasm's reading of the patched bytes, the region checked), so the first one stands for the
#: rest of the process; a refusal is not kept (it is raised again, each time).
_BUILT: dict[tuple, tuple[bytes, tuple]] = {}
_BUILT_MAX = 4096


def build_for_timing(cubin: sass.Cubin, spec: KernelSpec) -> tuple[bytes, list[sass.Instruction]]:
    """``spec``'s kernel patched for timing, with its region checked against what it must hold."""
    edits = tuple(spec.patch(cubin, spec.kernel)) if spec.patch else ()
    region = None if spec.region is None else tuple(sorted(spec.region.items()))
    key = (hashlib.sha256(cubin.data).digest(), cubin.arch, spec.kernel, edits, region, spec.region_other)
    known = _BUILT.get(key)
    if known is not None:
        return known[0], list(known[1])
    built = patched_for_timing(cubin, spec.kernel, list(edits))
    if spec.region is not None:
        problems = sass.region_mismatch(built[1], spec.region, spec.region_other)
        if problems:
            raise UncleanRegion(f"{spec.label()} on {cubin.arch}: the timed region does not hold what the fact "
                                "measures:\n  " + "\n  ".join(problems))
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = (built[0], tuple(built[1]))
    return built


#: how long a launch's completion is polled without sleeping: the suite's kernels take microseconds,
#: and a 0.2-ms sleep per poll was most of a launch's wall time (docs/performance.md)
SPIN_S = 0.005


def wait_for(event, timeout_s: float, what: str) -> None:  # pragma: no mutate block  (GPU only)
    """Wait until ``event`` has completed: poll it without sleeping for :data:`SPIN_S`, then every
    0.2 ms; a kernel still running after ``timeout_s`` is a hung launch, reported as one."""
    start = time.monotonic()
    while not event.done:
        waited = time.monotonic() - start
        if waited > timeout_s:
            raise KernelLaunchError(f"{what} did not finish within {timeout_s:.0f} s")
        if waited > SPIN_S:
            time.sleep(0.0002)


class Runner:  # pragma: no mutate block  (GPU only)
    """Compiles, patches, loads and times kernels on one GPU."""

    def __init__(self, info: GpuInfo, kernels_dir: str | Path, *, stop: StopRule = StopRule(),
                 cache_dir: str | Path | None = None, launch_timeout_s: float = 10.0):
        import cupy
        self.cp = cupy
        self.info = info
        self.kernels_dir = Path(kernels_dir)
        self.stop = stop
        self.cache_dir = cache_dir
        self.launch_timeout_s = launch_timeout_s
        self._modules: dict[str, object] = {}
        #: kernel time of every timed launch so far (CUDA events around each), and how many: what the
        #: GPU was busy with, against the wall time a test took (docs/performance.md)
        self.gpu_busy_s = 0.0
        self.launches = 0
        self._overhead: float | None = None
        self._clock: float | None = None
        self._tmp = tempfile.mkdtemp(prefix="gpuprops-mod-")
        cupy.cuda.Device(info.index).use()

    # -- building ------------------------------------------------------------------------------
    def compile(self, source: str, defines: dict | None = None) -> gp_compile.CompiledCubin:
        return gp_compile.compile_cuda(self.kernels_dir / source, self.info.arch, defines or {},
                                       cache_dir=self.cache_dir)

    def build(self, spec: KernelSpec) -> tuple[bytes, list[sass.Instruction]]:
        """Compile and patch: both clock reads wait on all scoreboards, plus the spec's edits."""
        compiled = self.compile(spec.source, spec.defines)
        cubin = sass.Cubin(compiled.cubin, self.info.arch, name=f"{spec.source} {spec.defines}")
        return build_for_timing(cubin, spec)

    def load(self, cubin: bytes, kernel: str):
        key = hashlib.sha256(cubin).hexdigest()
        mod = self._modules.get(key)
        if mod is None:
            path = os.path.join(self._tmp, key[:24] + ".cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            try:
                mod = self.cp.RawModule(path=path)
            except Exception as exc:
                raise KernelLaunchError(f"the driver refused the cubin for {kernel}: {exc}") from exc
            self._modules[key] = mod
        return mod.get_function(kernel)

    # -- launching -----------------------------------------------------------------------------
    def launch_pairs(self, fn, spec: KernelSpec, args: tuple) -> numpy.ndarray:  # noqa: F821
        """Launch once and return the (n_warps, 2) array of clock pairs."""
        cp = self.cp
        n_warps = spec.grid * spec.block // 32
        cycles = cp.zeros(2 * n_warps, dtype=cp.uint64)
        shape = spec.label()
        try:
            begun = cp.cuda.Event()
            begun.record()
            if needs_launch_ex(spec, args):
                self.launch_ex(fn, spec, (cycles, *args))
            else:
                fn((spec.grid,), (spec.block,), (cycles, *args))
            done = cp.cuda.Event()
            done.record()
            wait_for(done, self.launch_timeout_s, shape)
            pairs = cycles.get().reshape(n_warps, 2).astype("int64")
            self.gpu_busy_s += cp.cuda.get_elapsed_time(begun, done) / 1e3
            self.launches += 1
        except KernelLaunchError:
            raise
        except Exception as exc:
            raise KernelLaunchError(f"{shape} failed: {type(exc).__name__}: {exc}") from exc
        if (pairs[:, 1] < pairs[:, 0]).any() or (pairs == 0).all(axis=1).any():
            raise KernelLaunchError(f"{shape}: some warps wrote no or reversed clock pairs")
        return pairs

    def launch_ex(self, fn, spec: KernelSpec, args: tuple) -> None:
        """Launch ``fn`` through cuLaunchKernelEx: kernel parameters as a pointer array (any by-value
        bytes, e.g. a CUtensorMap, included) and, for a cluster spec, the cluster dimension."""
        import ctypes
        driver = cuda_driver()
        f = driver.CUfunction(function_handle(fn))
        self._allow(driver, f, spec)
        params, _keep = kernel_params(args)
        config = launch_config(driver, spec, self.cp.cuda.get_current_stream().ptr)
        (err,) = driver.cuLaunchKernelEx(config, f, ctypes.addressof(params), 0)
        if int(err) != 0:
            raise KernelLaunchError(f"{spec.label()}: cuLaunchKernelEx failed: {driver_error(driver, err)}")

    def _allow(self, driver, f, spec: KernelSpec) -> None:
        """Set what ``spec``'s launch needs on the function: a non-portable cluster size, more than
        48 KiB of dynamic shared memory."""
        attrs = driver.CUfunction_attribute
        if spec.cluster is not None and spec.cluster > PORTABLE_CLUSTER_SIZE:
            (err,) = driver.cuFuncSetAttribute(f, attrs.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
            if int(err) != 0:
                raise KernelLaunchError(f"the driver refused a non-portable cluster size for this kernel: "
                                        f"{driver_error(driver, err)}")
        if spec.shared_mem > DEFAULT_DYNAMIC_SHARED:
            (err,) = driver.cuFuncSetAttribute(f, attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               spec.shared_mem)
            if int(err) != 0:
                raise KernelLaunchError(f"the driver refused {spec.shared_mem} bytes of dynamic shared memory "
                                        f"for this kernel: {driver_error(driver, err)}")

    def cluster_refusal(self, spec: KernelSpec, built: tuple[bytes, list] | None = None) -> str | None:
        """None when ``spec``'s clusters can run on this GPU; otherwise why not (a skip reason): the
        driver refuses the non-portable size, or no such cluster fits (cuOccupancyMaxActiveClusters)."""
        check_cluster(spec)
        driver = cuda_driver()
        cubin, _ = built or self.build(spec)
        f = driver.CUfunction(function_handle(self.load(cubin, spec.kernel)))
        k = spec.cluster
        try:
            self._allow(driver, f, spec)
        except KernelLaunchError as exc:
            why = f" is non-portable (over {PORTABLE_CLUSTER_SIZE}) and" if k > PORTABLE_CLUSTER_SIZE else ":"
            return f"cluster size {k}{why} {exc}"
        what = f"{k} CTAs x {spec.block} threads" + (f" x {spec.shared_mem} bytes of shared memory"
                                                      if spec.shared_mem else "")
        err, n = driver.cuOccupancyMaxActiveClusters(f, launch_config(driver, spec, 0))
        if int(err) != 0:
            return (f"the driver cannot place clusters of {what} for {spec.kernel}: "
                    f"cuOccupancyMaxActiveClusters failed: {driver_error(driver, err)}")
        if int(n) < 1:
            return f"no cluster of {what} of {spec.kernel} fits on this GPU (cuOccupancyMaxActiveClusters = 0)"
        return None

    def clock_overhead(self) -> float:
        """Cycles between two back-to-back clock reads (patched like every kernel's)."""
        if self._overhead is None:
            spec = KernelSpec("clock_overhead.cu", "clock_overhead", region={})
            cubin, _ = self.build(spec)
            fn = self.load(cubin, spec.kernel)
            vals = [float(p[0, 1] - p[0, 0]) for p in (self.launch_pairs(fn, spec, ()) for _ in range(21))]
            self._overhead = statistics.median(vals[1:])
        return self._overhead

    def session_sm_clock_mhz(self) -> float:
        """The SM clock, read once per session (a 1 ms spin); :meth:`sm_clock_mhz` reads it again."""
        if self._clock is None:
            self._clock = self.sm_clock_mhz()
        return self._clock

    def sm_clock_mhz(self, spin_ns: int = 1_000_000) -> float:
        """The SM clock the kernels run at: clock64 cycles per %globaltimer microsecond."""
        cp = self.cp
        cubin = self.compile("sm_clock_rate.cu").cubin
        fn = self.load(cubin, "sm_clock_rate")
        out = cp.zeros(2, dtype=cp.uint64)
        fn((1,), (32,), (out, cp.uint64(spin_ns)))
        cycles, ns = (int(x) for x in out.get())
        return cycles / ns * 1000.0 if ns else float("nan")

    def measure(self, name: str, spec: KernelSpec, *, divisor: float, mode: str = "warp", unit: str = "cycles",
                transform: Callable[[float], float] | None = None, stop: StopRule | None = None,
                built: tuple[bytes, list] | None = None) -> Measurement:
        """Repeat launches of ``spec`` until the stop rule ends, and return the measurement.

        ``mode="warp"``: a launch's value is the median over warps of (stop - start - overhead) /
        divisor (latency, per-warp issue). ``mode="span"``: (last stop - first start - overhead) /
        divisor (throughput of the whole block on its SM). ``mode="block_span"``: the median over
        blocks of each block's span (throughput per SM of a launch of several blocks, one per SM,
        whose SM clocks are not one clock). ``transform`` maps cycles to the unit (e.g. bytes per
        cycle).
        """
        stop = stop or self.stop
        overhead = self.clock_overhead()
        cubin, _ = built or self.build(spec)
        fn = self.load(cubin, spec.kernel)
        args = spec.args(self.cp) if spec.args else ()
        with gpu_lock(self.info.index):
            reasons_before, _ = throttle_reasons(self.info)
            clock = self.session_sm_clock_mhz()
            self.launch_pairs(fn, spec, args)  # warm-up: instruction caches, module load
            values: list[float] = []
            per_warp: list[float] = []
            t_start = time.monotonic()
            reason = None
            while reason is None:
                pairs = self.launch_pairs(fn, spec, args)
                v, per_warp = launch_value(pairs.tolist(), overhead, divisor, mode,
                                           warps_per_block=max(1, spec.block // 32))
                values.append(float(transform(v) if transform else v))
                reason = stop_reason(values, stop, time.monotonic() - t_start)
            reasons_after, _ = throttle_reasons(self.info)
        m = Measurement(name=name, unit=unit, values=values, stop_reason=reason, noise_target=stop.noise_target,
                        overhead_cycles=overhead, sm_clock_mhz=round(clock, 1),
                        throttle=sorted(set(reasons_before) | set(reasons_after)), kernel=spec.kernel,
                        launch={"source": spec.source, "defines": dict(spec.defines), "grid": spec.grid,
                                "block": spec.block, "mode": mode, "divisor": divisor,
                                **({} if spec.cluster is None else {"cluster": spec.cluster}),
                                **({"shared_mem": spec.shared_mem} if spec.shared_mem else {})},
                        per_warp=per_warp)
        m.remeasure = lambda: self.measure(name, spec, divisor=divisor, mode=mode, unit=unit, transform=transform,
                                           stop=stop, built=(cubin, []))
        return m


#: the lowest tier of an L2 latency: values within this fraction of the smallest (see lowest_tier)
TIER_BAND = 0.08


def lowest_tier(values: Sequence[float], band: float = TIER_BAND) -> list[float]:
    """The values within ``band`` (relative) of the smallest, in their order: the lowest tier of a
    latency that depends on where its line lives. An L2 hit's latency depends on the L2 slice that owns
    the line and the SM that asks: global atomics over 64 lines on the H100 (2026-11-25, three runs)
    fell in tiers of 267-283, 302-317 and 439-524 cycles; the lowest tier's top is 6 % above its
    bottom and the next tier starts 13 % above it, so 8 % takes exactly the lowest tier."""
    if not values:
        return []
    top = min(values) * (1 + band)
    return [v for v in values if v <= top]


def launch_value(pairs: Sequence[Sequence[int]], overhead: float, divisor: float, mode: str, *,
                 warps_per_block: int | None = None) -> tuple[float, list[float]]:
    """One launch's value from its per-warp (start, stop) clock pairs, and the per-warp values.

    ``warp``: the median over warps of (stop - start - overhead) / divisor: latency, per-warp issue.
    ``span``: (last stop - first start - overhead) / divisor: the whole block's throughput on its SM.
    ``block_span``: the median over blocks (``warps_per_block`` consecutive pairs each) of the
    block's (last stop - first start - overhead) / divisor: per-SM throughput of a launch with one
    block per SM (a cluster), each span read on one SM's clock.
    """
    if not pairs:
        raise ValueError("no clock pairs: the launch had no warps")
    per_warp = [(float(b - a) - overhead) / divisor for a, b in pairs]
    if mode == "warp":
        return statistics.median(per_warp), per_warp
    if mode == "span":
        return (float(max(b for _, b in pairs) - min(a for a, _ in pairs)) - overhead) / divisor, per_warp
    if mode == "block_span" and warps_per_block:
        if len(pairs) % warps_per_block:
            raise ValueError(f"{len(pairs)} clock pairs are not whole blocks of {warps_per_block} warps")
        blocks = [pairs[i:i + warps_per_block] for i in range(0, len(pairs), warps_per_block)]
        spans = [(float(max(b for _, b in blk) - min(a for a, _ in blk)) - overhead) / divisor for blk in blocks]
        return statistics.median(spans), per_warp
    raise ValueError(f"mode must be 'warp', 'span' or 'block_span' with warps_per_block, not {mode!r}")


def relative_noise(values: Sequence[float]) -> float:
    """Relative standard deviation (nvbench's 'noise'); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    m = statistics.fmean(values)
    return statistics.stdev(values) / abs(m) if m else float("inf")


def stop_reason(values: Sequence[float], rule: StopRule, elapsed_s: float) -> str | None:
    """Why to stop repeating launches now, or None to go on (nvbench's rule): "converged" once at
    least ``min_samples`` values have noise under the target, else "time budget" once the budget is
    spent (after ``min_samples``), else "sample cap" at ``max_samples``."""
    n = len(values)
    if n >= rule.min_samples:
        if relative_noise(values) <= rule.noise_target:
            return "converged"
        if elapsed_s > rule.time_budget_s:
            return "time budget"
    if n >= rule.max_samples:
        return "sample cap"
    return None


# ----------------------------------------------------------------------------------------------
# launches CuPy's RawKernel call cannot make: thread-block clusters, parameters passed by value as bytes

#: the largest cluster every sm_90 GPU must run; larger sizes need the non-portable attribute
PORTABLE_CLUSTER_SIZE = 8
#: the largest cluster size sm_90 allows at all (non-portable)
MAX_CLUSTER_SIZE = 16
#: dynamic shared memory a function may use without asking (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
DEFAULT_DYNAMIC_SHARED = 48 * 1024


def cuda_driver():
    """cuda-python's driver module (``cuda.bindings.driver``; ``cuda.cuda`` in cuda-python before 12.6)."""
    try:
        from cuda.bindings import driver
    except ImportError:  # pragma: no cover  (an old cuda-python)
        from cuda import cuda as driver
    return driver


def check_cluster(spec: KernelSpec) -> None:
    """Refuse a cluster spec no GPU can launch: the size out of 1..16, or a grid that is not whole
    clusters."""
    k = spec.cluster
    if k is None:
        raise ValueError(f"{spec.label()} is not a cluster launch (cluster=None)")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_CLUSTER_SIZE:
        raise ValueError(f"{spec.label()}: cluster size must be an integer 1..{MAX_CLUSTER_SIZE}, not {k!r}")
    if spec.grid % k:
        raise ValueError(f"{spec.label()}: grid {spec.grid} is not a whole number of clusters of {k}")


def needs_launch_ex(spec: KernelSpec, args: Sequence) -> bool:
    """Whether a launch goes through cuLaunchKernelEx: a cluster spec, dynamic shared memory, or an
    argument passed by value as raw bytes (a CUtensorMap), which CuPy's kernel call does not take."""
    return spec.cluster is not None or spec.shared_mem > 0 or any(isinstance(a, (bytes, bytearray)) for a in args)


def _param_bytes(a) -> bytes:
    """One kernel parameter as the bytes the kernel receives: a device array as its 8-byte address,
    a NumPy scalar (cupy.int32(5) is one) as its bytes, raw bytes as they are."""
    import struct
    if isinstance(a, (bytes, bytearray)):
        if not a:
            raise TypeError("an empty bytes kernel parameter")
        return bytes(a)
    ptr = getattr(getattr(a, "data", None), "ptr", None)
    if ptr is not None:  # a CuPy array (a NumPy array's .data is a memoryview, without .ptr)
        return struct.pack("<Q", int(ptr))
    tobytes = getattr(a, "tobytes", None)
    if tobytes is not None and getattr(a, "shape", None) == ():  # a NumPy scalar
        return tobytes()
    raise TypeError(f"kernel parameter {a!r} ({type(a).__name__}): give a CuPy array, a NumPy scalar "
                    "(cupy.uint32(5), which says its size) or bytes")


def kernel_params(args: Sequence, align: int = 64) -> tuple[object, list]:
    """cuLaunchKernel's ``kernelParams`` for ``args``: a ctypes array of pointers, one per parameter,
    each to a copy of the parameter's bytes (:func:`_param_bytes`) at an ``align``-byte aligned
    address (a CUtensorMap is 64-byte aligned; the driver copies each by the kernel's own layout).
    Returns (the pointer array, the buffers it points into: keep both alive until the launch)."""
    import ctypes
    keep, ptrs = [], []
    for a in args:
        data = _param_bytes(a)
        buf = ctypes.create_string_buffer(len(data) + align)
        addr = (ctypes.addressof(buf) + align - 1) // align * align
        ctypes.memmove(addr, data, len(data))
        keep.append(buf)
        ptrs.append(addr)
    return (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs), keep


def launch_config(driver, spec: KernelSpec, stream: int = 0):
    """The CUlaunchConfig of ``spec``: its grid and block along x and its dynamic shared memory on
    ``stream``, and for a cluster spec one CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION attribute of
    (cluster, 1, 1)."""
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = spec.grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = spec.block, 1, 1
    config.sharedMemBytes = spec.shared_mem
    config.hStream = driver.CUstream(int(stream))
    attrs = []
    if spec.cluster is not None:
        check_cluster(spec)
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = spec.cluster, 1, 1
        attrs.append(attr)
    config.attrs = attrs
    config.numAttrs = len(attrs)
    return config


def driver_error(driver, err) -> str:
    """A driver API status as its name and description: 'CUDA_ERROR_INVALID_CLUSTER_SIZE (...)'."""
    try:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{name} ({text})"
    except Exception:
        return str(err)


def patched_for_timing(cubin: sass.Cubin, kernel: str, edits: list[sass.Edit]) -> tuple[bytes, list[sass.Instruction]]:
    """The kernel with both clock reads waiting on every scoreboard, plus ``edits``; verified by
    disassembly, and refused unless the patched region is clean at both ends."""
    result = sass.patch(cubin, kernel, [*edits, *sass.timing_edits(cubin.instructions(kernel))])
    problems = sass.region_hazards(result.instructions)
    if problems:
        raise UncleanRegion(f"{kernel} ({cubin.name}): the timed region is not clean after the timing patch:\n  "
                            + "\n  ".join(problems))
    return result.cubin, result.instructions


# ----------------------------------------------------------------------------------------------
# Nsight Compute


class NcuUnavailable(Exception):
    """ncu is missing or cannot read this GPU's counters; the message is the skip reason."""


def find_ncu() -> str | None:
    import glob
    import shutil
    env = os.environ.get("GPUPROPS_NCU")
    if env:
        return env
    return shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)), None) \
        or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ncu"), reverse=True)), None)


def ncu_unavailable_reason() -> str | None:
    return None if find_ncu() else "Nsight Compute (ncu) is not on PATH (set GPUPROPS_NCU to its path)"


def ncu_metrics(runner: Runner, specs: Sequence[KernelSpec], metrics: list[str], *, timeout_s: float = 300.0
                ) -> list[dict[str, float]]:  # pragma: no mutate block  (GPU only)
    """Profile one launch of each spec (built and patched as for timing) under ``ncu --clock-control
    none``, all in ONE ncu process, and return each launch's metrics in order. The kernels get the
    cycles buffer and the arguments their spec builds."""
    return _ncu_finish(_ncu_start(runner, specs, metrics), metrics, len(specs), timeout_s)


def ncu_key(specs: Sequence[KernelSpec], metrics: Sequence[str]) -> tuple:
    """What an ncu profile is of: the specs' kernels and builds, and the metrics."""
    return (tuple(f"{s.label()} {sorted(s.defines.items())}" for s in specs), tuple(metrics))


class NcuJob:  # pragma: no mutate block  (GPU only)
    """:func:`ncu_metrics` started ahead of its test, in the background: ncu's start-up (about 3 s,
    most of it ncu's own, on the CPU) overlaps the session's work instead of adding to the run. The
    profiled process takes the GPU's lock itself, before it first touches CUDA, and holds it until its
    kernels and buffers are gone (pytest_gpuprops.launch), so no measurement runs beside its launches;
    :meth:`result` waits for the profile."""

    def __init__(self, runner: Runner, specs: Sequence[KernelSpec], metrics: list[str], *, timeout_s: float = 300.0):
        import threading
        self.key = ncu_key(specs, metrics)
        self._out: list[dict[str, float]] | None = None
        self._error: BaseException | None = None
        cmd = _ncu_start(runner, specs, metrics)  # builds in this thread (compile, patch: not thread-bound)

        def run():
            try:
                self._out = _ncu_finish(cmd, metrics, len(specs), timeout_s)
            except BaseException as exc:  # handed to result(), in the test that asks
                self._error = exc

        self._thread = threading.Thread(target=run, name="gpuprops-ncu", daemon=True)
        self._thread.start()

    def result(self) -> list[dict[str, float]]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out  # type: ignore[return-value]


def _ncu_start(runner: Runner, specs: Sequence[KernelSpec], metrics: list[str]) -> list[str]:
    """The ncu command line for one launch of each spec (its cubins written to the runner's folder)."""
    import json
    import sys
    launches = []
    for spec in specs:
        cubin, _ = runner.build(spec)
        path = os.path.join(runner._tmp, "ncu-" + hashlib.sha256(cubin).hexdigest()[:16] + ".cubin")
        Path(path).write_bytes(cubin)
        launches.append({"cubin": path, "kernel": spec.kernel, "grid": spec.grid, "block": spec.block,
                         "args": encode_args(spec), "device": runner.info.index})
    names = sorted({spec.kernel for spec in specs})
    job = {"lock": str(gpu_lock_path(runner.info.index)), "launches": launches}
    return [find_ncu(), "--clock-control", "none", "--csv", "--print-units", "base", "--metrics", ",".join(metrics),
            "-k", "regex:^(" + "|".join(names) + ")$", sys.executable, "-m", "pytest_gpuprops.launch",
            json.dumps(job)]


def _ncu_finish(cmd: list[str], metrics: list[str], launches: int, timeout_s: float
                ) -> list[dict[str, float]]:  # pragma: no mutate block  (GPU only)
    """Run the ncu command and read its metrics. The profiled process takes the GPU's lock itself:
    the caller must not hold it (the two would wait for each other until the lock's timeout)."""
    import subprocess
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    text = proc.stdout
    if proc.returncode != 0 or '"Metric Name"' not in text:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise NcuUnavailable("ncu could not profile the kernels: " + " | ".join(tail))
    return parse_ncu_csv(text[text.index('"ID"'):] if '"ID"' in text else text, metrics, launches)



def parse_ncu_csv(body: str, metrics: list[str], launches: int) -> list[dict[str, float]]:
    """ncu --csv rows (one per launch and metric) -> one {metric: value} per launch, in launch order."""
    import csv
    import io
    by_id: dict[int, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(body)):
        name, value = row.get("Metric Name"), row.get("Metric Value", "")
        if name not in metrics:
            continue
        try:
            by_id.setdefault(int(row["ID"]), {})[name] = float(value.replace(",", ""))
        except ValueError:
            raise NcuUnavailable(f"ncu printed {value!r} for {name}; expected a number") from None
    out = [by_id[k] for k in sorted(by_id)]
    if len(out) != launches:
        raise NcuUnavailable(f"ncu profiled {len(out)} launches, expected {launches}")
    for i, got in enumerate(out):
        missing = [m for m in metrics if m not in got]
        if missing:
            raise NcuUnavailable(f"ncu did not report {', '.join(missing)} for launch {i} on this GPU")
    return out


def encode_args(spec: KernelSpec) -> list[dict]:
    """The spec's arguments (after the cycles buffer) in a form another process can rebuild:
    each CuPy array as dtype, shape and its values, each scalar as dtype and value."""
    if spec.args is None:
        return []
    import cupy
    out = []
    for a in spec.args(cupy):
        if isinstance(a, cupy.ndarray):
            values = a.get().ravel().tolist()
            if values and all(v == values[0] for v in values):  # zeros / full(): no need to send each value
                out.append({"array": a.dtype.str, "fill": values[0], "size": len(values)})
            else:
                out.append({"array": a.dtype.str, "values": values})
        else:
            out.append({"scalar": type(a).__name__, "value": a.item() if hasattr(a, "item") else a})
    return out


def function_handle(fn) -> int:
    """The CUfunction of a CuPy kernel: a cupy.cuda.Function has ``ptr``; CuPy 13+'s RawModule hands
    out a RawKernel, whose Function is ``kernel``."""
    ptr = getattr(fn, "ptr", None)
    return int(ptr if ptr is not None else fn.kernel.ptr)


def visible_gpu_count() -> int:
    """How many CUDA GPUs this process sees (0 without CuPy or a driver)."""
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0
