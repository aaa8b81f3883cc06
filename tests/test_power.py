"""Power from NVML's energy counter (pytest_gpuprops/power.py): the arithmetic with given numbers, a
stress's power read over its sustained windows on a simulated GPU with a simulated counter, and the
power facts judged (the right value passes, a planted wrong one fails, a 10 % change is caught)."""

from __future__ import annotations

import time

import pytest
from test_throughput import INFO, SimGpu

from pytest_gpuprops import assertions as A
from pytest_gpuprops import power, workloads
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.measure import Measurement


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))


def counter(watts: float, t0: float, period_s: float, until: float, dt: float = 0.01):
    """Samples every ``dt`` s from ``t0`` of a counter that steps every ``period_s`` by ``watts``
    x period_s (in mJ), and a power reading of ``watts`` (mW)."""
    out, t = [], t0
    while t <= until + 1e-9:
        steps = int((t - t0) / period_s + 1e-9)
        out.append((t, 1_000_000 + round(steps * watts * period_s * 1e3), round(watts * 1e3)))
        t += dt
    return out


# ----------------------------------------------------------------------------------------------
# the arithmetic, given numbers


def test_energy_steps_keep_the_first_sight_of_each_step():
    samples = [(0.00, 1000, 1), (0.01, 1000, 1), (0.02, 1005, 1), (0.03, None, None), (0.04, 1005, 1), (0.05, 1012, 1)]
    # the first reading is left out (when its step came is unknown); a sample without a reading is skipped
    assert power.energy_steps(samples) == [(0.02, 1005), (0.05, 1012)]
    with pytest.raises(ValueError, match="went back from 1012 to 1001 mJ at 0.060 s"):
        power.energy_steps(samples + [(0.06, 1001, 1)])


def test_span_power_is_the_energy_between_the_first_and_last_steps_over_their_time():
    steps = [(0.5, 0), (1.0, 100_000), (1.5, 450_000), (2.0, 800_000), (2.5, 2_000_000)]
    # in 1 .. 2 s: 700 000 mJ over 1 s
    assert power.span_power_w(steps, 1.0, 2.0) == pytest.approx(700.0)
    assert power.span_power_w(steps, 0.9, 1.6) == pytest.approx(700.0)  # 350 J over 0.5 s
    with pytest.raises(ValueError, match="1 energy counter steps in 1.100 .. 1.600 s: two or more are needed"):
        power.span_power_w(steps, 1.1, 1.6)


def test_windows_split_the_span_equally():
    assert power.windows(1.0, 6.0) == [(1.0, 2.0), (2.0, 3.0), (3.0, 4.0), (4.0, 5.0), (5.0, 6.0)]
    assert power.windows(0.0, 1.0, 2) == [(0.0, 0.5), (0.5, 1.0)]
    for bad in ((2.0, 1.0, 5), (0.0, 1.0, 0)):
        with pytest.raises(ValueError):
            power.windows(*bad)


def test_window_powers_of_a_steady_counter_are_its_power_within_a_sampling_period():
    # a counter stepping every 20 ms at 700 W, sampled every 10 ms: each 1-s window within 1 % (10 ms of 1 s)
    steps = power.energy_steps(counter(700.0, 0.0, 0.02, 6.5))
    got = power.window_powers_w(steps, 1.0, 6.0)
    assert len(got) == 5 and all(v == pytest.approx(700.0, rel=0.01) for v in got)
    assert power.step_period_s(steps) == pytest.approx(0.02, abs=1e-6)
    assert power.step_period_s(steps[:1]) is None


def test_window_powers_follow_a_change_of_power():
    # 400 W for 3 s, then 700 W: the windows before and after the change read each
    first = counter(400.0, 0.0, 0.02, 3.0)
    e3 = first[-1][1]
    second = [(t, e3 + e - 1_000_000, p) for t, e, p in counter(700.0, 3.0, 0.02, 6.0)][1:]
    got = power.window_powers_w(power.energy_steps(first + second), 0.5, 5.5)
    assert got[0] == pytest.approx(400.0, rel=0.01) and got[1] == pytest.approx(400.0, rel=0.01)
    assert got[3] == pytest.approx(700.0, rel=0.01) and got[4] == pytest.approx(700.0, rel=0.01)


def test_reading_power_is_the_mean_of_nvml_readings_in_the_span():
    samples = [(0.5, 1, 600_000), (1.0, 2, 690_000), (1.5, 3, None), (2.0, 4, 710_000), (2.5, 5, 800_000)]
    assert power.reading_power_w(samples, 1.0, 2.0) == pytest.approx(700.0)
    assert power.reading_power_w(samples, 3.0, 4.0) is None


