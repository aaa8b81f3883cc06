"""pytest_gpuprops.throughput without a GPU: the launch length's calibration, and the launch loops
(measure_rate, measure_placed_rate, stress_clock) on a simulated GPU whose clock, speed and SMs are
given, so every number they return is known; a rate read from a stress; each rate read at the clock
of the same launches (planted clocks that the old pairing got wrong). SimGpu is also the GPU of
tests/test_throughput_facts_simulated.py."""

import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import pytest
from test_throughput_text import H100
from test_workloads import MiB, _Array

from pytest_gpuprops import (
    assertions,
    ceilings,
    datasheets,
    devices,
    driver_launch,
    rates,
    throughput_text,
    workloads,
)
from pytest_gpuprops import throughput as tp
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.measure import Measurement

# ----------------------------------------------------------------------------------------------
# calibration


def test_scale_for_a_target_launch_length():
    assert tp.scale_for(100, 0.001, 0.005) == 500
    assert tp.scale_for(3, 0.004, 0.005) == 4  # rounded
    assert tp.scale_for(1, 10.0, 0.005) == 1  # never below one trip
    assert tp.scale_for(2**30, 1e-9, 1.0) == tp.MAX_SCALE  # an int32 argument
    with pytest.raises(ValueError):
        tp.scale_for(1, 0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# the launch loops on a simulated GPU


class _Event:
    def __init__(self, gpu):
        self.gpu, self.t, self.done = gpu, None, True

    def record(self):
        self.t = self.gpu.now_ns


class _Rows(_Array):
    """A simulated device array with CuPy's shape (rows of stamps are indexed by it)."""

    @property
    def shape(self):
        return self.a.shape

    def __getitem__(self, i):
        return _Rows(self.a[i])


class SimGpu:
    """Kernels that finish at once in real time and write the stamps a GPU at a given clock would:
    ``ns_per_scale`` nanoseconds per loop trip, the clock ramping from ``idle_mhz`` to ``mhz`` over
    ``ramp_ns`` after each idle spell (100 ms of real time without a launch).

    ``clock_under_load``: instead, launch k after the host last waited for a timing (CUDA events'
    elapsed time) runs at ``clock_under_load[k]`` (the last one from then on), as a power cap pulls
    the clock down under a load and lets it recover while the host reads; ``cycles_per_scale``: a
    loop trip takes that many cycles at the clock of its launch, not a fixed time. Every launch's
    (clock, nanoseconds, address of the stamps it wrote) is in ``log``."""

    def __init__(self, sms: int, mhz: float, ns_per_scale: float, *, idle_mhz: float = 1000.0, ramp_ns: float = 0.0,
                 real_s_per_launch: float = 0.0, clock_under_load: Sequence[float] | None = None,
                 cycles_per_scale: float | None = None):
        self.sms, self.mhz, self.ns_per_scale, self.idle_mhz, self.ramp_ns = sms, mhz, ns_per_scale, idle_mhz, ramp_ns
        self.real_s_per_launch, self.clock_under_load, self.cycles_per_scale = (real_s_per_launch, clock_under_load,
                                                                                cycles_per_scale)
        self.now_ns, self.cycles, self.ramp_from, self.last_real, self.launches = 1_000_000_000, 0.0, 0, -1e9, 0
        self.loaded, self.log = 0, []
        self.int32, self.float32, self.uint32, self.uint64 = np.int32, np.float32, np.uint32, np.uint64
        gpu = self

        class cuda:
            @staticmethod
            def Event():
                return _Event(gpu)

            @staticmethod
            def get_elapsed_time(a, b):
                gpu.loaded = 0  # the host waited: the GPU idles and its clock recovers
                return (b.t - a.t) / 1e6

        self.cuda = cuda

    def zeros(self, n, dtype):
        return _Rows(np.zeros(n, dtype=dtype))

    def launch_clock(self) -> float | None:
        """The clock of the launch about to run, constant over it; None: clock_at over time."""
        if self.clock_under_load is None:
            return None
        mhz = self.clock_under_load[min(self.loaded, len(self.clock_under_load) - 1)]
        self.loaded += 1
        return mhz

    def clock_at(self, t_ns: float) -> float:
        if self.ramp_ns <= 0:
            return self.mhz
        return self.idle_mhz + (self.mhz - self.idle_mhz) * min(1.0, (t_ns - self.ramp_from) / self.ramp_ns)

    def kernel(self, scale_arg: int, smids_arg: int | None, *, cycles_per_scale: float | None = None,
               mhz: float | None = None, real_s: float | None = None):
        """A kernel whose loop count is argument ``scale_arg``; ``cycles_per_scale`` and ``mhz``: this
        kernel's own cycles per loop trip and clock, where they differ from the GPU's; ``real_s``: the host
        time a launch takes, where it differs from the GPU's ``real_s_per_launch``."""
        def run(grid, block, args):
            if time.monotonic() - self.last_real > 0.1:
                self.ramp_from = self.now_ns  # woke from idle: the clock ramps again
            self.last_real = time.monotonic()
            stamps = args[0].a.reshape(grid[0], -1, 2)
            fixed = mhz if mhz is not None else self.launch_clock()
            cycles = cycles_per_scale or self.cycles_per_scale
            if cycles:
                dur = int(args[scale_arg]) * cycles / (fixed or self.mhz) * 1e3
            else:
                dur = int(args[scale_arg]) * self.ns_per_scale
            n = stamps.shape[1]
            if n == 0:  # a kernel without stamps (the DRAM kernels): only time passes
                self.log.append((fixed or self.mhz, dur, None))
                self.now_ns, self.launches = self.now_ns + dur, self.launches + 1
                return
            t = [self.now_ns + dur * k / (n - 1) for k in range(n)]
            c = [self.cycles]
            for k in range(1, n):
                c.append(c[-1] + (fixed or self.clock_at(t[k - 1])) * (t[k] - t[k - 1]) / 1e3)
            self.log.append((fixed or self.mhz, dur, args[0].a.__array_interface__["data"][0]))
            stamps[:, :, 0] = np.array(c, dtype=np.uint64)
            stamps[:, :, 1] = np.array(t, dtype=np.uint64)
            if smids_arg is not None:
                args[smids_arg].a[:] = np.arange(grid[0]) % self.sms
            self.now_ns, self.cycles, self.launches = t[-1], c[-1], self.launches + 1
            sleep = self.real_s_per_launch if real_s is None else real_s
            if sleep:
                time.sleep(sleep)
        return run


INFO = devices.GpuInfo(0, "NVIDIA H100 80GB HBM3", "sm_90", 4, "580.0", "13.0", "13.0", "0000:00:00.0", 1980)


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))


