"""measure layer, whole GPU and time units: the SM clock a GPU sustains under load, and what every
SM together does per second (FLOP/s, bytes/s), beside measure.py's cycle counts on one SM. This
module launches and times; the workloads are workloads.py's, the arithmetic rates.py's and
clocks.py's, the method text throughput_text.py's.

Method (hwtests/test_throughput_and_clocks.py states each fact's):

* a *workload* is one kernel on every SM (``kernels/stress_ffma.cu``, ``kernels/stream_bandwidth.cu``)
  whose thread 0 per block stamps (clock64, %globaltimer) at its start, at its end and, in the
  stresses, at SAMPLES - 1 points between: cycles / nanoseconds is the SM clock that block ran at,
  over time, with no host in the loop;
* **throughput** (:func:`measure_rate`): the launch length is calibrated (the kernel's loop count
  scaled to ``target_launch_s``), one warm-up launch, then repeats of ``launches`` back-to-back
  launches between two CUDA events until the stop rule ends it (:func:`stats.stop_reason`, min 5
  repeats); a repeat's value is the work of its launches over the events' elapsed time (the gaps
  between launches included). Every launch of a repeat stamps a row of its own, so a repeat's SM
  clock is read over all its launches (:func:`clocks.launches_clock`), the work its rate counts; the
  measurement carries the clock of its median-rate repeat (:func:`rates.median_pair`: a rate and the
  clock it ran at, never two medians of different repeats), and NVML's SM clock and clock-event
  reasons, sampled by a thread every 50 ms;
* **placed throughput** (:func:`measure_placed_rate`, the L2 read): the same, over L2_PLACEMENTS windows
  of one size, each on pages of its own in one allocation (:func:`workloads.l2_placements`), since the rate of one
  buffer moves with where its lines fall among the L2 slices and partitions; a repeat times every window
  in turn (an untimed read of it first) and its value is the mean of the windows' rates, its clock
  over all its timed launches;
* **sustained clock** (:func:`stress_clock`): after 0.25 s idle, launches of ~50 ms kept two deep in
  the stream for ``duration_s`` (the GPU never waits for the host). The kernel-side clock of every
  block's intervals, in 10 ms bins over the whole GPU, is the clock over time: sustained = the median
  of the means of 5 consecutive windows of its sustained part (the second half, or from
  ``sustained_from_s`` on; those 5 are the measurement's values), min = the lowest bin from the ramp
  on, ramp = the time from the first launch until a bin first reaches 95 % of sustained. NVML's
  samples give the same three and the throttle reasons seen. The load's own rate in 5 equal windows
  of that part, each with the clock of the same launches (:func:`rates.window_pairs`), is a throughput
  fact of its own where the load is one (:func:`stress_rate`: the dense bf16 wgmma rate, from the
  tensor stress, at the clock of its median-rate window, not the sustained clock's windows).

Every Measurement has ``remeasure`` set (the same workload measured again, fresh launches), so a
failing fact is confirmed before it is reported. No pytest in this module; its arithmetic is tested
with given numbers (tests/test_workloads.py, test_rates.py, test_clocks.py, test_throughput.py).
"""

from __future__ import annotations

import collections
import math
import statistics
import time
from collections.abc import Callable, Sequence

from .clocks import (
    ClockSampler,
    ClockSummary,
    early_sustained,
    launch_totals,
    launches_clock,
    nvml_reader,
    stamp_array,
    stamps_series,
    summarize_clock,
    totals_mhz,
)
from .devices import GpuInfo, gpu_temperature_c
from .driver_launch import KernelLaunchError
from .gpulock import gpu_lock, power_lock
from .measurement import Measurement
from .rates import (
    RATE_WINDOWS,
    median_pair,
    per_second,
    placement_summary,
    placement_value,
    sustained_rate,
    window_pairs,
)
from .stats import StopRule, stop_reason
from .workloads import Workload

