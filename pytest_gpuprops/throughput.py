"""measure layer, whole GPU and time units: the SM clock a GPU sustains under load, and what every
SM together does per second (FLOP/s, bytes/s), beside measure.py's cycle counts on one SM.

Method (hwtests/test_throughput_and_clocks.py states each fact's):

* a *workload* is one kernel on every SM (``kernels/stress_ffma.cu``, ``kernels/stream_bandwidth.cu``)
  whose thread 0 per block stamps (clock64, %globaltimer) at its start, at its end and, in the
  stresses, at SAMPLES - 1 points between: cycles / nanoseconds is the SM clock that block ran at,
  over time, with no host in the loop;
* **throughput** (:func:`measure_rate`): the launch length is calibrated (the kernel's loop count
  scaled to ``target_launch_s``), one warm-up launch, then repeats of ``launches`` back-to-back
  launches between two CUDA events until the stop rule ends it (:func:`measure.stop_reason`, min 5
  repeats); a repeat's value is the work of its launches over the events' elapsed time (the gaps
  between launches included). It carries the SM clock the kernels saw (the last launch of each repeat,
  median over repeats), and NVML's SM clock and clock-event reasons, sampled by a thread every 50 ms;
* **placed throughput** (:func:`measure_placed_rate`, the L2 read): the same, over L2_PLACEMENTS windows
  of one size, each on pages of its own in one allocation (:func:`l2_placements`), since the rate of one
  buffer moves with where its lines fall among the L2 slices and partitions; a repeat times every window
  in turn (an untimed read of it first) and its value is the mean of the windows' rates;
* **sustained clock** (:func:`stress_clock`): after 0.25 s idle, launches of ~50 ms kept two deep in
  the stream for ``duration_s`` (the GPU never waits for the host). The kernel-side clock of every
  block's intervals, in 10 ms bins over the whole GPU, is the clock over time: sustained = the median
  of the means of 5 consecutive windows of its sustained part (the second half, or from
  ``sustained_from_s`` on; those 5 are the measurement's values), min = the lowest bin from the ramp
  on, ramp = the time from the first launch until a bin first reaches 95 % of sustained. NVML's
  samples give the same three and the throttle reasons seen. The load's own rate in the same 5
  windows (:func:`window_rates`) is a throughput fact of its own where the load is one
  (:func:`stress_rate`: the dense bf16 wgmma rate, from the tensor stress).

Every Measurement has ``remeasure`` set (the same workload measured again, fresh launches), so a
failing fact is confirmed before it is reported. No pytest in this module; the pure arithmetic is
tested in tests/test_throughput.py with given numbers.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence

from . import measure
from .measure import Measurement, StopRule

# ----------------------------------------------------------------------------------------------
# datasheets


@dataclasses.dataclass(frozen=True)
class Datasheet:
    """One SKU's published peaks (dense: tensor figures without 2:4 sparsity)."""

    sku: str
    sms: int
    max_sm_clock_mhz: int
    fp32_tflops: float
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    dram_gbps: float
    source: str


_H100_DS = ("NVIDIA H100 Tensor Core GPU datasheet (SXM and PCIe columns; BF16 and FP8 tensor figures are "
            "printed with sparsity, the dense ones are half) and the NVIDIA H100 Tensor Core GPU Architecture "
            "whitepaper (dense FP16/BF16 989.4 TFLOPS for H100 SXM5, 756.5 for H100 PCIe)")
_H200_DS = ("NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column: the H100 SXM's compute, 4.8 TB/s HBM3e; "
            "tensor figures printed with sparsity, the dense ones are half)")

#: Keyed by the name CUDA reports (cudaDeviceProp.name, GpuInfo.name), matched case and spacing aside.
DATASHEETS: dict[str, Datasheet] = {
    "NVIDIA H100 80GB HBM3": Datasheet("H100 SXM5 80GB", 132, 1980, 67.0, 989.4, 1978.9, 3350.0, _H100_DS),
    "NVIDIA H100 PCIe": Datasheet("H100 PCIe 80GB", 114, 1755, 51.0, 756.5, 1513.0, 2000.0, _H100_DS),
    "NVIDIA H200": Datasheet("H200 SXM 141GB", 132, 1980, 67.0, 989.4, 1978.9, 4800.0, _H200_DS),
}

#: FLOPs per SM per cycle at full rate (FFMA: FP32 lanes x 2, 64 lanes on sm_80, 128 on sm_86 .. sm_90;
#: wgmma dense: the sm_90 facts wgmma_m64n256k16_*_sm_cycles = 128 cycles for 64 x 256 x 16 x 2 FLOPs;
#: e4m3 twice bf16).
PER_SM_CYCLE: dict[str, dict[str, int]] = {
    "sm_80": {"ffma": 128},
    "sm_86": {"ffma": 256},
    "sm_89": {"ffma": 256},
    "sm_90": {"ffma": 256, "wgmma_bf16": 4096, "wgmma_e4m3": 8192},
}

#: Which datasheet figure a workload is compared with.
PEAK_FIELD = {"ffma": "fp32_tflops", "wgmma_bf16": "bf16_dense_tflops", "wgmma_e4m3": "fp8_dense_tflops",
              "dram_read": "dram_gbps", "dram_copy": "dram_gbps", "dram_write": "dram_gbps"}


def _key(name: str) -> str:
    return " ".join(name.split()).casefold()


def datasheet_for(gpu_name: str) -> Datasheet | None:
    """The datasheet of the GPU CUDA names ``gpu_name``; None for a GPU not tabulated here."""
    return next((d for n, d in DATASHEETS.items() if _key(n) == _key(gpu_name)), None)


def implied_clock_mhz(peak_tflops: float, sms: int, flops_per_sm_cycle: int) -> float:
    """The SM clock at which ``sms`` SMs doing ``flops_per_sm_cycle`` make the datasheet's peak."""
    return peak_tflops * 1e12 / (sms * flops_per_sm_cycle) / 1e6


def clock_peak_tflops(sms: int, flops_per_sm_cycle: int, mhz: float) -> float:
    """The peak at the clock a measurement ran at: sms x FLOP per SM per cycle x clock."""
    return sms * flops_per_sm_cycle * mhz * 1e6 / 1e12


# ----------------------------------------------------------------------------------------------
# kernel build parameters (the kernels' defines) and what one launch does

#: kernels/stress_ffma.cu, stress_ffma: 8 chains x 64 steps per loop trip = 512 FFMAs, 8 samples;
#: blocks of 512 (launch bounds: 32 registers, so every thread slot of an SM is filled).
FFMA_BLOCK = 512
FFMA_DEFINES = {"ILP": 8, "UNROLL": 64, "SAMPLES": 8, "BLOCK": FFMA_BLOCK}
#: kernels/stress_ffma.cu, stress_wgmma (sm_90a): 16 wgmma m64n256 per loop trip, 2 warpgroups per block.
WGMMA_DTYPES = {"bf16": (0, 16, "HGMMA.64x256x16.F32.BF16"), "e4m3": (1, 32, "QGMMA.64x256x32.F32.E4M3.E4M3")}
WGMMA_N = 256
WGMMA_UNROLL, WGMMA_WARPGROUPS, WGMMA_SAMPLES = 16, 2, 8


