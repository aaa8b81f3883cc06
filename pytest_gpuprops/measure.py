"""measure layer: load a cubin, launch it, and turn per-warp clock64 pairs into a Measurement.

Method (docs/method.md), and where each step lives:
* every timed kernel writes one (start, stop) clock64 pair per warp (kernels/gpuprops.cuh);
* before launch both clock reads are patched to wait on all six scoreboards: the start read, so
  nothing issued before the region (an input load, a store) finishes inside it; the stop read, so
  the region ends only when its last variable-latency result is in (the seeds' sm_86 listings show
  the compiler does not always make it wait, which biased short chains low: 22.62 cycles at
  UNROLL 50). A region that is still not clean after the patch is refused (timing.py);
* the clock-read overhead (two back-to-back reads, patched the same way) is measured once per GPU
  and subtracted (Runner.clock_overhead);
* launches repeat until the relative standard deviation of the per-launch values is under the noise
  target (after a minimum count), or a time budget or a sample cap ends it: nvbench's rule
  (stats.py). Which one ended it is part of the result;
* the SM clock the kernels saw (clock64 against %globaltimer) and NVML's clock-event (throttle)
  reasons (devices.py) are recorded with every measurement; a latency whose path leaves the SM also
  reads the clock just before and after its launches (KernelSpec.clock_beside): its cycles follow it;
* a throughput chain whose fill, drain and start skew would be in its span runs at two lengths of one
  binary, each launch a pair, and its value is the slope between them (KernelSpec.lengths, stats.slope_value);
* one process at a time measures on a GPU (gpulock.py), so pytest-xdist workers never overlap.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from . import ceilings, devices, driver_launch, gpulock, reserved, sass
from . import compile as gp_compile
from .devices import GpuInfo
from .driver_launch import KernelLaunchError
from .kernel_spec import KernelSpec
from .measurement import Measurement
from .stats import (
    StopRule,
    clock_summary,
    launch_value,
    region_clock_mhz,
    slope_value,
    stop_reason,
)
from .timing import build_for_timing

#: the spins the session's SM clock is read over: the extra clock64 cycles of a 100 ms spin over a 50 ms one
#: against their extra time by CUDA events, all queued behind a 20 ms spin (the gate) so that the GPU runs the
#: spins and their events back to back whatever the host thread does meanwhile. Under the whole suite (its
#: prefetch compiling on every core) a spin timed from the host, or by events recorded around each launch,
#: took the host's delays in: 1928.5-1977.5 MHz by host time on H100 GPU-17718160, 1940-2024 by events on
#: GPU-a4c4e6ff, where a stand-alone spin read 1979.0-1980.8 by host time, events and %globaltimer alike and
#: NVML 1980 (2026-11-26, docs/results.md). A single spin timed by %globaltimer read 2032-2092 under the suite
#: on H100s at 1980, unexplained: no time base of its own
SM_CLOCK_SPINS_NS = (50_000_000, 100_000_000)
SM_CLOCK_GATE_NS = 20_000_000
#: tries at a gated reading (:func:`gated_clock`) before the session clock is given up as unknown
SM_CLOCK_TRIES = 3

#: a clock read beside a measurement (Runner.clock_beside_mhz): the median of this many spins of
#: CLOCK_BESIDE_SPIN_NS, each its clock64 cycles over its %globaltimer nanoseconds. %globaltimer ticks every 32 ns
#: on H100 (0.064 % of a 50 us spin, a tenth of the step between the H100's 1980 and 1995 MHz states); the median
#: of three keeps a spin that met a jump of the timer out (a 50-100 ms spin by %globaltimer alone read
#: 2032-2092 MHz under the suite's compiles, SM_CLOCK_SPINS_NS)
CLOCK_BESIDE_SPINS = 3
CLOCK_BESIDE_SPIN_NS = 50_000


def clock_from_spins(spins: list[tuple[int, float]]) -> float:
    """MHz from two spins' (clock64 cycles, milliseconds): the extra cycles of the longer over its extra
    time, so what both launches spend outside the spin cancels; NaN where they took one time."""
    (c1, ms1), (c2, ms2) = sorted(spins, key=lambda s: s[1])
    return (c2 - c1) / (ms2 - ms1) / 1000.0 if ms2 > ms1 else float("nan")


def gated_clock(spins: list[tuple[int, float]], *, queued_ms: float, gate_ms: float) -> float | None:
    """The SM clock (MHz) of two gated spins' (clock64 cycles, event milliseconds) (:func:`clock_from_spins`),
    or None where the host took longer to queue them (``queued_ms``) than the gate ran (``gate_ms``): then
    the GPU may have waited on the host between them, and their times hold that wait."""
    return clock_from_spins(spins) if queued_ms < gate_ms else None


class Runner:  # pragma: no mutate block  (GPU only)
    """Compiles, patches, loads and times kernels on one GPU."""

    #: the spin kernel (sm_clock_rate.cu) both clock readings launch, loaded on first use (:meth:`_spin_kernel`)
    _spin_fn = None

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
        self._clock_read = False
        #: the session clock's spin reading where it was above what the GPU can run (session_sm_clock_mhz)
        self.refused_session_clock_mhz: float | None = None
        self._tmp = tempfile.mkdtemp(prefix="gpuprops-mod-")
        cupy.cuda.Device(info.index).use()
        #: buffers the collected fact specs reserve, allocated before any test's, the largest first (reserved.py)
        self.reserved = reserved.allocate_requested(cupy)

    def close(self) -> None:
        """The folder of the cubins this runner loaded goes (the driver read each file when it loaded it)."""
        shutil.rmtree(self._tmp, ignore_errors=True)

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
        """Launch once and return the (n_warps, 2) array of clock pairs; (n_warps, 4) where the kernel also
        records its %globaltimer pairs (``spec.timer``): each warp's clock pair, then its timer pair."""
        cp = self.cp
        n_warps = spec.grid * spec.block // 32
        stamps = 4 if spec.timer else 2
        cycles = cp.zeros(stamps * n_warps, dtype=cp.uint64)
        shape = spec.label()
        try:
            begun = cp.cuda.Event()
            begun.record()
            if driver_launch.needs_launch_ex(spec, args):
                driver_launch.launch_ex(fn, spec, (cycles, *args), cp.cuda.get_current_stream().ptr)
            else:
                fn((spec.grid,), (spec.block,), (cycles, *args))
            done = cp.cuda.Event()
            done.record()
            driver_launch.wait_for(done, self.launch_timeout_s, shape)
            # every warp's clock pair, then every warp's timer pair -> one row a warp: clocks, then timers
            pairs = cycles.get().reshape(stamps // 2, n_warps, 2).transpose(1, 0, 2).reshape(n_warps, stamps)
            pairs = pairs.astype("int64")
            self.gpu_busy_s += cp.cuda.get_elapsed_time(begun, done) / 1e3
            self.launches += 1
        except KernelLaunchError:
            raise
        except Exception as exc:
            raise KernelLaunchError(f"{shape} failed: {type(exc).__name__}: {exc}") from exc
        for first in range(0, pairs.shape[1], 2):
            stamp = pairs[:, first:first + 2]
            if (stamp[:, 1] < stamp[:, 0]).any() or (stamp == 0).all(axis=1).any():
                what = "clock" if first == 0 else "%globaltimer"
                raise KernelLaunchError(f"{shape}: some warps wrote no or reversed {what} pairs")
        return pairs

    def cluster_refusal(self, spec: KernelSpec, built: tuple[bytes, list] | None = None) -> str | None:
        """None when ``spec``'s clusters can run on this GPU; otherwise why not (a skip reason; see
        driver_launch.cluster_refusal)."""
        driver_launch.check_cluster(spec)
        cubin, _ = built or self.build(spec)
        return driver_launch.cluster_refusal(self.load(cubin, spec.kernel), spec)

    def clock_overhead(self) -> float:
        """Cycles between two back-to-back clock reads (patched like every kernel's)."""
        if self._overhead is None:
            spec = KernelSpec("clock_overhead.cu", "clock_overhead", region={})
            cubin, _ = self.build(spec)
            fn = self.load(cubin, spec.kernel)
            vals = [float(p[0, 1] - p[0, 0]) for p in (self.launch_pairs(fn, spec, ()) for _ in range(21))]
            self._overhead = statistics.median(vals[1:])
        return self._overhead

    def session_sm_clock_mhz(self) -> float | None:
        """The SM clock, read once per session (:meth:`sm_clock_mhz`; its gate spin wakes an idle GPU).
        None where it could not be read or read more than the GPU can run (ceilings.possible_clock; such a
        reading is kept in :attr:`refused_session_clock_mhz` and said beside every measurement)."""
        if not self._clock_read:
            read = self.sm_clock_mhz()
            self._clock = ceilings.possible_clock(read, self.info.max_sm_clock_mhz)
            self.refused_session_clock_mhz = None if self._clock is not None else read
            self._clock_read = True
        return self._clock

    def sm_clock_mhz(self, spins_ns: tuple[int, int] = SM_CLOCK_SPINS_NS) -> float | None:
        """The SM clock the kernels run at: two spins of ``spins_ns`` and their events queued behind a gate
        spin (:data:`SM_CLOCK_SPINS_NS`, :func:`gated_clock`), up to :data:`SM_CLOCK_TRIES` times; None where
        the host never queued them within the gate."""
        cp = self.cp
        fn = self._spin_kernel()
        stream = cp.cuda.get_current_stream()
        for _ in range(SM_CLOCK_TRIES):
            outs = [cp.zeros(2, dtype=cp.uint64) for _ in range(3)]
            events = [cp.cuda.Event() for _ in range(4)]
            stream.synchronize()
            t0 = time.perf_counter_ns()
            events[0].record()
            for k, spin_ns in enumerate((SM_CLOCK_GATE_NS, *spins_ns)):
                fn((1,), (32,), (outs[k], cp.uint64(spin_ns)))
                events[k + 1].record()
            queued_ms = (time.perf_counter_ns() - t0) / 1e6
            stream.synchronize()
            spins = [(int(outs[k][0].get()), cp.cuda.get_elapsed_time(events[k], events[k + 1])) for k in (1, 2)]
            clock = gated_clock(spins, queued_ms=queued_ms, gate_ms=cp.cuda.get_elapsed_time(events[0], events[1]))
            if clock is not None:
                return clock
        return None

    def _spin_kernel(self):
        """sm_clock_rate (a spin of a given %globaltimer span), compiled and loaded once per runner: the session
        clock reads it, and the clock beside twice for every flagged measurement."""
        if self._spin_fn is None:
            self._spin_fn = self.load(self.compile("sm_clock_rate.cu").cubin, "sm_clock_rate")
        return self._spin_fn

    def clock_beside_mhz(self) -> float | None:
        """The SM clock now, as a kernel sees it: the median of CLOCK_BESIDE_SPINS spins of CLOCK_BESIDE_SPIN_NS
        queued back to back, each its clock64 cycles over its %globaltimer nanoseconds; None where no spin
        could be read. Read beside a measurement (KernelSpec.clock_beside) it says which clock state the
        launches met: the H100 runs at 1980 or 1995 MHz and moves between them within a process."""
        cp = self.cp
        fn = self._spin_kernel()
        out = cp.zeros(2 * CLOCK_BESIDE_SPINS, dtype=cp.uint64)
        for k in range(CLOCK_BESIDE_SPINS):
            fn((1,), (32,), (out[2 * k:], cp.uint64(CLOCK_BESIDE_SPIN_NS)))
        stamps = out.get().reshape(-1, 2)
        clocks = [int(c) * 1e3 / int(ns) for c, ns in stamps if ns > 0]
        return round(statistics.median(clocks), 1) if clocks else None

    def measure(self, name: str, spec: KernelSpec, *, divisor: float, mode: str = "warp", unit: str = "cycles",
                transform: Callable[[float], float] | None = None, stop: StopRule | None = None,
                built: tuple[bytes, list] | None = None) -> Measurement:
        """Repeat launches of ``spec`` until the stop rule ends, and return the measurement.

        ``mode="warp"``: a launch's value is the median over warps of (stop - start - overhead) /
        divisor (latency, per-warp issue). ``mode="span"``: (last stop - first start - overhead) /
        divisor (throughput of the whole block on its SM). ``mode="block_span"``: the median over
        blocks of each block's span (throughput per SM of a launch of several blocks, one per SM,
        whose SM clocks are not one clock). ``transform`` maps cycles to the unit (e.g. bytes per
        cycle). With ``spec.lengths``, each launch is a pair and its value their slope (stats.slope_value).
        """
        if spec.lengths and mode != "span":
            raise ValueError(f"{spec.label()}: lengths {spec.lengths} take the slope of the block's span; "
                             f"mode must be 'span', not {mode!r}")
        stop = stop or self.stop
        overhead = self.clock_overhead()
        cubin, _ = built or self.build(spec)
        fn = self.load(cubin, spec.kernel)
        with gpulock.gpu_lock(self.info.index):
            # the arguments inside the lock: building them may warm a footprint into L2 (specs.global_chase's
            # warm="l2"), which another process's pair test, streaming a peer copy through this GPU's L2
            # between the warm and the launches, would evict (H100 GPU-97530287 in a node run, 2026-11-26: an
            # L2 hit's p10 read 541 cycles, DRAM's, in a first measurement, then 259 and 259)
            args = spec.args(self.cp) if spec.args else ()
            reasons_before, _ = devices.throttle_reasons(self.info)
            clock = self.session_sm_clock_mhz()
            if spec.lengths:  # a launch pair, one at each repeat count of the chain (the kernel's last argument)
                import numpy
                short, long = ((*args, numpy.int32(n)) for n in spec.lengths)
                warm_args = short

                def take():
                    pairs = self.launch_pairs(fn, spec, long).tolist()
                    return pairs, slope_value(self.launch_pairs(fn, spec, short).tolist(), pairs, divisor,
                                              spec.lengths[1] - spec.lengths[0])
            else:
                warm_args = args

                def take():
                    pairs = self.launch_pairs(fn, spec, args).tolist()
                    return pairs, launch_value(pairs, overhead, divisor, mode, warps_per_block=max(1, spec.block // 32))
            self.launch_pairs(fn, spec, warm_args)  # warm-up: instruction caches, module load
            beside = [self.clock_beside_mhz()] if spec.clock_beside else []
            values: list[float] = []
            per_warp: list[float] = []
            region_clocks: list[float] = []  # a TIMER=1 build's: the clock each launch ran at (reported)
            t_start = time.monotonic()
            reason = None
            while reason is None:
                pairs, (v, per_warp) = take()
                values.append(float(transform(v) if transform else v))
                launch_clock = region_clock_mhz(pairs) if spec.timer else None
                if launch_clock is not None:
                    region_clocks.append(launch_clock)
                reason = stop_reason(values, stop, time.monotonic() - t_start)
            if spec.clock_beside:
                beside.append(self.clock_beside_mhz())
            reasons_after, _ = devices.throttle_reasons(self.info)
        beside = [c for c in beside if c is not None]
        m = Measurement(name=name, unit=unit, values=values, stop_reason=reason, noise_target=stop.noise_target,
                        overhead_cycles=overhead, sm_clock_mhz=None if clock is None else round(clock, 1),
                        throttle=sorted(set(reasons_before) | set(reasons_after)), kernel=spec.kernel,
                        launch={"source": spec.source, "defines": dict(spec.defines), "grid": spec.grid,
                                "block": spec.block, "mode": mode, "divisor": divisor,
                                **({} if spec.lengths is None else {"lengths": list(spec.lengths)}),
                                **({} if spec.cluster is None else {"cluster": spec.cluster}),
                                **({"shared_mem": spec.shared_mem} if spec.shared_mem else {}),
                                **({"session_clock_refused_mhz": round(self.refused_session_clock_mhz, 1)}
                                   if self.refused_session_clock_mhz is not None else {}),
                                **clock_summary("region_clock", region_clocks),
                                **clock_summary("clock_beside", beside)},
                        per_warp=per_warp)
        m.remeasure = lambda: self.measure(name, spec, divisor=divisor, mode=mode, unit=unit, transform=transform,
                                           stop=stop, built=(cubin, []))
        return m