#: Throughput repeats: the usual noise target, at least 5 and at most 20 repeats, 0.6 s each.
RATE_STOP = StopRule(noise_target=0.01, min_samples=5, max_samples=20, time_budget_s=0.6)
#: A sustained clock's window means may differ by this much before it is NOISY.
CLOCK_NOISE = 0.02
#: The largest loop count a launch takes (the kernels' int32 argument).
MAX_SCALE = 2**31 - 1


def scale_for(scale: int, seconds: float, target_s: float) -> int:
    """The loop count that makes a launch that took ``seconds`` at ``scale`` last ``target_s``."""
    if seconds <= 0:
        raise ValueError(f"elapsed time must be > 0, not {seconds}")
    return int(max(1, min(MAX_SCALE, round(scale * target_s / seconds))))


def _new_stamps(cp, wl: Workload, rows: int = 1):  # pragma: no mutate block  (GPU only)
    """Room for the stamps of ``rows`` launches, a row each."""
    return cp.zeros((rows, wl.grid * wl.stamps_per_block * 2), dtype=cp.uint64)


def _read_stamps(stamps, wl: Workload, rows: int | None = None):  # pragma: no mutate block  (GPU only)
    """The stamps of the first ``rows`` launches (all): an array (launches, blocks, stamps, 2)."""
    return stamps.get()[:rows].reshape(-1, wl.grid, wl.stamps_per_block, 2)


def _launch(wl: Workload, stamps, scale: int) -> None:  # pragma: no mutate block  (GPU only)
    try:
        wl.fn((wl.grid,), (wl.block,), wl.args(stamps, scale))
    except Exception as exc:
        raise KernelLaunchError(f"{wl.kernel} from {wl.source} {wl.defines} grid={wl.grid} "
                                        f"block={wl.block} failed: {type(exc).__name__}: {exc}") from exc


def _wait(event, timeout_s: float, wl: Workload, poll_s: float = 0.0002) -> None:  # pragma: no mutate block
    """Until ``event`` is done, polled every ``poll_s`` (0: without sleeping, for a host time to the
    microsecond); a KernelLaunchError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not event.done:
        if time.monotonic() > deadline:
            raise KernelLaunchError(f"{wl.kernel} from {wl.source} {wl.defines} grid={wl.grid} did not "
                                    f"finish within {timeout_s:.0f} s")
        if poll_s:
            time.sleep(poll_s)


def timed_launches(cp, wl: Workload, scale: int, launches: int, stamps, timeout_s: float = 30.0,
                   host: list | None = None) -> float:  # pragma: no mutate block  (GPU only)
    """Seconds between CUDA events around ``launches`` back-to-back launches at ``scale``, launch i
    stamping row i of ``stamps`` (row i mod its rows: one row is enough where the clock is not read).
    ``host``: the host's seconds over the same launches (perf_counter from before the start event to
    the end event seen done, polled without sleeping) are appended to it: the GPU's timer checked against
    the host's, which can only read longer (by the launch and the poll, microseconds)."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    h0 = time.perf_counter()
    start.record()
    for i in range(launches):
        _launch(wl, stamps[i % stamps.shape[0]], scale)
    end.record()
    _wait(end, timeout_s, wl, poll_s=0.0002 if host is None else 0.0)
    if host is not None:
        host.append(time.perf_counter() - h0)
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


def _sampled_repeats(repeat: Callable[[], tuple[float, list[float]]], clock: Callable[[], float], stop: StopRule,
                     read: Callable, period_s: float) -> tuple[list[float], list[float], list[float], str, list[float],
                                                                 list[str]]:  # pragma: no mutate block  (GPU only)
    """The repeats of a rate measurement, NVML sampled throughout: ``repeat() -> (value, seconds per
    launch of each launch group)`` until ``stop`` ends it, with ``clock()`` (the kernels' SM clock over
    every timed launch of that repeat) after each. Returns the values, clocks (one per value, of the
    same launches), launch lengths, stop reason, NVML's MHz and its clock-event reasons."""
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
            reason = stop_reason(values, stop, time.monotonic() - t_start)
    return values, clocks, lengths, reason, [mhz for _, mhz in nvml.series(0.0)], nvml.reasons()