def test_power_reading_places_the_samples_after_the_mark():
    mark = 1000.0
    samples = [(mark + t, e, p) for t, e, p in counter(650.0, -0.25, 0.02, 6.1)]
    fields = power.power_reading(samples, mark=mark, from_s=1.0, end_s=6.0)
    assert fields["window_power_w"] == [pytest.approx(650.0, rel=0.01)] * 5
    assert fields["span_power_w"] == pytest.approx(650.0, rel=0.002)
    assert fields["reading_power_w"] == [650.0] * 5
    assert fields["energy_step_period_s"] == pytest.approx(0.02, abs=1e-4)
    assert (fields["power_from_s"], fields["power_to_s"]) == (1.0, 6.0) and fields["energy_steps"] > 250
    # the counter's steps in the span as seen, enough to read the span's power again from the report
    series = fields["energy_step_series"]
    assert 1.0 <= series[0][0] < 1.03 and 5.97 < series[-1][0] <= 6.0 and len(series) >= 249
    assert power.span_power_w([tuple(p) for p in series], 1.0, 6.0) == pytest.approx(fields["span_power_w"], abs=0.01)


CLOCK_LAUNCH = {"kernel": "stress_wgmma", "source": "stress_ffma.cu", "kind": "wgmma_bf16_zero", "grid": 132,
                "block": 256, "launch_s": 0.05, "duration_s": 6.0, "idle_s": 0.25, "sustained_from_s": 1.0,
                "period_s": 0.01, "sms_covered": 132, "series_mhz": [(0.005, 1980.0)] * 3,
                "kernel_clock": {"windows_mhz": [1980.0, 1979.0, 1980.0, 1981.0, 1980.0]}}


def _clock(mark: float | None = 1000.0, **launch) -> Measurement:
    ln = dict(CLOCK_LAUNCH, **launch)
    if mark is not None:
        ln["nvml_mark_monotonic_s"] = mark
    return Measurement.given("sustained_sm_clock_tensor_zero_operand_mhz", [1980.0, 1979.0, 1980.0, 1981.0, 1980.0],
                             unit="MHz", sm_clock_mhz=1980.0, throttle=[], launch=ln)


def test_power_measurement_is_the_windows_power_at_the_clock_of_the_same_windows():
    samples = [(1000.0 + t, e, p) for t, e, p in counter(450.0, -0.25, 0.02, 6.1)]
    m = power.power_measurement(_clock(), samples, "wgmma_bf16_zero_operand_power_w")
    assert (m.name, m.unit, m.noise_target, m.sm_clock_mhz) == ("wgmma_bf16_zero_operand_power_w", "W",
                                                                 power.POWER_NOISE, 1980.0)
    assert m.values == [pytest.approx(450.0, rel=0.01)] * 5 and m.median == pytest.approx(450.0, rel=0.01)
    assert m.launch["window_clock_mhz"] == [1980.0, 1979.0, 1980.0, 1981.0, 1980.0]
    assert m.launch["series_mhz"] == [] and "nvml_mark_monotonic_s" not in m.launch
    assert m.launch["kind"] == "wgmma_bf16_zero" and m.launch["span_power_w"] == pytest.approx(450.0, rel=0.002)
    # no sustained_from_s: the second half, as the clock is read
    half = power.power_measurement(_clock(sustained_from_s=None), samples, "p")
    assert half.launch["power_from_s"] == 3.0
    with pytest.raises(ValueError, match="recorded no NVML mark"):
        power.power_measurement(_clock(mark=None), samples, "p")
    with pytest.raises(ValueError, match="energy counter steps"):  # NVML gave no energy: no power
        power.power_measurement(_clock(), [(1000.0 + t, None, p) for t, _, p in samples], "p")


def test_energy_recorder_passes_the_clock_on_and_keeps_the_energy_with_its_time():
    readings = iter([(5000, 700_000), RuntimeError("NVML gone")])

    def energy():
        r = next(readings)
        if isinstance(r, Exception):
            raise r
        return r
    rec = power.EnergyRecorder(lambda: (["sw_power_cap"], 1590), energy)
    before = time.monotonic()
    assert rec() == (["sw_power_cap"], 1590) and rec() == (["sw_power_cap"], 1590)
    assert [s[1:] for s in rec.samples] == [(5000, 700_000), (None, None)]
    assert before <= rec.samples[0][0] <= rec.samples[1][0] <= time.monotonic()


# ----------------------------------------------------------------------------------------------
# judged as facts: the right value passes, a planted wrong one fails, 10 % is caught

ZERO_POWER = Fact(name="wgmma_bf16_zero_operand_power_w", arch="sm_90", unit="W", method="energy counter",
                  source="given", value=450.0, tolerance_rel=0.03, scope="gpu", gpu="NVIDIA H100 80GB HBM3")


def _power(watts: float) -> Measurement:
    return Measurement.given("wgmma_bf16_zero_operand_power_w", [watts] * 5, unit="W", noise_target=power.POWER_NOISE,
                             stop_reason="time budget")