def test_measure_rate_on_a_simulated_gpu():
    # 4 SMs; a trip of the FFMA loop takes 10 us everywhere: FLOPs per trip / 10 us
    wl_probe = workloads.ffma_workload(np, None, sms=4, max_threads_per_sm=2048)
    gpu = SimGpu(4, 1755.0, 10_000.0)
    wl = workloads.ffma_workload(gpu, gpu.kernel(3, 1), sms=4, max_threads_per_sm=2048)
    m = tp.measure_rate(gpu, wl, name="ffma_fp32_tflops", info=INFO, read=lambda: (["sw_power_cap"], 1755),
                        period_s=0.001)
    expected = wl_probe.work(1) / 10e-6 / 1e12
    assert m.median == pytest.approx(expected) and m.unit == "TFLOP/s"
    assert (m.stop_reason, m.n) == ("converged", 5)
    assert m.sm_clock_mhz == pytest.approx(1755.0)
    assert m.throttle == ["sw_power_cap"]
    ln = m.launch
    assert ln["scale"] == 500 and ln["launches"] == 4 and ln["launch_s"] == pytest.approx(0.005)  # 5 ms of 10 us trips
    assert ln["work_per_launch"] == wl.work(500) and ln["nvml_mhz"] == 1755.0 and ln["sm_count"] == 4
    assert ln["kernel_mhz"] == [1755.0] * 5
    assert len(ln["gpu_over_host"]) == 5  # each repeat's event time over the host's (a simulated GPU's is its own)
    # every launch of a repeat stamped a row of its own: the last repeat's four launches, four rows
    assert len({row for _, _, row in gpu.log[-4:]}) == 4
    again = m.remeasure()
    assert again.median == pytest.approx(expected) and again.name == "ffma_fp32_tflops"