def measure_rate(cp, wl: Workload, *, name: str, info: GpuInfo, target_launch_s: float = 0.005,
                 launches: int = 4, stop: StopRule = RATE_STOP, period_s: float = 0.05, preheat_s: float = 0.0,
                 read: Callable | None = None) -> Measurement:  # pragma: no mutate block  (GPU only)
    """Throughput of ``wl`` in its unit: repeats of ``launches`` timed launches until ``stop`` ends it.
    ``preheat_s``: run the workload that long first, so that a load that reaches the power limit is
    measured at the clock the power cap settles to, not on the way down (a dense tensor-core load on
    an H100 SXM: 1.98 GHz for the first ~0.1 s, then capped)."""
    read = read or nvml_reader(info)
    with gpu_lock(info.index), power_lock():
        if wl.fixed_scale:  # one pass a launch: as many launches as make target_launch_s, per launch counted
            scale, stamps = 1, _new_stamps(cp, wl)
            timed_launches(cp, wl, 1, 2, stamps)  # loads the module, warms the buffers
            launches *= max(1, round(target_launch_s / (timed_launches(cp, wl, 1, 8, stamps) / 8)))
        else:
            scale = calibrate(cp, wl, target_launch_s)
        stamps = _new_stamps(cp, wl, launches)  # a row per launch of a repeat: its clock is over all of them
        timeout = max(30.0, 20 * target_launch_s * launches)
        timed_launches(cp, wl, scale, 1, stamps, timeout)  # warm-up at the calibrated length
        heated = time.monotonic()
        while time.monotonic() - heated < preheat_s:
            timed_launches(cp, wl, scale, launches, stamps, timeout)

        host_s: list[float] = []
        gpu_s: list[float] = []

        def repeat():
            seconds = timed_launches(cp, wl, scale, launches, stamps, timeout, host=host_s)
            gpu_s.append(seconds)
            return per_second(wl.work(scale) * launches, seconds, wl.unit), [seconds / launches]
        stamped = wl.stamps_per_block > 0  # a kernel without stamps: the SM clock is NVML's over the repeats
        values, clocks, lengths, reason, nvml_mhz, throttle = _sampled_repeats(
            repeat, (lambda: launches_clock(_read_stamps(stamps, wl))) if stamped else (lambda: math.nan),
            stop, read, period_s)
    nvml_median = round(statistics.median(nvml_mhz), 1) if nvml_mhz else None
    launch = dict(wl.describe(), scale=scale, launches=launches, work_per_launch=wl.work(scale), preheat_s=preheat_s,
                  launch_s=statistics.median(lengths), kernel_mhz=[round(c, 1) for c in clocks] if stamped else None,
                  nvml_mhz=nvml_median, sm_count=info.sm_count,
                  gpu_over_host=[round(g / h, 5) for g, h in zip(gpu_s, host_s)])
    sm_clock = round(median_pair(list(zip(values, clocks)))[1], 1) if stamped else nvml_median
    m = Measurement(name=name, unit=wl.unit, values=values, stop_reason=reason, noise_target=stop.noise_target,
                    overhead_cycles=0.0, sm_clock_mhz=sm_clock,
                    throttle=throttle, kernel=wl.kernel, launch=launch)
    m.remeasure = lambda: measure_rate(cp, wl, name=name, info=info, target_launch_s=target_launch_s,
                                       launches=launches, stop=stop, period_s=period_s, preheat_s=preheat_s,
                                       read=read)
    return m


def timed_placements(cp, wls: Sequence[Workload], scale: int, launches: int, stamps, timeout_s: float = 30.0
                     ) -> list[float]:  # pragma: no mutate block  (GPU only)
    """Per workload in turn (each window of the L2 read): one untimed launch at scale 1 (one read of its
    window: its lines into the L2, its pages into the TLBs), then seconds between CUDA events around
    ``launches`` launches at ``scale``. All queued back to back, one wait at the end. Timed launch j of
    workload k stamps row k x ``launches`` + j of ``stamps``; the untimed ones its last row."""
    pairs = []
    for k, wl in enumerate(wls):
        _launch(wl, stamps[stamps.shape[0] - 1], 1)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for j in range(launches):
            _launch(wl, stamps[k * launches + j], scale)
        end.record()
        pairs.append((start, end))
    _wait(pairs[-1][1], timeout_s, wls[-1])
    return [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in pairs]