def test_a_power_fact_passes_its_value_and_a_planted_wrong_expectation_fails():
    assert A.evaluate(ZERO_POWER, _power(452.0)).status == A.PASS
    planted = Fact(**{**ZERO_POWER.__dict__, "value": 700.0})  # the random-operand power, planted as the zero one's
    v = A.evaluate(planted, _power(452.0))
    assert v.status == A.FAIL
    with pytest.raises(A.FactMismatch, match="wgmma_bf16_zero_operand_power_w"):
        A.raise_for(v)


@pytest.mark.parametrize("change", [0.9, 1.1])
def test_a_ten_percent_change_of_power_fails(change):
    assert A.evaluate(ZERO_POWER, _power(450.0 * change)).status == A.FAIL


# ----------------------------------------------------------------------------------------------
# a stress on a simulated GPU, its counter simulated


@pytest.fixture
def no_idle_wait(monkeypatch):
    """The stress's wait before its first launch (0.25 s, for a real GPU to settle at its idle clock) cut
    to 0.01 s, as test_throughput_facts_simulated.py does: a simulated GPU has no idle clock to wait for."""
    from pytest_gpuprops import throughput
    stress = throughput.stress_clock
    monkeypatch.setattr(throughput, "stress_clock", lambda cp, wl, **kw: stress(cp, wl, **{"idle_s": 0.01, **kw}))


def test_energy_stress_reads_clock_and_power_from_one_stress_on_a_simulated_gpu(monkeypatch, no_idle_wait):
    gpu = SimGpu(4, 1980.0, 10_000.0, real_s_per_launch=0.004)
    wl = workloads.wgmma_workload(gpu, gpu.kernel(3, 1), "bf16", sms=4, zero_operands=True)
    assert wl.kind == "wgmma_bf16_zero" and wl.defines["ZERO_OPERANDS"] == 1
    t0 = time.monotonic()
    # a counter at 480 W that steps every 1 ms: (mJ, mW) at the time it is read
    monkeypatch.setattr(power, "nvml_energy_reader",
                        lambda info: lambda: (int((time.monotonic() - t0) / 0.001) * 480, 480_000))
    stress = power.energy_stress(gpu, wl, clock_name="sustained_sm_clock_tensor_zero_operand_mhz", info=INFO,
                                 duration_s=0.3, sustained_from_s=0.05)
    clock, launched = stress.clock, gpu.launches
    assert clock.median == pytest.approx(1980.0) and clock.launch["sms_covered"] == 4
    assert clock.launch["period_s"] == power.PERIOD_S and launched > 0
    p = stress.power("wgmma_bf16_zero_operand_power_w")
    # the power is read from the stress's samples: nothing more is launched
    assert gpu.launches == launched
    assert p.unit == "W" and len(p.values) == 5 and p.median == pytest.approx(480.0, rel=0.15)
    assert p.launch["span_power_w"] == pytest.approx(480.0, rel=0.05)
    assert p.launch["reading_power_w"] == [480.0] * 5 and p.sm_clock_mhz == clock.sm_clock_mhz
    assert p.launch["window_clock_mhz"] == clock.launch["kernel_clock"]["windows_mhz"]
    assert (p.launch["power_from_s"], p.launch["power_to_s"]) == (0.05, 0.3)
    assert p.launch["launches"] == clock.launch["launches"]
    # measured again (a failing fact's confirmation), the power runs the stress once more, and so does the clock
    again = p.remeasure()
    assert again.unit == "W" and gpu.launches > launched
    launched = gpu.launches
    assert clock.remeasure().name == "sustained_sm_clock_tensor_zero_operand_mhz" and gpu.launches > launched


def test_energy_stress_without_an_energy_counter_keeps_its_clock_and_says_why_there_is_no_power(monkeypatch,
                                                                                               no_idle_wait):
    gpu = SimGpu(4, 1980.0, 10_000.0, real_s_per_launch=0.004)
    wl = workloads.wgmma_workload(gpu, gpu.kernel(3, 1), "bf16", sms=4)
    assert wl.kind == "wgmma_bf16" and "ZERO_OPERANDS" not in wl.defines
    monkeypatch.setattr(power, "nvml_energy_reader", lambda info: lambda: (None, None))
    stress = power.energy_stress(gpu, wl, clock_name="c", info=INFO, duration_s=0.3, sustained_from_s=0.1)
    assert stress.clock.median == pytest.approx(1980.0)
    with pytest.raises(ValueError, match="0 energy counter steps"):
        stress.power("p")