def wgmma_defines(dtype: str) -> dict:
    return {"WGMMA_DTYPE": WGMMA_DTYPES[dtype][0], "UNROLL": WGMMA_UNROLL, "WARPGROUPS": WGMMA_WARPGROUPS,
            "SAMPLES": WGMMA_SAMPLES}


#: kernels/stream_bandwidth.cu: 4 independent 16-byte accesses per thread per loop trip, blocks of
#: 256 (launch bounds: 32 registers, every thread slot of an SM filled).
STREAM_BLOCK = 256
STREAM_DEFINES = {"UNROLL": 4, "BLOCK": STREAM_BLOCK}
VEC_BYTES = 16
STREAM_KERNELS = {"dram_read": "stream_read", "l2_read": "stream_read_cg", "dram_copy": "stream_copy",
                  "dram_write": "stream_write"}

UNIT_SCALE = {"TFLOP/s": 1e12, "GB/s": 1e9}
MAX_SCALE = 2**31 - 1


def ffma_flops(grid: int, block: int, samples: int, iters: int, unroll: int, ilp: int) -> int:
    """FLOPs of one stress_ffma launch: every thread runs samples x iters loop trips of unroll x ilp FFMAs."""
    return 2 * grid * block * samples * iters * unroll * ilp


def wgmma_flops(grid: int, warpgroups: int, samples: int, iters: int, unroll: int, n: int, k: int, m: int = 64) -> int:
    """FLOPs of one stress_wgmma launch: every warpgroup runs samples x iters x unroll m x n x k MMAs."""
    return 2 * m * n * k * grid * warpgroups * samples * iters * unroll


def stream_bytes(kind: str, n16: int, reps: int) -> int:
    """Bytes one stream launch moves: reads (and, for a copy, as many writes) of n16 16-byte vectors, reps times."""
    if kind not in STREAM_KERNELS:
        raise ValueError(f"kind must be one of {', '.join(STREAM_KERNELS)}, not {kind!r}")
    return VEC_BYTES * n16 * (2 if kind == "dram_copy" else 1) * reps