def measure_placed_rate(cp, wls: Sequence[Workload], *, name: str, info: GpuInfo,
                        target_launch_s: float = 0.001, launches: int = 1, stop: StopRule = RATE_STOP,
                        period_s: float = 0.05, preheat_s: float = 0.0, read: Callable | None = None
                        ) -> Measurement:  # pragma: no mutate block  (GPU only)
    """Throughput of the same work in several placements (``wls``: the L2 read of each window,
    :func:`workloads.l2_placement_workloads`): the launch length calibrated once on the first; a repeat times
    ``launches`` launches on every window in turn (:func:`timed_placements`) and its value is the mean
    of the windows' rates (:func:`rates.placement_value`); repeats until ``stop`` ends it. Each window's rate
    (median over repeats) and their spread (:func:`rates.placement_summary`) are in ``launch``.
    ``preheat_s``: untimed repeats that long first, so that a state the load leaves (the L2 read's high
    rate after idle) is over before the timed ones."""
    if not wls:
        raise ValueError("no placements to measure")
    read = read or nvml_reader(info)
    first = wls[0]
    with gpu_lock(info.index), power_lock():
        scale = calibrate(cp, first, target_launch_s)
        timed = len(wls) * launches  # a row per timed launch of a repeat, and one for the untimed reads
        stamps = _new_stamps(cp, first, timed + 1)
        timeout = max(30.0, 20 * target_launch_s * launches * len(wls))
        timed_launches(cp, first, scale, 1, stamps, timeout)  # warm-up at the calibrated length
        heated = time.monotonic()
        while time.monotonic() - heated < preheat_s:
            timed_placements(cp, wls, scale, launches, stamps, timeout)
        rates_by_repeat: list[list[float]] = []

        def repeat():
            seconds = timed_placements(cp, wls, scale, launches, stamps, timeout)
            rates = [per_second(wl.work(scale) * launches, s, wl.unit) for wl, s in zip(wls, seconds)]
            rates_by_repeat.append(rates)
            return placement_value(rates), [s / launches for s in seconds]
        values, clocks, lengths, reason, nvml_mhz, throttle = _sampled_repeats(
            repeat, lambda: launches_clock(_read_stamps(stamps, first, timed)), stop, read, period_s)
    summary = placement_summary(rates_by_repeat)
    launch = dict(first.describe(), scale=scale, launches=launches, work_per_launch=first.work(scale),
                  preheat_s=preheat_s, launch_s=statistics.median(lengths), kernel_mhz=[round(c, 1) for c in clocks],
                  nvml_mhz=round(statistics.median(nvml_mhz), 1) if nvml_mhz else None, sm_count=info.sm_count,
                  placements=len(wls), window_offsets=[wl.extra.get("window_offset") for wl in wls],
                  placement_rates=[round(r, 1) for r in summary["per_window"]],
                  placement_lowest=round(summary["lowest"], 1), placement_highest=round(summary["highest"], 1),
                  placement_spread=round(summary["spread"], 5), placement_noise=round(summary["noise"], 5))
    launch.pop("window_offset", None)
    m = Measurement(name=name, unit=first.unit, values=values, stop_reason=reason, noise_target=stop.noise_target,
                    overhead_cycles=0.0, sm_clock_mhz=round(median_pair(list(zip(values, clocks)))[1], 1),
                    throttle=throttle, kernel=first.kernel, launch=launch)
    m.remeasure = lambda: measure_placed_rate(cp, wls, name=name, info=info, target_launch_s=target_launch_s,
                                              launches=launches, stop=stop, period_s=period_s,
                                              preheat_s=preheat_s, read=read)
    return m