def ffma_cycles_per_trip(sms: int, efficiency: float) -> float:
    """Cycles one FFMA loop trip takes on ``sms`` SMs doing ``efficiency`` of 256 FLOP per SM per clock."""
    wl = workloads.ffma_workload(np, None, sms=sms, max_threads_per_sm=2048)
    return wl.work(1) / (sms * datasheets.PER_SM_CYCLE["sm_90"]["ffma"] * efficiency)


def test_measure_rate_reads_its_clock_over_every_launch_of_a_repeat():
    # the clock falls launch by launch under the load (1980, 1800, 1650, 1500 MHz) and recovers while the
    # host reads the events; the FFMAs run at 97 % of 256 FLOP per SM per clock. The repeat's rate is at
    # the time-weighted clock of its four launches, 4 / (1/1980 + 1/1800 + 1/1650 + 1/1500) = 1714.3 MHz;
    # the clock of the last launch alone (1500 MHz), as the stamps read when every launch wrote one buffer,
    # puts the same rate at 110.9 % of the ceiling: the e4m3 reading of 1691.8 TFLOP/s beside 1545 MHz
    gpu = SimGpu(4, 1980.0, 0.0, clock_under_load=[1980.0, 1800.0, 1650.0, 1500.0],
                 cycles_per_scale=ffma_cycles_per_trip(4, 0.97))
    wl = workloads.ffma_workload(gpu, gpu.kernel(3, 1), sms=4, max_threads_per_sm=2048)
    m = tp.measure_rate(gpu, wl, name="ffma_fp32_tflops", info=INFO, read=lambda: ([], 1980), period_s=0.001)
    weighted = 4 / sum(1 / c for c in (1980.0, 1800.0, 1650.0, 1500.0))
    assert weighted == pytest.approx(1714.29, abs=0.01)
    assert [c for c, _, _ in gpu.log[-4:]] == [1980.0, 1800.0, 1650.0, 1500.0]  # the last repeat, launch by launch
    assert m.launch["kernel_mhz"] == [pytest.approx(weighted, abs=0.05)] * m.n
    assert m.sm_clock_mhz == pytest.approx(weighted, abs=0.05)
    ceiling = ceilings.RATES["ffma_fp32_tflops"].ceiling("TFLOP/s", "sm_90", 4, m.sm_clock_mhz)
    assert m.median / ceiling == pytest.approx(0.97, abs=1e-4)
    assert ceilings.impossible_reading("ffma_fp32_tflops", "TFLOP/s", m.median, arch="sm_90", sms=4,
                                       clock_mhz=m.sm_clock_mhz, max_sm_clock_mhz=1980) == []
    # the last launch's clock: the pairing of the old buffer, which the guard calls impossible
    last = gpu.log[-1][0]
    old_fraction = m.median / ceilings.RATES["ffma_fp32_tflops"].ceiling("TFLOP/s", "sm_90", 4, last)
    assert old_fraction == pytest.approx(0.97 * weighted / 1500.0, rel=1e-4) and old_fraction > 1.1
    flags = ceilings.impossible_reading("ffma_fp32_tflops", "TFLOP/s", m.median, arch="sm_90", sms=4, clock_mhz=last,
                                        max_sm_clock_mhz=1980)
    assert len(flags) == 1 and flags[0].startswith(ceilings.IMPOSSIBLE_RATE + ": ") and "110.86 %" in flags[0]


