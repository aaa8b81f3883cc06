"""pytest_gpuprops.throughput without a GPU: the launch length's calibration, and the launch loops
(measure_rate, measure_placed_rate, stress_clock) on a simulated GPU whose clock, speed and SMs are
given, so every number they return is known; a rate read from a stress; and
hwtests/test_throughput_and_clocks.py recorded and checked end to end on the simulated GPU."""

import re
import time
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
from gp_testing import KERNELS
from test_throughput_text import H100
from test_workloads import MiB, _Array

from pytest_gpuprops import devices, driver_launch, rates, throughput_text, workloads
from pytest_gpuprops import throughput as tp
from pytest_gpuprops.facts import tomllib
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


class SimGpu:
    """Kernels that finish at once in real time and write the stamps a GPU at a given clock would:
    ``ns_per_scale`` nanoseconds per loop trip, the clock ramping from ``idle_mhz`` to ``mhz`` over
    ``ramp_ns`` after each idle spell (100 ms of real time without a launch)."""

    def __init__(self, sms: int, mhz: float, ns_per_scale: float, *, idle_mhz: float = 1000.0, ramp_ns: float = 0.0,
                 real_s_per_launch: float = 0.0):
        self.sms, self.mhz, self.ns_per_scale, self.idle_mhz, self.ramp_ns = sms, mhz, ns_per_scale, idle_mhz, ramp_ns
        self.real_s_per_launch = real_s_per_launch
        self.now_ns, self.cycles, self.ramp_from, self.last_real, self.launches = 1_000_000_000, 0.0, 0, -1e9, 0
        self.int32, self.float32, self.uint32, self.uint64 = np.int32, np.float32, np.uint32, np.uint64
        gpu = self

        class cuda:
            @staticmethod
            def Event():
                return _Event(gpu)

            @staticmethod
            def get_elapsed_time(a, b):
                return (b.t - a.t) / 1e6

        self.cuda = cuda

    def zeros(self, n, dtype):
        return _Array(np.zeros(n, dtype=dtype))

    def clock_at(self, t_ns: float) -> float:
        if self.ramp_ns <= 0:
            return self.mhz
        return self.idle_mhz + (self.mhz - self.idle_mhz) * min(1.0, (t_ns - self.ramp_from) / self.ramp_ns)

    def kernel(self, scale_arg: int, smids_arg: int | None):
        def run(grid, block, args):
            if time.monotonic() - self.last_real > 0.1:
                self.ramp_from = self.now_ns  # woke from idle: the clock ramps again
            self.last_real = time.monotonic()
            stamps = args[0].a.reshape(grid[0], -1, 2)
            dur = int(args[scale_arg]) * self.ns_per_scale
            n = stamps.shape[1]
            t = [self.now_ns + dur * k / (n - 1) for k in range(n)]
            c = [self.cycles]
            for k in range(1, n):
                c.append(c[-1] + self.clock_at(t[k - 1]) * (t[k] - t[k - 1]) / 1e3)
            stamps[:, :, 0] = np.array(c, dtype=np.uint64)
            stamps[:, :, 1] = np.array(t, dtype=np.uint64)
            if smids_arg is not None:
                args[smids_arg].a[:] = np.arange(grid[0]) % self.sms
            self.now_ns, self.cycles, self.launches = t[-1], c[-1], self.launches + 1
            if self.real_s_per_launch:
                time.sleep(self.real_s_per_launch)
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
    assert ln["work_per_launch"] == wl.work(500) and ln["nvml_mhz"] == 1755.0
    again = m.remeasure()
    assert again.median == pytest.approx(expected) and again.name == "ffma_fp32_tflops"