def stress_reading(per_launch: Sequence, work_per_launch: float, unit: str, *, bin_s: float, duration_s: float,
                   from_s: float | None = None) -> tuple[ClockSummary, dict]:
    """What a stress's stamps say, no GPU in it. ``per_launch``: every launch's stamps in launch order
    (per block, its (clock64, %globaltimer) stamps). Returns the kernel-side clock summary (the clock in
    ``bin_s`` bins, sustained from ``from_s`` or over the second half) and the record's fields: the
    series, the load's own rate over the sustained part (reported), its rate in each window of that
    part with the clock of the same launches (``rate_windows``, ``rate_windows_mhz``: :func:`stress_rate`
    reads them), and the early sustained clock. A ValueError where stamps run backwards."""
    a = stamp_array(per_launch)
    t0_ns = int(a[0, :, 0, 1].min())
    series = stamps_series(a, t0_ns=t0_ns, bin_ns=int(bin_s * 1e9))
    kernel = summarize_clock(series, from_s=from_s)
    spans = list(zip(a[:, :, 0, 1].min(axis=1).tolist(), a[:, :, -1, 1].max(axis=1).tolist()))
    rate = sustained_rate(spans, work_per_launch, unit, from_s=from_s)
    cycles, ns = launch_totals(a)
    pairs = window_pairs(spans, lambda launches: totals_mhz([cycles[i] for i in launches], [ns[i] for i in launches]),
                         work_per_launch, unit, from_s=from_s)
    early = early_sustained(series, duration_s) if from_s is None else None
    return kernel, {"rate_sustained": None if rate is None else round(rate, 3),
                    "rate_windows": [round(r, 3) for r, _ in pairs],
                    "rate_windows_mhz": [round(c, 1) for _, c in pairs],
                    "early_sustained_mhz": None if early is None else round(early, 1),
                    "series_mhz": [(round(t, 3), round(mhz, 1)) for t, mhz in series]}


def stress_clock(cp, wl: Workload, *, name: str, info: GpuInfo, duration_s: float = 2.0,
                 launch_s: float = 0.05, idle_s: float = 0.25, bin_s: float = 0.01, period_s: float = 0.05,
                 read: Callable | None = None, sustained_from_s: float | None = None,
                 temperature: Callable[[], int | None] | None = None,
                 settle: Callable[[Callable[[], int | None]], dict] | None = None) -> Measurement:  # pragma: no mutate block
    """The SM clock ``wl`` sustains on every SM: ``duration_s`` of launches kept two deep, the clock
    sampled in the kernels (every block, SAMPLES intervals a launch) and by NVML (every ``period_s``);
    sustained over the second half, or from ``sustained_from_s`` on. The GPU's temperature at the
    stress's start and end (``temperature``, NVML's by default) goes beside it: under the power cap the
    sustained clock follows the thermal state the stress starts from (docs/method.md). ``settle``, where
    given, runs inside the GPU's lock before the idle wait, handed the same temperature reader
    (power.cool_down: a thermal start state), and what it returns goes to the launch info as ``settled_start``."""
    read = read or nvml_reader(info)
    temperature = temperature or (lambda: gpu_temperature_c(info))
    timeout = max(30.0, 40 * launch_s)
    with gpu_lock(info.index), power_lock():
        settled_start = settle(temperature) if settle else None
        scale = calibrate(cp, wl, launch_s)
        # every launch's stamps in one buffer allocated up front (an allocation in the loop may wait on
        # the GPU); room for launches 8 x shorter than calibrated, then more rows if it runs out
        rows = math.ceil(duration_s / launch_s * 8) + 8
        pool = [cp.zeros((rows, wl.grid * wl.stamps_per_block * 2), dtype=cp.uint64)]
        launched = 0
        with ClockSampler(read, period_s) as nvml:
            time.sleep(idle_s)
            start_c = temperature()
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
            end_c = temperature()
        shape = (wl.grid, wl.stamps_per_block, 2)
        per_launch = [row.reshape(shape) for block in pool for row in block.get()][:launched]
        sms = len(set(wl.smids.get().tolist())) if wl.smids is not None else None
    try:
        kernel, fields = stress_reading(per_launch, wl.work(scale), wl.unit, bin_s=bin_s, duration_s=duration_s,
                                        from_s=sustained_from_s)
    except ValueError as exc:
        raise KernelLaunchError(f"{wl.kernel}: the clock stamps are not in order: {exc}") from exc
    nvml_series = nvml.series(0.0, end_s)
    nvml_summary = summarize_clock(nvml_series, from_s=sustained_from_s).as_dict() if len(nvml_series) >= 2 else None
    launch = dict(wl.describe(), scale=scale, launches=launched, launch_s=end_s / max(1, launched),
                  duration_s=duration_s, idle_s=idle_s, bin_s=bin_s, period_s=period_s,
                  sustained_from_s=sustained_from_s,
                  samples=wl.stamps_per_block, sms_covered=sms, sm_count=info.sm_count,
                  kernel_clock=kernel.as_dict(), nvml_clock=nvml_summary,
                  idle_mhz=round(statistics.median(idle), 1) if idle else None, rate_unit=wl.unit,
                  temperature_c=[start_c, end_c],  # the GPU's at the stress's start and end
                  **({"settled_start": settled_start} if settled_start is not None else {}),
                  nvml_mark_monotonic_s=nvml.t0, **fields)  # where NVML's other readings (power.py) start
    m = Measurement(name=name, unit="MHz", values=kernel.windows_mhz, stop_reason="time budget",
                    noise_target=CLOCK_NOISE, overhead_cycles=0.0, sm_clock_mhz=round(kernel.sustained_mhz, 1),
                    throttle=nvml.reasons(0.0, end_s), kernel=wl.kernel, launch=launch)
    m.remeasure = lambda: stress_clock(cp, wl, name=name, info=info, duration_s=duration_s, launch_s=launch_s,
                                       idle_s=idle_s, bin_s=bin_s, period_s=period_s, read=read,
                                       sustained_from_s=sustained_from_s, temperature=temperature, settle=settle)
    return m