def test_measure_rate_of_a_stream_kernel_counts_bytes():
    """A DRAM kernel makes one pass a launch: a repeat holds as many launches as make the target
    length (here 100 x 1 us, 8 groups), the loop count stays 1, and with no stamps the SM clock is
    NVML's (none sampled here)."""
    gpu = SimGpu(2, 1980.0, 1_000.0)  # one pass over the buffer: 1 us
    wl = workloads.stream_workload(gpu, gpu.kernel(4, None), "dram_copy", sms=2, max_threads_per_sm=1024, nbytes=1_600_000)
    m = tp.measure_rate(gpu, wl, name="dram_copy_gbps", info=INFO, target_launch_s=0.0001, launches=8,
                        read=lambda: ([], None), period_s=0.001)
    assert m.median == pytest.approx(2 * 1_600_000 / 1e-6 / 1e9)  # read + written per microsecond
    assert m.unit == "GB/s" and m.launch["scale"] == 1 and m.launch["launches"] == 800
    assert m.launch["nvml_mhz"] is None and m.launch["kernel_mhz"] is None and m.sm_clock_mhz is None
    assert all(scale_dur == 1_000.0 for _, scale_dur, _ in gpu.log)  # every launch one pass, never a longer loop


class PlacedSim(SimGpu):
    """The simulated GPU with a read that takes ``slow[k]`` times as long in window k of ``region``."""

    def __init__(self, region_of, slow: Sequence[float], stride: int, **kw):
        super().__init__(2, 1980.0, 1_000.0, **kw)  # one read of a window: 1 us at speed 1
        self.region_of, self.slow, self.stride = region_of, list(slow), stride
        self.reads = []  # (window, scale) of every launch

    def kernel(self, scale_arg: int, smids_arg: int | None):
        base = super().kernel(scale_arg, smids_arg)

        def run(grid, block, args):
            at = args[1].a.__array_interface__["data"][0] - self.region_of().a.__array_interface__["data"][0]
            k = at // self.stride
            self.reads.append((k, int(args[scale_arg])))
            ns, self.ns_per_scale = self.ns_per_scale, self.ns_per_scale * self.slow[k]
            try:
                base(grid, block, args)
            finally:
                self.ns_per_scale = ns
        return run