def test_energy_stress_power_is_its_samples_over_its_clock_windows():
    """EnergyStress.power with given samples: power_measurement of the stress's own clock, and its
    remeasure the rerun's power."""
    samples = [(1000.0 + t, e, p) for t, e, p in counter(700.0, -0.25, 0.02, 6.1)]
    reruns = []

    def rerun():
        reruns.append(1)
        return power.EnergyStress(_clock(), [(1000.0 + t, e, p) for t, e, p in counter(690.0, -0.25, 0.02, 6.1)], rerun)
    stress = power.EnergyStress(_clock(), samples, rerun)
    m = stress.power("wgmma_bf16_random_operand_power_w")
    assert m.values == [pytest.approx(700.0, rel=0.01)] * 5 and not reruns
    assert m.launch["window_clock_mhz"] == stress.clock.launch["kernel_clock"]["windows_mhz"]
    assert m.remeasure().median == pytest.approx(690.0, rel=0.01) and reruns == [1]
    assert "power_limit_w" not in m.launch  # NVML gave no limit: none said
    capped = power.EnergyStress(_clock(), samples, rerun, power_limit_w=700.0).power("p")
    assert capped.launch["power_limit_w"] == 700.0 and capped.values == m.values


def test_windows_under_the_power_cap_share_their_boundaries_and_their_mean_is_the_span():
    """The H100's 700 W limiter swings the power about once a second (steps of 0.1 s read 586-799 W). Windows
    bounded by the first and last step inside each left a step out at each boundary and read 699-711 W, 1.4 %
    over the span's 701.2 at the median; windows that share their boundaries read around it, and their mean is it."""
    import json
    from pathlib import Path
    rec = json.loads((Path(__file__).parent / "golden" / "h100_power_steps.json").read_text())
    steps = [(t, e) for t, e in rec["energy_step_series"]]
    start, end = rec["power_from_s"], rec["power_to_s"]
    old = [power.span_power_w(steps, a, b) for a, b in power.windows(start, end)]
    assert old == pytest.approx(rec["old_window_power_w"], abs=0.1)  # the series' times are rounded to 0.1 ms
    got = power.window_powers_w(steps, start, end)
    assert [round(w, 1) for w in got] == [708.8, 695.3, 703.8, 693.8, 705.3]
    assert sum(got) / 5 == pytest.approx(power.span_power_w(steps, start, end), abs=0.3)
    assert sum(got) / 5 == pytest.approx(rec["span_power_w"], abs=0.3)
    # the reading is the windows' mean: 701.4 W here, where the median of the old windows read 709.3
    m = Measurement.given(rec["fact"], got, unit="W", center="mean")
    assert m.reading == pytest.approx(701.4, abs=0.05) and m.median == pytest.approx(703.8, abs=0.05)


def test_the_counter_between_steps_is_read_on_the_line_between_them_and_clamped_outside():
    steps = [(1.0, 1000), (1.1, 1070), (1.2, 1140)]
    assert power.energy_at(steps, 1.05) == (1.05, pytest.approx(1035.0))
    assert power.energy_at(steps, 0.5) == (1.0, 1000.0) and power.energy_at(steps, 9.0) == (1.2, 1140.0)
    with pytest.raises(ValueError, match="two or more are needed"):
        power.energy_at(steps[:1], 1.0)
    with pytest.raises(ValueError, match="no energy counter step in reach"):
        power.window_powers_w(steps, 2.0, 3.0)


class FakeTime:
    """A clock that the sleeps move: cool_down's waits without waiting."""

    def __init__(self):
        self.now, self.sleeps = 100.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_cool_down_waits_until_the_gpu_is_at_most_the_target_temperature():
    t, temps = FakeTime(), iter([50, 48, 46, 45, 44])
    got = power.cool_down(lambda: next(temps), 45, timeout_s=20.0, poll_s=0.2, clock=t.clock, sleep=t.sleep)
    assert got == dict(at_most_c=45, waited_s=0.6, temperature_c=45, reached=True)
    assert t.sleeps == [0.2, 0.2, 0.2]


def test_cool_down_starts_at_once_on_a_gpu_already_cool_enough_or_without_a_temperature():
    t = FakeTime()
    assert power.cool_down(lambda: 40, 45, clock=t.clock, sleep=t.sleep) == dict(
        at_most_c=45, waited_s=0.0, temperature_c=40, reached=True)
    assert power.cool_down(lambda: None, 45, clock=t.clock, sleep=t.sleep) == dict(
        at_most_c=45, waited_s=0.0, temperature_c=None, reached=False)
    assert t.sleeps == []


def test_cool_down_gives_up_after_its_timeout_and_says_the_target_was_not_reached():
    t = FakeTime()
    got = power.cool_down(lambda: 52, 45, timeout_s=1.0, poll_s=0.25, clock=t.clock, sleep=t.sleep)
    assert got == dict(at_most_c=45, waited_s=1.0, temperature_c=52, reached=False)
    assert len(t.sleeps) == 4