def stress_rate(m: Measurement, name: str) -> Measurement:
    """A throughput fact read from a sustained-clock stress (:func:`stress_clock`): the load's rate in
    each of its sustained windows, as the measurement's values, and as its SM clock the clock of the
    median-rate window's own launches (the stress's sustained clock is the median of other windows:
    equal bins split by count, whose median need not be the median-rate window's). Measured again, it
    runs the stress again. Why: the tensor stress's load is the dense bf16 wgmma whose rate the bf16 TFLOP/s fact is;
    measured apart it took 6.5 s more and read the same within 0.75 % (docs/performance.md)."""
    ln = m.launch
    rates, clocks = list(ln.get("rate_windows") or []), list(ln.get("rate_windows_mhz") or [])
    if len(rates) < RATE_WINDOWS:
        raise KernelLaunchError(
            f"{m.kernel}: the stress's sustained windows held too few launches to read its rate ({len(rates)} of "
            f"{RATE_WINDOWS} windows); launches of ~{ln.get('launch_s', 0) * 1e3:.0f} ms over {ln.get('duration_s')} s")
    if len(clocks) != len(rates):
        raise KernelLaunchError(f"{m.kernel}: {len(rates)} window rates but {len(clocks)} window clocks; each rate "
                                "needs the clock of its own launches (stress_reading's rate_windows_mhz)")
    r = Measurement(name=name, unit=ln["rate_unit"], values=rates, stop_reason="time budget", noise_target=RATE_STOP.noise_target,
                    overhead_cycles=0.0, sm_clock_mhz=round(median_pair(list(zip(rates, clocks)))[1], 1),
                    throttle=list(m.throttle), kernel=m.kernel,
                    launch=dict(ln, series_mhz=[], stress_sustained_mhz=round(m.median, 1)))
    remeasure = getattr(m, "remeasure", None)
    if remeasure is not None:
        r.remeasure = lambda: stress_rate(remeasure(), name)
    return r