def dram_buffer_bytes(l2_bytes: int, free_bytes: int, *, floor: int = 1 << 30) -> int:
    """The DRAM buffer: 8 x L2 or 1 GiB, whichever is larger, at most a quarter of free memory
    (the copy needs two), in whole 16-byte vectors."""
    want = max(8 * l2_bytes, floor)
    nbytes = min(want, free_bytes // 4) // VEC_BYTES * VEC_BYTES
    if nbytes < 4 * l2_bytes:
        raise ValueError(f"only {free_bytes} bytes of device memory free: a DRAM buffer of {nbytes} bytes would "
                         f"not be 4 x the {l2_bytes}-byte L2")
    return nbytes


def l2_buffer_bytes(l2_bytes: int) -> int:
    """The L2 buffer: a quarter of the L2, in whole 16-byte vectors."""
    return l2_bytes // 4 // VEC_BYTES * VEC_BYTES


#: The L2 read rate depends on where its buffer's lines fall among the L2 slices and the two L2
#: partitions, i.e. on the physical pages the buffer got: one 12.5 MiB buffer read 7045-7215 GB/s in
#: three processes on one H100 (7058-7484 on another), each process steady to 0.2 %. So the L2 read is
#: measured in this many windows of that size, each on 2 MiB pages of its own (64 placements of the
#: lines), and the fact is the mean of their rates: if windows vary like processes (1-3 % relative
#: standard deviation), the mean of 64 varies by 1/8 of that.
L2_PLACEMENTS = 64
#: The GPU's large page (what the driver backs an allocation of MiBs with): a window starts on one and
#: shares none with another window.
PAGE_BYTES = 2 * 2**20


@dataclasses.dataclass(frozen=True)
class L2Placements:
    """Where the L2 read's windows lie in the one allocation that holds them all."""

    window_bytes: int  # each window: a quarter of the L2 (l2_buffer_bytes)
    stride_bytes: int  # window starts this far apart: the window in whole pages
    count: int
    page_bytes: int = PAGE_BYTES

    @property
    def region_bytes(self) -> int:
        """The allocation: every window, and a page of room to start the first on a page boundary."""
        return (self.count - 1) * self.stride_bytes + self.window_bytes + self.page_bytes

    def offsets(self, base_ptr: int) -> list[int]:
        """Each window's byte offset in an allocation at device address ``base_ptr``: the first at
        the first page boundary, the rest ``stride_bytes`` apart."""
        first = -base_ptr % self.page_bytes
        return [first + k * self.stride_bytes for k in range(self.count)]


def l2_placements(l2_bytes: int, count: int = L2_PLACEMENTS, *, free_bytes: int | None = None,
                  page_bytes: int = PAGE_BYTES) -> L2Placements:
    """``count`` windows of a quarter of the L2, one every whole number of pages; fewer where the
    allocation would take more than a quarter of ``free_bytes`` (at least one)."""
    window = l2_buffer_bytes(l2_bytes)
    if window <= 0:
        raise ValueError(f"an L2 of {l2_bytes} bytes has no quarter of whole 16-byte vectors to read")
    stride = -(-window // page_bytes) * page_bytes
    if free_bytes is not None:
        fits = (free_bytes // 4 - page_bytes - window) // stride + 1
        count = max(1, min(count, fits))
    return L2Placements(window, stride, count, page_bytes)


def placement_value(rates: Sequence[float]) -> float:
    """One repeat's value from the rates of its windows (one each, in window order): their mean."""
    if not rates:
        raise ValueError("no window rates to average")
    return float(statistics.fmean(rates))


def placement_summary(rates_by_repeat: Sequence[Sequence[float]]) -> dict:
    """The windows' rates over a measurement: ``rates_by_repeat[r][k]`` is repeat r's rate of window k.
    Per window, the median over repeats (``per_window``); their mean, lowest, highest, ``spread``
    ((highest - lowest) / mean) and ``noise`` (relative standard deviation): how much the rate moves
    with where the lines lie, which the mean over the windows takes out of the fact."""
    if not rates_by_repeat or not rates_by_repeat[0]:
        raise ValueError("no window rates")
    count = len(rates_by_repeat[0])
    if any(len(r) != count for r in rates_by_repeat):
        raise ValueError(f"every repeat must rate all {count} windows: {[len(r) for r in rates_by_repeat]}")
    per_window = [float(statistics.median(r[k] for r in rates_by_repeat)) for k in range(count)]
    mean = statistics.fmean(per_window)
    return {"per_window": per_window, "mean": mean, "lowest": min(per_window), "highest": max(per_window),
            "spread": (max(per_window) - min(per_window)) / mean, "noise": measure.relative_noise(per_window)}


def blocks_per_sm(max_threads_per_sm: int, block: int) -> int:
    """Resident blocks of ``block`` threads that fill an SM's thread slots (at least one)."""
    return max(1, max_threads_per_sm // block)


def per_second(work: float, seconds: float, unit: str) -> float:
    """``work`` (FLOPs or bytes) over ``seconds``, in ``unit`` (TFLOP/s, GB/s)."""
    if seconds <= 0:
        raise ValueError(f"elapsed time must be > 0, not {seconds}")
    return work / seconds / UNIT_SCALE[unit]


def _sustained_start(spans: Sequence[tuple[int, int]], from_s: float | None) -> int | float:
    """Where a stress's sustained part starts, in %globaltimer ns: ``from_s`` after its first launch
    started, or (None) the middle of its launches' time."""
    start, end = spans[0][0], max(e for _, e in spans)
    return start + from_s * 1e9 if from_s is not None else start + (end - start) / 2


def sustained_rate(spans: Sequence[tuple[int, int]], work_per_launch: float, unit: str,
                   from_s: float | None = None) -> float | None:
    """A stress's own rate over its sustained part (where its sustained clock is taken: the second half,
    or from ``from_s`` on): the work of the launches that started there over their span. ``spans``:
    each launch's (first, last) %globaltimer ns over its blocks, in launch order; None when too few
    launches."""
    if len(spans) < 2:
        return None
    late = [s for s in spans if s[0] >= _sustained_start(spans, from_s)]
    if not late:
        return None
    span_ns = max(e for _, e in late) - min(s for s, _ in late)
    return per_second(work_per_launch * len(late), span_ns / 1e9, unit) if span_ns > 0 else None


#: how many windows of a stress's sustained part its rate is read in (as its clock: summarize_clock)
RATE_WINDOWS = 5


def window_rates(spans: Sequence[tuple[int, int]], work_per_launch: float, unit: str,
                 windows: int = RATE_WINDOWS, from_s: float | None = None) -> list[float]:
    """A stress's own rate in each of ``windows`` equal windows of its sustained part (the second half
    of its launches' time, or from ``from_s`` on: where its sustained clock is read): the work of the
    launches that started in a window over their span. ``spans`` as :func:`sustained_rate`'s; []
    when a window holds no launch."""
    if len(spans) < 2:
        return []
    end = max(e for _, e in spans)
    half = _sustained_start(spans, from_s)
    width = (end - half) / windows
    rates = []
    for k in range(windows):
        lo, hi = half + k * width, half + (k + 1) * width
        inside = [sp for sp in spans if lo <= sp[0] < hi or (k == windows - 1 and sp[0] == hi)]
        span_ns = max((e for _, e in inside), default=0) - min((s for s, _ in inside), default=0)
        if not inside or span_ns <= 0:
            return []
        rates.append(per_second(work_per_launch * len(inside), span_ns / 1e9, unit))
    return rates


def stress_rate(m: Measurement, name: str) -> Measurement:
    """A throughput fact read from a sustained-clock stress (:func:`stress_clock`): the load's rate in
    each of its sustained windows, as the measurement's values. Measured again, it runs the stress
    again. Why: the tensor stress's load is the dense bf16 wgmma whose rate the bf16 TFLOP/s fact is;
    measured apart it took 6.5 s more and read the same within 0.75 % (docs/performance.md)."""
    ln = m.launch
    rates = list(ln.get("rate_windows") or [])
    if len(rates) < RATE_WINDOWS:
        raise measure.KernelLaunchError(
            f"{m.kernel}: the stress's sustained windows held too few launches to read its rate ({len(rates)} of "
            f"{RATE_WINDOWS} windows); launches of ~{ln.get('launch_s', 0) * 1e3:.0f} ms over {ln.get('duration_s')} s")
    r = Measurement(name=name, unit=ln["rate_unit"], values=rates, stop_reason="time budget", noise_target=RATE_STOP.noise_target,
                    overhead_cycles=0.0, sm_clock_mhz=round(m.median, 1), throttle=list(m.throttle),
                    kernel=m.kernel, launch=dict(ln, series_mhz=[]))
    remeasure = getattr(m, "remeasure", None)
    if remeasure is not None:
        r.remeasure = lambda: stress_rate(remeasure(), name)
    return r


def stress_rate_method(m: Measurement, arch: str, sm_count: int, sheet: Datasheet | None) -> str:
    """The method text of a throughput fact read from a stress (:func:`stress_rate`)."""
    ln = m.launch
    text = (f"{ln['kernel']} ({ln['source']}) on every SM: grid {ln['grid']} x {ln['block']} threads, "
            f"{_WHAT[ln['kind']](ln)}; the load of the sustained-clock stress (launches of ~{ln['launch_s'] * 1e3:.0f} "
            f"ms two deep for {ln['duration_s']:g} s after {ln['idle_s']:g} s idle): its rate in each of the "
            f"{len(m.values)} windows of {sustained_part_text(ln)}, each the work of the launches that started in it over "
            f"their %globaltimer span, median of the windows; SM clock {m.sm_clock_mhz} MHz (the stress's "
            "sustained clock)")
    frac = fraction_text(ln["kind"], m.median, arch, sm_count, m.sm_clock_mhz, sheet)
    return text + (f"; {frac}" if frac else "")


def scale_for(scale: int, seconds: float, target_s: float) -> int:
    """The loop count that makes a launch that took ``seconds`` at ``scale`` last ``target_s``."""
    if seconds <= 0:
        raise ValueError(f"elapsed time must be > 0, not {seconds}")
    return int(max(1, min(MAX_SCALE, round(scale * target_s / seconds))))


# ----------------------------------------------------------------------------------------------
# the SM clock from kernel stamps, and clock series


def block_intervals(stamps: Sequence[Sequence[Sequence[int]]]) -> list[tuple[int, int, int]]:
    """(start ns, end ns, cycles) of every interval between consecutive stamps of every block.

    ``stamps``: per block, its (clock64, globaltimer) stamps in order. An interval in which
    %globaltimer did not move is left out (its clock is unknown); one that runs backwards is an error.
    """
    out = []
    for b, block in enumerate(stamps):
        for k in range(1, len(block)):
            (c0, g0), (c1, g1) = block[k - 1], block[k]
            if c1 < c0 or g1 < g0:
                raise ValueError(f"block {b}: stamp {k} ({c1}, {g1}) is before stamp {k - 1} ({c0}, {g0})")
            if g1 > g0:
                out.append((int(g0), int(g1), int(c1 - c0)))
    return out


def clock_mhz(intervals: Sequence[tuple[int, int, int]]) -> float:
    """The SM clock over ``intervals``: all their cycles over all their nanoseconds, in MHz."""
    ns = sum(b - a for a, b, _ in intervals)
    if ns <= 0:
        raise ValueError("no interval with elapsed %globaltimer time: the clock is unknown")
    return sum(c for _, _, c in intervals) / ns * 1e3


def clock_series(intervals: Sequence[tuple[int, int, int]], *, t0_ns: int, bin_ns: int) -> list[tuple[float, float]]:
    """The clock over time: intervals binned by their midpoint (``bin_ns`` wide from ``t0_ns``),
    each bin's cycles over its nanoseconds; [(bin centre in seconds from t0, MHz)] in time order."""
    if bin_ns <= 0:
        raise ValueError(f"bin_ns must be > 0, not {bin_ns}")
    bins: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
    for a, b, c in intervals:
        k = int(((a + b) / 2 - t0_ns) // bin_ns)
        bins[k][0] += c
        bins[k][1] += b - a
    return [((k + 0.5) * bin_ns / 1e9, cyc / ns * 1e3) for k, (cyc, ns) in sorted(bins.items())]


def second_half(series: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points of a time series from the middle of its time span on."""
    if not series:
        return []
    mid = (series[0][0] + series[-1][0]) / 2
    return [p for p in series if p[0] >= mid]


#: where the early windows of a stress start: the power cap settles within ~0.1 s on an H100 SXM
EARLY_FROM_S = 1.0


def early_sustained(series: Sequence[tuple[float, float]], duration_s: float, windows: int = 5) -> float | None:
    """The sustained statistic (median of window means) over EARLY_FROM_S to EARLY_FROM_S + half the
    stress, instead of its second half: equal within the noise, run after run, means a stress that
    long would give the same sustained clock. None when the series does not reach past that span."""
    if not series or series[-1][0] < EARLY_FROM_S + duration_s / 2:
        return None
    early = [mhz for t, mhz in series if EARLY_FROM_S <= t < EARLY_FROM_S + duration_s / 2]
    wins = window_means(early, windows)
    return float(statistics.median(wins)) if wins else None


def window_means(values: Sequence[float], windows: int = 5) -> list[float]:
    """The means of ``windows`` consecutive, near-equal runs of ``values`` (each value alone when
    there are fewer). A mean, not a median: under a power cap the clock cycles between a plateau and
    dips (on the H100 under dense wgmma, 2026-11-25: ~1650 MHz with a dip to ~1400 every second), and
    the work a load does follows the time-averaged clock."""
    if not values:
        return []
    if len(values) <= windows:
        return [float(v) for v in values]
    edges = [round(i * len(values) / windows) for i in range(windows + 1)]
    return [float(statistics.fmean(values[a:b])) for a, b in zip(edges, edges[1:])]


def ramp_time_s(series: Sequence[tuple[float, float]], target_mhz: float, frac: float = 0.95) -> float | None:
    """The first time the series reaches ``frac`` of ``target_mhz``; None if it never does."""
    return next((t for t, mhz in series if mhz >= frac * target_mhz), None)


@dataclasses.dataclass(frozen=True)
class ClockSummary:
    sustained_mhz: float  # median of the window means of the second half
    windows_mhz: list[float]
    min_mhz: float  # lowest point from the ramp on (from the second half if it never ramps)
    ramp_s: float | None  # first time at 95 % of sustained
    start_mhz: float  # the first point
    points: int

    def as_dict(self) -> dict:
        return {"sustained_mhz": round(self.sustained_mhz, 1), "windows_mhz": [round(w, 1) for w in self.windows_mhz],
                "min_mhz": round(self.min_mhz, 1), "ramp_s": None if self.ramp_s is None else round(self.ramp_s, 4),
                "start_mhz": round(self.start_mhz, 1), "points": self.points}


def summarize_clock(series: Sequence[tuple[float, float]], *, windows: int = 5, frac: float = 0.95,
                    from_s: float | None = None) -> ClockSummary:
    """Sustained, minimum and ramp of a clock series [(seconds from the first launch, MHz)]; the
    sustained clock over its second half, or from ``from_s`` on."""
    if not series:
        raise ValueError("an empty clock series has no sustained clock")
    late = second_half(series) if from_s is None else [p for p in series if p[0] >= from_s]
    if not late:
        raise ValueError(f"the clock series ends at {series[-1][0]:.3f} s, before its sustained part ({from_s} s on)")
    wins = window_means([mhz for _, mhz in late], windows)
    sustained = float(statistics.median(wins))
    ramp = ramp_time_s(series, sustained, frac)
    loaded = [mhz for t, mhz in series if t >= ramp] if ramp is not None else [mhz for _, mhz in late]
    return ClockSummary(sustained, wins, float(min(loaded)), ramp, float(series[0][1]), len(series))


# ----------------------------------------------------------------------------------------------
# NVML sampling


class ClockSampler:
    """Reads (throttle reasons, SM clock MHz) every ``period_s`` from a thread while in use.

    ``read`` is :func:`measure.throttle_reasons` bound to a GPU (``lambda: throttle_reasons(info)``),
    or any function returning ``(reasons, mhz or None)``. Times are ``time.monotonic()``; :meth:`mark`
    sets the origin that :meth:`series` counts from.
    """

    def __init__(self, read: Callable[[], tuple[list[str], int | float | None]], period_s: float = 0.05):
        self.read = read
        self.period_s = period_s
        self.samples: list[tuple[float, float | None, tuple[str, ...]]] = []
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def sample(self) -> None:
        try:
            reasons, mhz = self.read()
        except Exception:  # NVML went away mid-run: no sample, the kernel-side clock still stands
            return
        with self._lock:
            self.samples.append((time.monotonic(), None if mhz is None else float(mhz), tuple(reasons)))

    def mark(self) -> float:
        self.t0 = time.monotonic()
        return self.t0

    def __enter__(self) -> ClockSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuprops-clock-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.sample()  # one more at the end: a reason that came up in the last period is seen

    def series(self, start_s: float = -math.inf, end_s: float = math.inf) -> list[tuple[float, float]]:
        """[(seconds from the mark, MHz)] of the samples in [start_s, end_s] that have a clock."""
        with self._lock:
            return [(t - self.t0, mhz) for t, mhz, _ in self.samples
                    if mhz is not None and start_s <= t - self.t0 <= end_s]

    def reasons(self, start_s: float = -math.inf, end_s: float = math.inf) -> list[str]:
        """Every throttle reason any sample in [start_s, end_s] saw."""
        with self._lock:
            return sorted({r for t, _, rs in self.samples if start_s <= t - self.t0 <= end_s for r in rs})


def nvml_reader(info: measure.GpuInfo) -> Callable[[], tuple[list[str], int | None]]:
    return lambda: measure.throttle_reasons(info)


# ----------------------------------------------------------------------------------------------
# workloads and method text


@dataclasses.dataclass
class Workload:
    """One kernel on every SM, how to launch it and what one launch does.

    ``args(stamps, scale)`` builds a launch's arguments; ``scale`` is the loop count that sets its
    length (iters for the compute kernels, reps for the stream kernels) and ``work(scale)`` is what
    one launch then does (FLOPs or bytes, in ``unit``'s numerator).
    """

    kind: str  # "ffma", "wgmma_bf16", "wgmma_e4m3", "dram_read", "dram_copy", "l2_read"
    kernel: str
    source: str
    defines: dict
    fn: object
    grid: int
    block: int
    stamps_per_block: int
    args: Callable[[object, int], tuple]
    work: Callable[[int], float]
    unit: str
    scale: int = 1  # the first guess; calibration replaces it
    smids: object | None = None  # the kernel writes each block's SM id here (the stresses)
    extra: dict = dataclasses.field(default_factory=dict)  # buffer sizes and the like, for the record

    def describe(self) -> dict:
        return {"kind": self.kind, "kernel": self.kernel, "source": self.source, "defines": dict(self.defines),
                "grid": self.grid, "block": self.block, **self.extra}


def ffma_workload(cp, fn, *, sms: int, max_threads_per_sm: int) -> Workload:
    d = FFMA_DEFINES
    grid = sms * blocks_per_sm(max_threads_per_sm, FFMA_BLOCK)
    smids, out = cp.zeros(grid, dtype=cp.uint32), cp.zeros(grid * FFMA_BLOCK, dtype=cp.float32)
    return Workload("ffma", "stress_ffma", "stress_ffma.cu", dict(d), fn, grid, FFMA_BLOCK, d["SAMPLES"] + 1,
                    lambda st, s: (st, smids, out, cp.int32(s), cp.float32(-1.0), cp.float32(0.5)),
                    lambda s: ffma_flops(grid, FFMA_BLOCK, d["SAMPLES"], s, d["UNROLL"], d["ILP"]), "TFLOP/s",
                    scale=16, smids=smids)


def wgmma_workload(cp, fn, dtype: str, *, sms: int) -> Workload:
    _, k, _ = WGMMA_DTYPES[dtype]
    block, grid = 128 * WGMMA_WARPGROUPS, sms  # 154 registers a thread: one block per SM
    smids, out = cp.zeros(grid, dtype=cp.uint32), cp.zeros(grid * block, dtype=cp.float32)
    return Workload(f"wgmma_{dtype}", "stress_wgmma", "stress_ffma.cu", wgmma_defines(dtype), fn, grid, block,
                    WGMMA_SAMPLES + 1, lambda st, s: (st, smids, out, cp.int32(s)),
                    lambda s: wgmma_flops(grid, WGMMA_WARPGROUPS, WGMMA_SAMPLES, s, WGMMA_UNROLL, WGMMA_N, k),
                    "TFLOP/s", scale=16, smids=smids)


def stream_workload(cp, fn, kind: str, *, sms: int, max_threads_per_sm: int, nbytes: int, src=None, dst=None,
                    sink=None, extra: dict | None = None) -> Workload:
    """``src`` / ``dst``: CuPy buffers of at least ``nbytes`` to reuse (allocated, zeroed, when None);
    ``sink``: the reads' never-written output, grid x block words (allocated when None)."""
    n16 = nbytes // VEC_BYTES
    grid = sms * blocks_per_sm(max_threads_per_sm, STREAM_BLOCK)
    src = src if src is not None else cp.zeros(n16 * 4, dtype=cp.uint32)
    if kind in ("dram_copy", "dram_write"):
        dst = dst if dst is not None else cp.zeros(n16 * 4, dtype=cp.uint32)
        third = dst
    else:
        third = sink if sink is not None else cp.zeros(grid * STREAM_BLOCK, dtype=cp.uint32)  # the never-written sink
    return Workload(kind, STREAM_KERNELS[kind], "stream_bandwidth.cu", dict(STREAM_DEFINES), fn, grid, STREAM_BLOCK,
                    2, lambda st, s: (st, src, third, cp.uint64(n16), cp.int32(s)),
                    lambda s: stream_bytes(kind, n16, s), "GB/s", scale=1,
                    extra={"buffer_bytes": n16 * VEC_BYTES, **(extra or {})})


def device_ptr(buf) -> int:
    """A CuPy array's device address (``buf.data.ptr``); 0 for an array without one (a host stand-in)."""
    return int(getattr(getattr(buf, "data", None), "ptr", 0) or 0)


def l2_placement_workloads(cp, fn, layout: L2Placements, region, *, sms: int,
                           max_threads_per_sm: int) -> list[Workload]:
    """The L2 read (stream_read_cg) of each window of ``layout`` in ``region`` (a uint32 CuPy array of
    at least ``layout.region_bytes``), one workload a window, in address order, one sink for all."""
    if region.nbytes < layout.region_bytes:
        raise ValueError(f"the region holds {region.nbytes} bytes, the windows need {layout.region_bytes}")
    grid = sms * blocks_per_sm(max_threads_per_sm, STREAM_BLOCK)
    sink = cp.zeros(grid * STREAM_BLOCK, dtype=cp.uint32)
    words = layout.window_bytes // 4
    offsets = layout.offsets(device_ptr(region))
    where = {"placements": layout.count, "stride_bytes": layout.stride_bytes, "region_bytes": layout.region_bytes,
             "page_bytes": layout.page_bytes}
    return [stream_workload(cp, fn, "l2_read", sms=sms, max_threads_per_sm=max_threads_per_sm,
                            nbytes=layout.window_bytes, src=region[off // 4:off // 4 + words], sink=sink,
                            extra=dict(where, window_offset=off))
            for off in offsets]


def fraction_text(kind: str, value: float, arch: str, sm_count: int, clock_mhz: float | None,
                  sheet: Datasheet | None) -> str:
    """How a throughput compares with the SKU's datasheet peak and with the peak at the clock it ran at."""
    parts = []
    field = PEAK_FIELD.get(kind)
    if sheet is not None and field is not None:
        peak = getattr(sheet, field)
        unit = "GB/s" if field == "dram_gbps" else "TFLOP/s"
        text = f"{value / peak:.3f} of the {sheet.sku} datasheet's {peak:g} {unit}"
        rate = PER_SM_CYCLE.get(arch, {}).get(kind)
        if rate is not None and unit == "TFLOP/s":
            text += f" (which implies {implied_clock_mhz(peak, sheet.sms, rate):.0f} MHz)"
        parts.append(text)
    elif field is not None:
        parts.append("no datasheet tabulated for this GPU (throughput.DATASHEETS)")
    rate = PER_SM_CYCLE.get(arch, {}).get(kind)
    if rate is not None and clock_mhz:
        peak = clock_peak_tflops(sm_count, rate, clock_mhz)
        parts.append(f"{value / peak:.3f} of {sm_count} SMs x {rate} FLOP/cycle at the {clock_mhz:.0f} MHz it ran "
                     f"at ({peak:.1f} TFLOP/s)")
    return "; ".join(parts)


def _mib(ln: dict) -> float:
    return ln.get("buffer_bytes", 0) / 2**20


#: What one launch does, per workload kind, for the method text.
_WHAT: dict[str, Callable[[dict], str]] = {
    "ffma": lambda ln: f"{ln['defines']['ILP']} FFMA chains x {ln['defines']['UNROLL']} steps per loop trip per thread",
    "wgmma_bf16": lambda ln: f"{WGMMA_WARPGROUPS} warpgroups per SM, each one chain of {WGMMA_UNROLL} wgmma "
                             "m64n256k16 bf16 -> f32 (A, B in shared memory) per loop trip",
    "wgmma_e4m3": lambda ln: f"{WGMMA_WARPGROUPS} warpgroups per SM, each one chain of {WGMMA_UNROLL} wgmma "
                             "m64n256k32 e4m3 -> f32 (A, B in shared memory) per loop trip",
    "dram_read": lambda ln: f"16-byte loads (LDG.E.128) over a {_mib(ln):.0f} MiB buffer",
    "dram_copy": lambda ln: f"16-byte loads and stores over two {_mib(ln):.0f} MiB buffers; bytes read + written",
    "dram_write": lambda ln: f"16-byte stores (STG.E.128) of index-dependent values over a {_mib(ln):.0f} MiB buffer",
    "l2_read": lambda ln: _l2_read_what(ln),
}


def _l2_read_what(ln: dict) -> str:
    k = ln.get("placements")
    if not k:  # one buffer (the method until 2026-11-26)
        return (f"16-byte ld.global.cg (LDG.E.128.STRONG.GPU) over a {_mib(ln):.1f} MiB buffer (L2 / 4), read again "
                "and again")
    page = ln.get("page_bytes", PAGE_BYTES) / 2**20
    return (f"16-byte ld.global.cg (LDG.E.128.STRONG.GPU) over a {_mib(ln):.1f} MiB window (L2 / 4), read again and "
            f"again, in each of {k} such windows {ln['stride_bytes'] / 2**20:g} MiB apart in one "
            f"{ln['region_bytes'] / 2**20:.1f} MiB allocation, each from a {page:g} MiB page boundary on pages of its "
            f"own: the same reads in {k} placements of the lines among the L2 slices and partitions")


def _placement_timing(m: Measurement) -> str:
    """How a placed rate (:func:`measure_placed_rate`) is timed and reduced, with the windows' spread."""
    ln = m.launch
    k, n = ln["placements"], ln["launches"]
    lo, hi = ln.get("placement_lowest"), ln.get("placement_highest")
    spread = ln.get("placement_spread")
    text = (f"per repeat, every window in turn: one untimed launch that reads it once, then {n} launch"
            f"{'es' if n != 1 else ''} of ~{ln['launch_s'] * 1e3:.1f} ms between CUDA events; a repeat's value is the "
            f"mean of the {k} windows' rates, median of {m.n} repeats")
    if lo is not None and hi is not None and spread is not None:
        text += (f"; the windows' rates (each the median over repeats) {lo:g}-{hi:g} {m.unit}, "
                 f"{spread * 100:.2f} % apart (relative std {ln.get('placement_noise', 0) * 100:.2f} %)")
    return text


def rate_method(m: Measurement, arch: str, sm_count: int, sheet: Datasheet | None) -> str:
    """A throughput fact's method text: what one launch does, the timing, the clock, the datasheet fraction."""
    ln = m.launch
    what = _WHAT[ln["kind"]](ln)
    heat = f"after {ln['preheat_s']:g} s of the same load (the power cap settled), " if ln.get("preheat_s") else ""
    if ln.get("placements"):
        timing = _placement_timing(m)
    else:
        timing = (f"{heat}launches of ~{ln['launch_s'] * 1e3:.1f} ms, {ln['launches']} back to back between CUDA "
                  f"events per repeat, median of {m.n} repeats")
    text = (f"{ln['kernel']} ({ln['source']}) on every SM: grid {ln['grid']} x {ln['block']} threads, {what}; "
            f"{timing}; SM clock {m.sm_clock_mhz} MHz (clock64 / %globaltimer per block; NVML {ln.get('nvml_mhz')} MHz)")
    frac = fraction_text(ln["kind"], m.median, arch, sm_count, m.sm_clock_mhz, sheet)
    return text + (f"; {frac}" if frac else "")


def sustained_part_text(ln: dict) -> str:
    """Which part of a stress its sustained clock and rate are read over, in words."""
    start = ln.get("sustained_from_s")
    return "the second half" if start is None else f"{start:g} s to {ln['duration_s']:g} s"


def clock_method(m: Measurement, sheet: Datasheet | None) -> str:
    """A sustained-clock fact's method text."""
    ln = m.launch
    k, n = ln["kernel_clock"], ln.get("nvml_clock") or {}
    text = (f"{ln['kernel']} ({ln['source']}, {ln['kind']}) on all {ln['sms_covered']} SMs, grid {ln['grid']} x "
            f"{ln['block']}, launches of ~{ln['launch_s'] * 1e3:.0f} ms two deep for {ln['duration_s']:g} s after "
            f"{ln['idle_s']:g} s idle; clock64 / %globaltimer per block between {ln['samples']} stamps, "
            f"{ln['bin_s'] * 1e3:g} ms bins; sustained = median of the means of 5 windows of "
            f"{sustained_part_text(ln)} "
            f"({m.median:.0f} MHz; min {k['min_mhz']:.0f}, ramp to 95 % "
            f"{'never' if k['ramp_s'] is None else format(k['ramp_s'], '.3f') + ' s'}); NVML every "
            f"{ln['period_s'] * 1e3:.0f} ms: sustained {n.get('sustained_mhz')} MHz, min {n.get('min_mhz')}, "
            f"ramp {n.get('ramp_s')} s, idle {ln.get('idle_mhz')} MHz; throttle reasons: "
            f"{', '.join(m.throttle) or 'none'}")
    rate = ln.get("rate_sustained", ln.get("rate_second_half"))
    if rate is not None:
        text += f"; the load's own rate over those windows {rate:g} {ln['rate_unit']} (reported)"
    if ln.get("early_sustained_mhz") is not None:
        text += (f"; the same statistic from {EARLY_FROM_S:g} s to {EARLY_FROM_S + ln['duration_s'] / 2:g} s "
                 f"{ln['early_sustained_mhz']:g} MHz (reported)")
    if sheet is not None:
        text += f"; {m.median / sheet.max_sm_clock_mhz:.3f} of the {sheet.sku}'s {sheet.max_sm_clock_mhz} MHz max SM clock"
    return text


# ----------------------------------------------------------------------------------------------
# launching (GPU only)

#: Throughput repeats: the usual noise target, at least 5 and at most 20 repeats, 0.6 s each.
RATE_STOP = StopRule(noise_target=0.01, min_samples=5, max_samples=20, time_budget_s=0.6)
#: A sustained clock's window means may differ by this much before it is NOISY.
CLOCK_NOISE = 0.02


def _new_stamps(cp, wl: Workload):  # pragma: no mutate block  (GPU only)
    return cp.zeros(wl.grid * wl.stamps_per_block * 2, dtype=cp.uint64)


def _read_stamps(stamps, wl: Workload) -> list:  # pragma: no mutate block  (GPU only)
    return stamps.get().reshape(wl.grid, wl.stamps_per_block, 2).tolist()


def _launch(wl: Workload, stamps, scale: int) -> None:  # pragma: no mutate block  (GPU only)
    try:
        wl.fn((wl.grid,), (wl.block,), wl.args(stamps, scale))
    except Exception as exc:
        raise measure.KernelLaunchError(f"{wl.kernel} from {wl.source} {wl.defines} grid={wl.grid} "
                                        f"block={wl.block} failed: {type(exc).__name__}: {exc}") from exc


def _wait(event, timeout_s: float, wl: Workload) -> None:  # pragma: no mutate block  (GPU only)
    deadline = time.monotonic() + timeout_s
    while not event.done:
        if time.monotonic() > deadline:
            raise measure.KernelLaunchError(f"{wl.kernel} from {wl.source} {wl.defines} grid={wl.grid} did not "
                                            f"finish within {timeout_s:.0f} s")
        time.sleep(0.0002)


def timed_launches(cp, wl: Workload, scale: int, launches: int, stamps, timeout_s: float = 30.0
                   ) -> float:  # pragma: no mutate block  (GPU only)
    """Seconds between CUDA events around ``launches`` back-to-back launches at ``scale``."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(launches):
        _launch(wl, stamps, scale)
    end.record()
    _wait(end, timeout_s, wl)
    return cp.cuda.get_elapsed_time(start, end) / 1e3


def calibrate(cp, wl: Workload, target_s: float, timeout_s: float = 30.0) -> int:  # pragma: no mutate block
    """The loop count that makes one launch last about ``target_s``. The first launch also loads the
    module; the last one, at the count found, is timed again (the first ran at whatever clock the GPU
    idled at), and the count scaled once more."""
    stamps = _new_stamps(cp, wl)
    scale = wl.scale
    seconds = timed_launches(cp, wl, scale, 1, stamps, timeout_s)
    for _ in range(6):  # too short to time well: grow it first
        if seconds >= target_s / 20 or scale >= MAX_SCALE:
            break
        scale = min(MAX_SCALE, scale * 10)
        seconds = timed_launches(cp, wl, scale, 1, stamps, timeout_s)
    scale = scale_for(scale, seconds, target_s)
    return scale_for(scale, timed_launches(cp, wl, scale, 1, stamps, timeout_s), target_s)


def kernel_clock(stamps_list: Sequence) -> float:
    """The SM clock of a launch from its stamps (all blocks, all intervals)."""
    return clock_mhz(block_intervals(stamps_list))


def _sampled_repeats(repeat: Callable[[], tuple[float, list[float]]], clock: Callable[[], float], stop: StopRule,
                     read: Callable, period_s: float) -> tuple[list[float], list[float], list[float], str, list[float],
                                                                 list[str]]:  # pragma: no mutate block  (GPU only)
    """The repeats of a rate measurement, NVML sampled throughout: ``repeat() -> (value, seconds per
    launch of each launch group)`` until ``stop`` ends it, with ``clock()`` (the kernels' SM clock of the
    last launch) after each. Returns the values, clocks, launch lengths, stop reason, NVML's MHz and
    its clock-event reasons."""
    values: list[float] = []
    clocks: list[float] = []
    lengths: list[float] = []
    with ClockSampler(read, period_s) as nvml:
        nvml.mark()
        t_start, reason = time.monotonic(), None
        while reason is None:
            value, seconds_per_launch = repeat()
            values.append(value)
            lengths.extend(seconds_per_launch)
            clocks.append(clock())
            reason = measure.stop_reason(values, stop, time.monotonic() - t_start)
    return values, clocks, lengths, reason, [mhz for _, mhz in nvml.series(0.0)], nvml.reasons()


def measure_rate(cp, wl: Workload, *, name: str, info: measure.GpuInfo, target_launch_s: float = 0.005,
                 launches: int = 4, stop: StopRule = RATE_STOP, period_s: float = 0.05, preheat_s: float = 0.0,
                 read: Callable | None = None) -> Measurement:  # pragma: no mutate block  (GPU only)
    """Throughput of ``wl`` in its unit: repeats of ``launches`` timed launches until ``stop`` ends it.
    ``preheat_s``: run the workload that long first, so that a load that reaches the power limit is
    measured at the clock the power cap settles to, not on the way down (a dense tensor-core load on
    an H100 SXM: 1.98 GHz for the first ~0.1 s, then capped)."""
    read = read or nvml_reader(info)
    with measure.gpu_lock(info.index):
        scale = calibrate(cp, wl, target_launch_s)
        stamps = _new_stamps(cp, wl)
        timeout = max(30.0, 20 * target_launch_s * launches)
        timed_launches(cp, wl, scale, 1, stamps, timeout)  # warm-up at the calibrated length
        heated = time.monotonic()
        while time.monotonic() - heated < preheat_s:
            timed_launches(cp, wl, scale, launches, stamps, timeout)

        def repeat():
            seconds = timed_launches(cp, wl, scale, launches, stamps, timeout)
            return per_second(wl.work(scale) * launches, seconds, wl.unit), [seconds / launches]
        values, clocks, lengths, reason, nvml_mhz, throttle = _sampled_repeats(
            repeat, lambda: kernel_clock(_read_stamps(stamps, wl)), stop, read, period_s)
    launch = dict(wl.describe(), scale=scale, launches=launches, work_per_launch=wl.work(scale), preheat_s=preheat_s,
                  launch_s=statistics.median(lengths), kernel_mhz=[round(c, 1) for c in clocks],
                  nvml_mhz=round(statistics.median(nvml_mhz), 1) if nvml_mhz else None)
    m = Measurement(name=name, unit=wl.unit, values=values, stop_reason=reason, noise_target=stop.noise_target,
                    overhead_cycles=0.0, sm_clock_mhz=round(statistics.median(clocks), 1), throttle=throttle,
                    kernel=wl.kernel, launch=launch)
    m.remeasure = lambda: measure_rate(cp, wl, name=name, info=info, target_launch_s=target_launch_s,
                                       launches=launches, stop=stop, period_s=period_s, preheat_s=preheat_s,
                                       read=read)
    return m


def timed_placements(cp, wls: Sequence[Workload], scale: int, launches: int, stamps, timeout_s: float = 30.0
                     ) -> list[float]:  # pragma: no mutate block  (GPU only)
    """Per workload in turn (each window of the L2 read): one untimed launch at scale 1 (one read of its
    window: its lines into the L2, its pages into the TLBs), then seconds between CUDA events around
    ``launches`` launches at ``scale``. All queued back to back, one wait at the end."""
    pairs = []
    for wl in wls:
        _launch(wl, stamps, 1)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(launches):
            _launch(wl, stamps, scale)
        end.record()
        pairs.append((start, end))
    _wait(pairs[-1][1], timeout_s, wls[-1])
    return [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in pairs]


def measure_placed_rate(cp, wls: Sequence[Workload], *, name: str, info: measure.GpuInfo,
                        target_launch_s: float = 0.001, launches: int = 1, stop: StopRule = RATE_STOP,
                        period_s: float = 0.05, read: Callable | None = None
                        ) -> Measurement:  # pragma: no mutate block  (GPU only)
    """Throughput of the same work in several placements (``wls``: the L2 read of each window,
    :func:`l2_placement_workloads`): the launch length calibrated once on the first; a repeat times
    ``launches`` launches on every window in turn (:func:`timed_placements`) and its value is the mean
    of the windows' rates (:func:`placement_value`); repeats until ``stop`` ends it. Each window's rate
    (median over repeats) and their spread (:func:`placement_summary`) are in ``launch``."""
    if not wls:
        raise ValueError("no placements to measure")
    read = read or nvml_reader(info)
    first = wls[0]
    with measure.gpu_lock(info.index):
        scale = calibrate(cp, first, target_launch_s)
        stamps = _new_stamps(cp, first)
        timeout = max(30.0, 20 * target_launch_s * launches * len(wls))
        timed_launches(cp, first, scale, 1, stamps, timeout)  # warm-up at the calibrated length
        rates_by_repeat: list[list[float]] = []

        def repeat():
            seconds = timed_placements(cp, wls, scale, launches, stamps, timeout)
            rates = [per_second(wl.work(scale) * launches, s, wl.unit) for wl, s in zip(wls, seconds)]
            rates_by_repeat.append(rates)
            return placement_value(rates), [s / launches for s in seconds]
        values, clocks, lengths, reason, nvml_mhz, throttle = _sampled_repeats(
            repeat, lambda: kernel_clock(_read_stamps(stamps, first)), stop, read, period_s)
    summary = placement_summary(rates_by_repeat)
    launch = dict(first.describe(), scale=scale, launches=launches, work_per_launch=first.work(scale),
                  launch_s=statistics.median(lengths), kernel_mhz=[round(c, 1) for c in clocks],
                  nvml_mhz=round(statistics.median(nvml_mhz), 1) if nvml_mhz else None,
                  placements=len(wls), window_offsets=[wl.extra.get("window_offset") for wl in wls],
                  placement_rates=[round(r, 1) for r in summary["per_window"]],
                  placement_lowest=round(summary["lowest"], 1), placement_highest=round(summary["highest"], 1),
                  placement_spread=round(summary["spread"], 5), placement_noise=round(summary["noise"], 5))
    launch.pop("window_offset", None)
    m = Measurement(name=name, unit=first.unit, values=values, stop_reason=reason, noise_target=stop.noise_target,
                    overhead_cycles=0.0, sm_clock_mhz=round(statistics.median(clocks), 1), throttle=throttle,
                    kernel=first.kernel, launch=launch)
    m.remeasure = lambda: measure_placed_rate(cp, wls, name=name, info=info, target_launch_s=target_launch_s,
                                              launches=launches, stop=stop, period_s=period_s, read=read)
    return m


def stress_clock(cp, wl: Workload, *, name: str, info: measure.GpuInfo, duration_s: float = 2.0,
                 launch_s: float = 0.05, idle_s: float = 0.25, bin_s: float = 0.01, period_s: float = 0.05,
                 read: Callable | None = None, sustained_from_s: float | None = None
                 ) -> Measurement:  # pragma: no mutate block  (GPU only)
    """The SM clock ``wl`` sustains on every SM: ``duration_s`` of launches kept two deep, the clock
    sampled in the kernels (every block, SAMPLES intervals a launch) and by NVML (every ``period_s``);
    sustained over the second half, or from ``sustained_from_s`` on."""
    read = read or nvml_reader(info)
    timeout = max(30.0, 40 * launch_s)
    with measure.gpu_lock(info.index):
        scale = calibrate(cp, wl, launch_s)
        # every launch's stamps in one buffer allocated up front (an allocation in the loop may wait on
        # the GPU); room for launches 8 x shorter than calibrated, then more rows if it runs out
        rows = math.ceil(duration_s / launch_s * 8) + 8
        pool = [cp.zeros((rows, wl.grid * wl.stamps_per_block * 2), dtype=cp.uint64)]
        launched = 0
        with ClockSampler(read, period_s) as nvml:
            time.sleep(idle_s)
            idle = [mhz for _, mhz in nvml.series()]
            nvml.mark()
            pending: collections.deque = collections.deque()
            while True:
                while len(pending) >= 2:  # one running, one queued: the GPU never waits for the host
                    _wait(pending.popleft(), timeout, wl)
                if time.monotonic() - nvml.t0 >= duration_s:
                    break
                if launched == rows * len(pool):
                    pool.append(cp.zeros((rows, wl.grid * wl.stamps_per_block * 2), dtype=cp.uint64))
                _launch(wl, pool[-1][launched % rows], scale)
                done = cp.cuda.Event()
                done.record()
                pending.append(done)
                launched += 1
            while pending:
                _wait(pending.popleft(), timeout, wl)
            end_s = time.monotonic() - nvml.t0
        shape = (wl.grid, wl.stamps_per_block, 2)
        per_launch = [row.reshape(shape).tolist() for block in pool for row in block.get()][:launched]
        sms = len(set(wl.smids.get().tolist())) if wl.smids is not None else None
    try:
        intervals = [iv for stamps in per_launch for iv in block_intervals(stamps)]
    except ValueError as exc:
        raise measure.KernelLaunchError(f"{wl.kernel}: the clock stamps are not in order: {exc}") from exc
    t0_ns = min(block[0][1] for block in per_launch[0])
    series = clock_series(intervals, t0_ns=t0_ns, bin_ns=int(bin_s * 1e9))
    kernel = summarize_clock(series, from_s=sustained_from_s)
    nvml_series = nvml.series(0.0, end_s)
    nvml_summary = summarize_clock(nvml_series, from_s=sustained_from_s).as_dict() if len(nvml_series) >= 2 else None
    # the load's own rate in the sustained windows: reported beside the clock, not asserted (to compare
    # with the rate facts, which measure it separately after their own settling)
    spans = [(min(b[0][1] for b in stamps), max(b[-1][1] for b in stamps)) for stamps in per_launch]
    rate = sustained_rate(spans, wl.work(scale), wl.unit, from_s=sustained_from_s)
    rates = window_rates(spans, wl.work(scale), wl.unit, from_s=sustained_from_s)
    early = early_sustained(series, duration_s) if sustained_from_s is None else None
    launch = dict(wl.describe(), scale=scale, launches=launched, launch_s=end_s / max(1, launched),
                  duration_s=duration_s, idle_s=idle_s, bin_s=bin_s, period_s=period_s,
                  sustained_from_s=sustained_from_s,
                  samples=wl.stamps_per_block, sms_covered=sms, sm_count=info.sm_count,
                  kernel_clock=kernel.as_dict(), nvml_clock=nvml_summary,
                  idle_mhz=round(statistics.median(idle), 1) if idle else None,
                  rate_sustained=None if rate is None else round(rate, 3), rate_unit=wl.unit,
                  rate_windows=[round(r, 3) for r in rates],
                  early_sustained_mhz=None if early is None else round(early, 1),
                  series_mhz=[(round(t, 3), round(mhz, 1)) for t, mhz in series])
    m = Measurement(name=name, unit="MHz", values=kernel.windows_mhz, stop_reason="time budget",
                    noise_target=CLOCK_NOISE, overhead_cycles=0.0, sm_clock_mhz=round(kernel.sustained_mhz, 1),
                    throttle=nvml.reasons(0.0, end_s), kernel=wl.kernel, launch=launch)
    m.remeasure = lambda: stress_clock(cp, wl, name=name, info=info, duration_s=duration_s, launch_s=launch_s,
                                       idle_s=idle_s, bin_s=bin_s, period_s=period_s, read=read,
                                       sustained_from_s=sustained_from_s)
    return m


# ----------------------------------------------------------------------------------------------
# SASS: the loop a stress or stream kernel spends its time in


def innermost_loop(instrs: Sequence, opcode: str) -> list:
    """The instructions of the shortest loop (a backward BRA and everything from its target to it)
    that holds an instruction whose opcode starts with ``opcode``; [] when none does."""
    best: list = []
    for br in instrs:
        if br.base_opcode != "BRA" or not br.operands:
            continue
        try:
            target = int(br.operands[-1], 16)
        except ValueError:
            continue
        if target > br.offset:
            continue
        body = [i for i in instrs if target <= i.offset <= br.offset]
        if any(i.opcode.startswith(opcode) for i in body) and (not best or len(body) < len(best)):
            best = body
    return best


def opcode_counts(instrs: Sequence) -> dict[str, int]:
    """How many of each opcode, NOPs aside."""
    return dict(collections.Counter(i.opcode for i in instrs if i.base_opcode != "NOP"))