def test_measure_rate_of_a_stream_kernel_counts_bytes():
    gpu = SimGpu(2, 1980.0, 1_000.0)  # one pass over the buffer: 1 us
    wl = workloads.stream_workload(gpu, gpu.kernel(4, None), "dram_copy", sms=2, max_threads_per_sm=1024, nbytes=1_600_000)
    m = tp.measure_rate(gpu, wl, name="dram_copy_gbps", info=INFO, target_launch_s=0.002, launches=8,
                        read=lambda: ([], None), period_s=0.001)
    assert m.median == pytest.approx(2 * 1_600_000 / 1e-6 / 1e9)  # read + written per microsecond
    assert m.unit == "GB/s" and m.launch["scale"] == 2000 and m.launch["nvml_mhz"] is None
    assert m.sm_clock_mhz == pytest.approx(1980.0)


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
    slow = [1.0, 1.02, 0.98, 1.05]  # window k reads 1 MiB in slow[k] us
    gpu = PlacedSim(lambda: region, slow, layout.stride_bytes)
    region = gpu.zeros(layout.region_bytes // 4, dtype=np.uint32)
    wls = workloads.l2_placement_workloads(gpu, gpu.kernel(4, None), layout, region, sms=2, max_threads_per_sm=1024)
    m = tp.measure_placed_rate(gpu, wls, name="l2_read_gbps", info=INFO, target_launch_s=0.001, launches=1,
                               read=lambda: ([], 1980), period_s=0.001)
    window_gbps = [MiB / (f * 1e-6) / 1e9 for f in slow]
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
    assert ln["buffer_bytes"] == MiB and ln["nvml_mhz"] == 1980.0
    # every repeat: each window in turn, a read of it once (scale 1, untimed), then the timed launch
    repeats = gpu.reads[-5 * 8:]
    assert repeats == [(k, s) for _ in range(5) for k in range(4) for s in (1, 1000)]
    again = m.remeasure()
    assert again.median == pytest.approx(m.median) and again.launch["placements"] == 4
    with pytest.raises(ValueError, match="no placements"):
        tp.measure_placed_rate(gpu, [], name="l2_read_gbps", info=INFO)


def test_stress_clock_on_a_simulated_gpu_finds_sustained_ramp_and_every_sm():
    # 50 ms launches (10 us trips); the clock ramps 1000 -> 1980 MHz over 40 ms after the idle spell
    gpu = SimGpu(4, 1980.0, 10_000.0, ramp_ns=40e6, real_s_per_launch=0.004)
    wl = workloads.wgmma_workload(gpu, gpu.kernel(3, 1), "bf16", sms=4)
    m = tp.stress_clock(gpu, wl, name="sustained_sm_clock_tensor_mhz", info=INFO, duration_s=0.15, idle_s=0.15,
                        read=lambda: (["sw_power_cap"], 1980), period_s=0.005)
    assert m.unit == "MHz" and m.median == pytest.approx(1980.0) and m.noise < 1e-6
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


def test_a_rate_read_from_a_stress_is_its_windows_and_measured_again_by_a_new_stress():
    launch = {"kernel": "stress_wgmma", "source": "stress_ffma.cu", "kind": "wgmma_bf16", "grid": 132, "block": 256,
              "defines": {"UNROLL": 16}, "launch_s": 0.05, "duration_s": 10.0, "idle_s": 0.25, "rate_unit": "TFLOP/s",
              "rate_windows": [860.0, 858.0, 861.0, 859.0, 862.0]}
    clock = Measurement.given("sustained_sm_clock_tensor_mhz", [1600.0, 1590.0, 1610.0, 1600.0, 1600.0], unit="MHz",
                              throttle=["sw_power_cap"], launch=launch)
    again = Measurement.given("sustained_sm_clock_tensor_mhz", [1500.0] * 5, unit="MHz",
                              launch=dict(launch, rate_windows=[800.0] * 5))
    clock.remeasure = lambda: again
    r = tp.stress_rate(clock, "wgmma_bf16_dense_tflops")
    assert (r.name, r.unit, r.values, r.median, r.sm_clock_mhz) == ("wgmma_bf16_dense_tflops", "TFLOP/s",
                                                                   [860.0, 858.0, 861.0, 859.0, 862.0], 860.0, 1600.0)
    assert r.throttle == ["sw_power_cap"] and r.remeasure().median == 800.0
    text = throughput_text.stress_rate_method(r, "sm_90", 132, H100)
    for part in ("stress_wgmma (stress_ffma.cu) on every SM: grid 132 x 256", "two deep for 10 s after 0.25 s idle",
                 "each of the 5 windows of the second half", "SM clock 1600.0 MHz", "989.4"):
        assert part in text, (part, text)
    with pytest.raises(driver_launch.KernelLaunchError, match="too few launches to read its rate"):
        tp.stress_rate(Measurement.given("c", [1600.0], unit="MHz", launch=dict(launch, rate_windows=[860.0])), "x")


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


# ----------------------------------------------------------------------------------------------
# hwtests/test_throughput_and_clocks.py end to end on the simulated GPU: record the facts, then check them


class SimCupy(SimGpu):
    """What measure.Runner and the hwtests file use of the cupy module, on a simulated GPU: 132 SMs,
    a 1 MiB L2 and 64 MiB free (so the DRAM buffers are 16 MiB of host memory), every kernel of the
    loaded cubins simulated (one loop trip: 20 us)."""

    ARGS = {"stress_ffma": (3, 1), "stress_wgmma": (3, 1), "stream_read": (4, None), "stream_read_cg": (4, None),
            "stream_copy": (4, None), "stream_write": (4, None)}

    def __init__(self):
        super().__init__(132, 1755.0, 20_000.0, real_s_per_launch=0.001)
        sim = self

        class Device:
            def __init__(self, index):
                self.index = index

            def use(self):
                return self

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class runtime:
            getDeviceCount = staticmethod(lambda: 1)
            getDeviceProperties = staticmethod(lambda i: {"maxThreadsPerMultiProcessor": 2048, "l2CacheSize": 2**20})
            memGetInfo = staticmethod(lambda: (64 * 2**20, 80 * 2**30))

        self.cuda.Device, self.cuda.runtime = Device, runtime
        self.RawModule = lambda path: SimpleNamespace(get_function=lambda name: sim.kernel(*sim.ARGS[name]))

    @staticmethod
    def get_default_memory_pool():
        return SimpleNamespace(free_all_blocks=lambda: None)


SIM_CONFTEST = '''
import sys
import pytest
import test_throughput
from pytest_gpuprops import devices

_mp = pytest.MonkeyPatch()

def pytest_configure(config):
    _mp.setitem(sys.modules, "cupy", test_throughput.SimCupy())
    _mp.setattr(devices, "gpu_unavailable_reason", lambda index=0: None)
    _mp.setattr(devices, "visible_gpu_count", lambda: 1)
    _mp.setattr(devices, "gpu_info", lambda index=0: devices.GpuInfo(
        index, "NVIDIA H100 80GB HBM3", "sm_90", 132, "580.0", "13.0", "13.0", "0000:01:00.0", 1980,
        "GPU-00000000-0000-0000-0000-000000000000", "node1"))

def pytest_unconfigure(config):
    _mp.undo()

@pytest.fixture(autouse=True, scope="module")
def _short(request):  # module scope: before the module's tensor stress fixture runs
    mp = pytest.MonkeyPatch()
    mp.setattr(request.module, "STRESS_S", 0.04)
    mp.setattr(request.module, "TENSOR_STRESS_S", 0.04)
    mp.setattr(request.module, "TENSOR_PREHEAT_S", 0.0)
    mp.setattr(request.module, "TENSOR_LAUNCHES", 5)  # each simulated launch sleeps 1 ms
    stress = request.module.tp.stress_clock  # a simulated GPU has no idle clock to wait 0.25 s for
    mp.setattr(request.module.tp, "stress_clock", lambda *a, **kw: stress(*a, **{"idle_s": 0.01, **kw}))
    yield
    mp.undo()
'''


def test_the_validation_facts_record_and_check_on_a_simulated_gpu(pytester, kernel_cache):
    pytester.makeconftest(SIM_CONFTEST)
    pytester.makepyfile(test_tp=(KERNELS.parent / "hwtests" / "test_throughput_and_clocks.py").read_text())
    # the packaged file without the H100's time-unit facts: recorded afresh, method and all (a fact the
    # facts file has keeps its reviewed method in a recording)
    packaged = (KERNELS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml").read_text()
    blocks = re.split(r"(?m)^(?=\[)", packaged)
    time_unit = re.compile(r'^\[gpus\."NVIDIA H100 80GB HBM3"\.\w+_(mhz|tflops|gbps)\]')
    (pytester.path / "sm_90.toml").write_text("".join(b for b in blocks if not time_unit.match(b)))
    common = ["-p", "no:randomly", "-p", "no:cacheprovider", "--gpuprops-kernels", str(KERNELS),
              "--gpuprops-facts", str(pytester.path / "sm_90.toml"), "--gpuprops-cache", str(kernel_cache)]
    r = pytester.runpytest_inprocess(*common, "--gpuprops-record", "rec.toml")
    r.assert_outcomes(passed=9)
    facts = tomllib.loads((pytester.path / "rec.toml").read_text())["gpus"]["NVIDIA H100 80GB HBM3"]
    assert sorted(facts) == sorted(["sustained_sm_clock_ffma_mhz", "sustained_sm_clock_tensor_mhz", "ffma_fp32_tflops",
                                    "wgmma_bf16_dense_tflops", "wgmma_e4m3_dense_tflops", "dram_read_gbps",
                                    "dram_write_gbps", "dram_copy_gbps", "l2_read_gbps"])
    assert facts["sustained_sm_clock_ffma_mhz"]["value"] == pytest.approx(1755.0, abs=0.01)
    assert facts["sustained_sm_clock_ffma_mhz"]["unit"] == "MHz"
    assert "of the H100 SXM5 80GB's 1980 MHz max SM clock" in facts["sustained_sm_clock_tensor_mhz"]["method"]
    # one loop trip every 20 us: FLOPs (bytes) of one trip / 20 us
    assert facts["ffma_fp32_tflops"]["value"] == pytest.approx(workloads.ffma_flops(528, 512, 8, 1, 64, 8) / 20e-6 / 1e12,
                                                               abs=1e-3)
    # the bf16 rate is the tensor stress's own: its windows' rates, one loop trip every 20 us
    bf16 = facts["wgmma_bf16_dense_tflops"]
    assert bf16["value"] == pytest.approx(workloads.wgmma_workload(np, None, "bf16", sms=132).work(1) / 20e-6 / 1e12, rel=1e-6)
    assert "the load of the sustained-clock stress" in bf16["method"] and "median of the windows" in bf16["method"]
    assert facts["wgmma_e4m3_dense_tflops"]["unit"] == "TFLOP/s"
    assert "of the H100 SXM5 80GB datasheet's 1978.9 TFLOP/s" in facts["wgmma_e4m3_dense_tflops"]["method"]
    assert facts["dram_copy_gbps"]["value"] == pytest.approx(2 * 16 * 2**20 / 20e-6 / 1e9, abs=1e-3)
    assert "two 16 MiB buffers" in facts["dram_copy_gbps"]["method"]
    assert facts["dram_write_gbps"]["value"] == pytest.approx(16 * 2**20 / 20e-6 / 1e9, abs=1e-3)
    r = pytester.runpytest_inprocess(*common, "--gpuprops-facts", "rec.toml")
    r.assert_outcomes(passed=9)