def test_measure_placed_rate_on_a_simulated_gpu_is_the_mean_of_the_windows():
    layout = workloads.l2_placements(4 * MiB, count=4)  # 1 MiB windows
    slow = [1.0, 1.02, 0.98, 1.05]  # window k makes a pass in slow[k] us
    gpu = PlacedSim(lambda: region, slow, layout.stride_bytes)
    region = gpu.zeros(layout.region_bytes // 4, dtype=np.uint32)
    wls = workloads.l2_placement_workloads(gpu, gpu.kernel(4, None), layout, region, sms=2, max_threads_per_sm=1024)
    m = tp.measure_placed_rate(gpu, wls, name="l2_read_gbps", info=INFO, target_launch_s=0.001, launches=1,
                               read=lambda: ([], 1980), period_s=0.001)
    per_pass = wls[0].work(1)  # 32 blocks, each its 512 KiB chunk of the 1 MiB window: 16 MiB a pass
    assert per_pass == 16 * MiB
    window_gbps = [per_pass / (f * 1e-6) / 1e9 for f in slow]
    assert m.unit == "GB/s" and (m.stop_reason, m.n) == ("converged", 5)
    assert m.median == pytest.approx(sum(window_gbps) / 4)  # the mean of the windows' rates
    assert m.values == pytest.approx([sum(window_gbps) / 4] * 5) and m.sm_clock_mhz == pytest.approx(1980.0)
    ln = m.launch
    assert ln["placements"] == 4 and ln["window_offsets"] == [0, 2 * MiB, 4 * MiB, 6 * MiB]
    assert ln["placement_rates"] == pytest.approx(window_gbps, abs=0.05)
    assert ln["placement_lowest"] == pytest.approx(min(window_gbps), abs=0.05)
    assert ln["placement_highest"] == pytest.approx(max(window_gbps), abs=0.05)
    assert ln["placement_spread"] == pytest.approx((max(window_gbps) - min(window_gbps)) / (sum(window_gbps) / 4),
                                                   abs=1e-5)
    assert ln["scale"] == 1000 and ln["launches"] == 1 and "window_offset" not in ln
    assert ln["launch_s"] == pytest.approx(1.01e-3)  # over every window's launches: 0.98, 1.0, 1.02, 1.05 ms
    assert ln["buffer_bytes"] == MiB and ln["nvml_mhz"] == 1980.0 and ln["sm_count"] == 4
    # every repeat: each window in turn, a read of it once (scale 1, untimed), then the timed launch
    repeats = gpu.reads[-5 * 8:]
    assert repeats == [(k, s) for _ in range(5) for k in range(4) for s in (1, 1000)]
    # the timed launches of a repeat stamp a row each, the untimed reads one row of their own
    rows = [row for _, _, row in gpu.log[-8:]]
    assert len(set(rows[1::2])) == 4 and len(set(rows[0::2])) == 1 and not set(rows[0::2]) & set(rows[1::2])
    again = m.remeasure()
    assert again.median == pytest.approx(m.median) and again.launch["placements"] == 4
    with pytest.raises(ValueError, match="no placements"):
        tp.measure_placed_rate(gpu, [], name="l2_read_gbps", info=INFO)


def test_stress_clock_on_a_simulated_gpu_finds_sustained_ramp_and_every_sm():
    # 50 ms launches (10 us trips); the clock ramps 1000 -> 1980 MHz over 40 ms after the idle spell
    gpu = SimGpu(4, 1980.0, 10_000.0, ramp_ns=40e6, real_s_per_launch=0.004)
    wl = workloads.wgmma_workload(gpu, gpu.kernel(3, 1), "bf16", sms=4)
    temps = iter(range(41, 1000))  # read at the stress's start and end, and again at each re-measurement's
    m = tp.stress_clock(gpu, wl, name="sustained_sm_clock_tensor_mhz", info=INFO, duration_s=0.15, idle_s=0.15,
                        read=lambda: (["sw_power_cap"], 1980), period_s=0.005, temperature=lambda: next(temps))
    assert m.unit == "MHz" and m.median == pytest.approx(1980.0) and m.noise < 1e-6
    assert m.launch["temperature_c"] == [41, 42]  # the thermal state it started from and ended in, beside the clock
    assert m.stop_reason == "time budget" and m.noise_target == tp.CLOCK_NOISE
    k = m.launch["kernel_clock"]
    assert k["start_mhz"] < 1100  # the first bin is the idle clock waking up
    # 95 % of 1980 is reached 38.4 ms into the ramp; the stamps are 6.25 ms apart, the bins 10 ms wide
    assert 0.03 <= k["ramp_s"] <= 0.05
    assert k["min_mhz"] >= 0.95 * 1980
    assert m.launch["sms_covered"] == 4 and m.launch["launches"] >= 5
    assert m.throttle == ["sw_power_cap"] and m.launch["nvml_clock"]["sustained_mhz"] == 1980.0
    assert m.launch["idle_mhz"] == 1980.0 and m.sm_clock_mhz == pytest.approx(1980.0)
    assert m.launch["series_mhz"][-1][1] == pytest.approx(1980.0)
    assert m.remeasure().median == pytest.approx(1980.0)
    # the load's own rate over the second half: every launch's work over its simulated time (10 us a trip)
    expected = rates.per_second(wl.work(m.launch["scale"]), m.launch["scale"] * 10e-6, "TFLOP/s")
    assert m.launch["rate_unit"] == "TFLOP/s" and m.launch["rate_sustained"] == pytest.approx(expected, rel=1e-3)
    assert f"the load's own rate over those windows {m.launch['rate_sustained']:g} TFLOP/s (reported)" in \
        throughput_text.clock_method(m, None)
    # and in each of the 5 windows, with the clock of the same launches (all past the ramp)
    assert m.launch["rate_windows"] == [pytest.approx(expected, rel=1e-3)] * 5
    assert m.launch["rate_windows_mhz"] == [pytest.approx(1980.0, abs=0.1)] * 5


def test_a_rate_read_from_a_stress_is_its_windows_and_measured_again_by_a_new_stress():
    launch = {"kernel": "stress_wgmma", "source": "stress_ffma.cu", "kind": "wgmma_bf16", "grid": 132, "block": 256,
              "defines": {"UNROLL": 16}, "launch_s": 0.05, "duration_s": 10.0, "idle_s": 0.25, "rate_unit": "TFLOP/s",
              "rate_windows": [860.0, 858.0, 861.0, 859.0, 862.0], "rate_windows_mhz": [1601.0, 1598.0, 1602.0, 1599.0, 1603.0]}
    clock = Measurement.given("sustained_sm_clock_tensor_mhz", [1600.0, 1590.0, 1610.0, 1600.0, 1600.0], unit="MHz",
                              throttle=["sw_power_cap"], launch=launch)
    again = Measurement.given("sustained_sm_clock_tensor_mhz", [1500.0] * 5, unit="MHz",
                              launch=dict(launch, rate_windows=[800.0] * 5))
    clock.remeasure = lambda: again
    r = tp.stress_rate(clock, "wgmma_bf16_dense_tflops")
    # the median rate, 860, is the first window's: its clock, 1601 MHz, not the stress's sustained 1600
    assert (r.name, r.unit, r.values, r.median, r.sm_clock_mhz) == ("wgmma_bf16_dense_tflops", "TFLOP/s",
                                                                   [860.0, 858.0, 861.0, 859.0, 862.0], 860.0, 1601.0)
    assert r.throttle == ["sw_power_cap"] and r.remeasure().median == 800.0 and r.launch["stress_sustained_mhz"] == 1600.0
    text = throughput_text.stress_rate_method(r, "sm_90", 132, H100)
    for part in ("stress_wgmma (stress_ffma.cu) on every SM: grid 132 x 256", "two deep for 10 s after 0.25 s idle",
                 "each of the 5 windows of the second half", "SM clock 1601.0 MHz (clock64 / %globaltimer over the "
                 "median-rate window's own launches; the stress's sustained clock 1600.0 MHz)", "989.4",
                 "at the 1601 MHz it ran at"):
        assert part in text, (part, text)
    with pytest.raises(driver_launch.KernelLaunchError, match="too few launches to read its rate"):
        tp.stress_rate(Measurement.given("c", [1600.0], unit="MHz", launch=dict(launch, rate_windows=[860.0])), "x")
    with pytest.raises(driver_launch.KernelLaunchError, match="5 window rates but 4 window clocks"):
        tp.stress_rate(Measurement.given("c", [1600.0], unit="MHz", launch=dict(
            launch, rate_windows_mhz=[1600.0] * 4)), "x")


def wgmma_cycles_per_trip(sms: int, efficiency: float) -> float:
    """Cycles one bf16 wgmma loop trip takes on ``sms`` SMs doing ``efficiency`` of 4096 FLOP per SM per clock."""
    wl = workloads.wgmma_workload(np, None, "bf16", sms=sms)
    return wl.work(1) / (sms * datasheets.PER_SM_CYCLE["sm_90"]["wgmma_bf16"] * efficiency)


def test_a_stress_rate_is_read_at_the_clock_of_its_own_window():
    # six launches of the same work on the simulated GPU, the clock stepping from 1400 to 1900 MHz after the
    # third (the cap lifting), the wgmma at 95 % of 4096 FLOP per SM per clock; the whole stress is the
    # sustained part. Its 5 rate windows hold the launches that started in them: 0+1, 2, 3, 4, 5, so the
    # median-rate window is launch 3's, at 1900 MHz. The clock's windows are 10 ms bins split by count, and
    # the middle one straddles the step (1483 MHz): the old reading paired the median rate with that
    gpu = SimGpu(4, 1400.0, 0.0, clock_under_load=[1400.0] * 3 + [1900.0] * 3,
                 cycles_per_scale=wgmma_cycles_per_trip(4, 0.95))
    wl = workloads.wgmma_workload(gpu, gpu.kernel(3, 1), "bf16", sms=4)
    scale = round(80e6 / gpu.cycles_per_scale)  # 80 M cycles a launch: 57 ms at 1400 MHz, 42 ms at 1900
    stamps = gpu.zeros((6, wl.grid * wl.stamps_per_block * 2), dtype=np.uint64)
    for row in range(6):
        wl.fn((wl.grid,), (wl.block,), wl.args(stamps[row], scale))
    per_launch = [r.reshape(wl.grid, wl.stamps_per_block, 2).tolist() for r in stamps.get()]
    kernel, fields = tp.stress_reading(per_launch, wl.work(scale), wl.unit, bin_s=0.01, duration_s=0.3, from_s=0.0)
    assert fields["rate_windows_mhz"] == [1400.0, 1400.0, 1900.0, 1900.0, 1900.0]
    assert kernel.windows_mhz == pytest.approx([1400.0, 1400.0, 1483.3, 1900.0, 1900.0], abs=0.05)
    launch = dict(wl.describe(), launch_s=0.05, duration_s=0.3, idle_s=0.0, sustained_from_s=0.0, sm_count=4,
                  rate_unit=wl.unit, **fields)
    stress = Measurement.given("sustained_sm_clock_tensor_mhz", kernel.windows_mhz, unit="MHz", launch=launch)
    r = tp.stress_rate(stress, "wgmma_bf16_dense_tflops")
    bf16 = ceilings.RATES["wgmma_bf16_dense_tflops"]
    assert r.sm_clock_mhz == 1900.0 and stress.median == pytest.approx(1483.3, abs=0.1)
    assert r.median / bf16.ceiling("TFLOP/s", "sm_90", 4, r.sm_clock_mhz) == pytest.approx(0.95, abs=1e-4)
    assert [rate / bf16.ceiling("TFLOP/s", "sm_90", 4, mhz) for rate, mhz in
            zip(fields["rate_windows"], fields["rate_windows_mhz"])] == [pytest.approx(0.95, abs=1e-4)] * 5
    # checked as a fact: the pair passes the guard (NOISY, as the tolerance says: its windows are 36 % apart);
    # the old pairing (the stress's sustained clock) is flagged
    fact = Fact(name="wgmma_bf16_dense_tflops", arch="sm_90", unit="TFLOP/s", method="m", source="s",
                value=round(r.median, 3), tolerance_rel=0.03, scope="gpu")
    new = assertions.evaluate(fact, r, max_sm_clock_mhz=1980)
    assert new.status == assertions.NOISY and not any("impossible" in f for f in new.flags)
    old = assertions.evaluate(fact, dataclasses.replace(r, sm_clock_mhz=round(stress.median, 1)), max_sm_clock_mhz=1980)
    assert old.status == assertions.ERROR and old.flags[0].startswith(ceilings.IMPOSSIBLE_RATE)
    assert "121.69 % of" in old.flags[0] and "at the 1483.3 MHz read beside it" in old.flags[0]


def test_stress_clock_keeps_every_launch_when_launches_outnumber_the_first_stamp_buffer():
    # 10 ms launches for 0.1 s: 8 x 10 + 8 = 88 rows of stamps up front; hundreds of launches of 0.2 ms real time
    gpu = SimGpu(2, 1410.0, 1_000.0, real_s_per_launch=0.0002)
    wl = workloads.ffma_workload(gpu, gpu.kernel(3, 1), sms=2, max_threads_per_sm=1024)
    m = tp.stress_clock(gpu, wl, name="sustained_sm_clock_ffma_mhz", info=INFO, duration_s=0.1, launch_s=0.01,
                        idle_s=0.0, bin_s=0.001, read=lambda: ([], None), period_s=0.01)
    n = m.launch["launches"]
    assert n > 8 * 10 + 8, n
    # every launch's stamps were read: the series spans all of them (10 ms of GPU time each)
    assert m.launch["series_mhz"][-1][0] == pytest.approx(n * 0.01, abs=0.002)
    assert m.median == pytest.approx(1410.0) and m.launch["nvml_clock"] is None and m.launch["idle_mhz"] is None
    assert m.launch["sms_covered"] == 2 and m.throttle == []
