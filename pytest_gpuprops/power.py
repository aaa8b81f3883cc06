"""measure layer, whole GPU: the power a load draws, beside the SM clock it sustains (throughput.py).

Why: the tensor cores' power depends on the data they switch. Luo et al. (arXiv 2501.12084) measure
Hopper's wgmma power with zero against random operands; on an H100 SXM a dense bf16 wgmma stress with
random data runs at the 700 W power limit and the clock it sustains is the capped one
(sustained_sm_clock_tensor_mhz), so the same instructions on all-zero data should draw less, at a
higher clock. The facts say how much, per GPU model (hwtests/test_throughput_and_clocks.py: the
random-operand power is the sustained tensor clock's own stress, the zero-operand stress runs after
every tensor-stress fact of the file).

Method. A stress (:func:`throughput.stress_clock`: launches kept two deep for ``duration_s``, the clock
from every block's own stamps) runs with NVML sampled every ``period_s`` (10 ms here) by
:class:`EnergyRecorder`, which reads NVML's total energy counter (nvmlDeviceGetTotalEnergyConsumption,
mJ) and its power reading (nvmlDeviceGetPowerUsage, mW) at each clock sample. The counter moves in
steps (every few to tens of ms); a step is seen at the first sample after it, so a power over a span
is the energy between the counter's readings at its ends, each read between the steps seen on either
side (:func:`window_powers_w`): its error is at most a sampling period at each end, 1 % of a 1-s window
at 10 ms, and does not depend on how NVML averages its power reading. The power facts' values are the
powers of the same 5 windows of the sustained part (``sustained_from_s`` to ``duration_s``) whose
kernel-side clock means are the sustained clock's values: power and clock over the same launches. The
reading is their mean, the power over the whole sustained part: under a power cap the limiter swings
the power about once a second, so one window's share of the swing moves its power by 1-2 % while the
span's repeats within 0.2 % on one unit.
NVML's power reading (a mean of its samples in each window) is recorded beside it as a cross-check.

The arithmetic (no GPU in it) is tested with given numbers in tests/test_power.py.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Callable, Sequence

from . import devices
from .measurement import Measurement

#: NVML sampled this often during a power stress: a counter step is seen at most this late
PERIOD_S = 0.01
#: the sustained part's windows (as clocks.window_means splits the clock)
POWER_WINDOWS = 5
#: the power windows may differ by this much before the reading is NOISY (the clock's CLOCK_NOISE)
POWER_NOISE = 0.02

#: (monotonic seconds, energy counter mJ or None, power reading mW or None)
Sample = tuple[float, int | None, int | None]


class EnergyRecorder:
    """A :class:`clocks.ClockSampler` read (``read_clock() -> (reasons, MHz)``, returned unchanged) that
    also records ``read_energy() -> (energy mJ or None, power mW or None)`` with the time of each call,
    so the power samples share the clock samples' times."""

    def __init__(self, read_clock: Callable, read_energy: Callable[[], tuple[int | None, int | None]]):
        self.read_clock, self.read_energy = read_clock, read_energy
        self.samples: list[Sample] = []

    def __call__(self):
        t = time.monotonic()
        try:
            energy, power = self.read_energy()
        except Exception:  # NVML went away mid-run: no energy sample; the clock's read decides the rest
            energy, power = None, None
        self.samples.append((t, energy, power))
        return self.read_clock()


def energy_steps(samples: Sequence[Sample]) -> list[tuple[float, int]]:
    """(time, mJ) of each sample where the energy counter had moved since the previous reading: the
    first sight of each step (the first reading is left out: when its step came is unknown). A counter
    that goes back is an error (NVML's counter only grows while the driver stays loaded)."""
    out, last = [], None
    for t, energy, _ in samples:
        if energy is None:
            continue
        if last is not None and energy < last:
            raise ValueError(f"the energy counter went back from {last} to {energy} mJ at {t:.3f} s")
        if last is not None and energy != last:
            out.append((t, int(energy)))
        last = energy
    return out


def span_power_w(steps: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """The mean power in [start, end], in W: the energy between the first and last counter steps seen in
    it over the time between them. A ValueError with fewer than two steps there."""
    inside = [(t, e) for t, e in steps if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        raise ValueError(f"{len(inside)} energy counter steps in {start:.3f} .. {end:.3f} s: two or more are needed "
                         "(NVML sampled too slowly for this window, or its counter did not move)")
    (t0, e0), (t1, e1) = inside[0], inside[-1]
    return (e1 - e0) / 1e3 / (t1 - t0)


def windows(start: float, end: float, count: int = POWER_WINDOWS) -> list[tuple[float, float]]:
    """``count`` equal consecutive windows of [start, end]."""
    if count < 1 or end <= start:
        raise ValueError(f"windows of {start} .. {end} s, {count} of them: expected end > start and count >= 1")
    width = (end - start) / count
    return [(start + k * width, start + (k + 1) * width) for k in range(count)]


def energy_at(steps: Sequence[tuple[float, int]], t: float) -> tuple[float, float]:
    """(time, mJ) of the energy counter at ``t``, read between the steps seen on either side of it
    (linear between them); clamped to the first or last step where ``t`` lies outside them. A
    ValueError with fewer than two steps."""
    if len(steps) < 2:
        raise ValueError(f"{len(steps)} energy counter steps: two or more are needed (NVML sampled too slowly, "
                         "or its counter did not move)")
    if t <= steps[0][0]:
        return float(steps[0][0]), float(steps[0][1])
    if t >= steps[-1][0]:
        return float(steps[-1][0]), float(steps[-1][1])
    i = bisect.bisect_right([st for st, _ in steps], t)
    (t0, e0), (t1, e1) = steps[i - 1], steps[i]
    return t, e0 + (e1 - e0) * (t - t0) / (t1 - t0)


def window_powers_w(steps: Sequence[tuple[float, int]], start: float, end: float,
                    count: int = POWER_WINDOWS) -> list[float]:
    """The mean power of each of ``count`` equal windows of [start, end], in W: the counter's energy at
    the window's ends (:func:`energy_at`) over its time. Neighbouring windows share their boundary, so
    the windows' mean is the whole span's power. Windows bounded by the first and last step seen
    inside each (as :func:`span_power_w`) left the step across each boundary out, and under the H100's
    700 W cap, whose limiter swings the power about once a second, read 1-3 % above the span: 699-719 W
    against 700.0-701.2 (GPU-aba34808, four processes, 2026-11-26, docs/results.md)."""
    bounds = [energy_at(steps, a) for a, _ in windows(start, end, count)] + [energy_at(steps, end)]
    out = []
    for (t0, e0), (t1, e1) in zip(bounds, bounds[1:]):
        if t1 <= t0:
            raise ValueError(f"a power window of {t0:.3f} .. {t1:.3f} s has no energy counter step in reach: NVML "
                             "sampled too slowly for this window, or its counter did not move")
        out.append((e1 - e0) / 1e3 / (t1 - t0))
    return out


def reading_power_w(samples: Sequence[Sample], start: float, end: float) -> float | None:
    """The mean of NVML's power readings (mW) sampled in [start, end], in W; None when there are none."""
    mw = [p for t, _, p in samples if p is not None and start <= t <= end]
    return statistics.fmean(mw) / 1e3 if mw else None


def step_period_s(steps: Sequence[tuple[float, int]]) -> float | None:
    """How often the counter was seen to move: the median time between steps (None below two)."""
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:])]
    return statistics.median(gaps) if gaps else None


def power_reading(samples: Sequence[Sample], *, mark: float, from_s: float, end_s: float,
                  count: int = POWER_WINDOWS) -> dict:
    """What a stress's NVML samples say about its power over [``from_s``, ``end_s``] after ``mark`` (the
    monotonic time its first launch was queued): the windows' powers from the energy counter, the whole
    span's, NVML's power reading over the same windows, how often the counter moved, and the counter's
    steps in the span as seen (``energy_step_series``: [s after the mark, mJ]), so that a report can be
    read again by another window rule (under the H100's 700 W cap the 1-s windows read 1-5 % above the
    whole span, docs/results.md)."""
    rel = [(t - mark, e, p) for t, e, p in samples]
    steps = energy_steps(rel)
    spans = windows(from_s, end_s, count)
    return {"window_power_w": [round(w, 2) for w in window_powers_w(steps, from_s, end_s, count)],
            "span_power_w": round(span_power_w(steps, from_s, end_s), 2),
            "energy_step_series": [[round(t, 4), e] for t, e in steps if from_s <= t <= end_s],
            "reading_power_w": [None if (r := reading_power_w(rel, a, b)) is None else round(r, 2) for a, b in spans],
            "energy_step_period_s": None if (p := step_period_s(steps)) is None else round(p, 4),
            "energy_steps": len(steps), "power_from_s": from_s, "power_to_s": end_s}


def power_measurement(clock: Measurement, samples: Sequence[Sample], name: str,
                      power_limit_w: float | None = None) -> Measurement:
    """The power fact of a stress whose clock is ``clock`` (:func:`throughput.stress_clock`, run with an
    :class:`EnergyRecorder` as its read): the 5 window powers as values and their mean (the span's
    energy over its time) as the reading, the sustained clock of the same
    windows as its SM clock; the clock's record (less its per-bin series), the power fields and the GPU's
    enforced ``power_limit_w`` (where NVML gave it: whether the power was held at the cap) in ``launch``."""
    ln = dict(clock.launch)
    mark = ln.pop("nvml_mark_monotonic_s", None)
    if mark is None:
        raise ValueError(f"{clock.name}: the stress recorded no NVML mark (throughput.stress_clock's "
                         "nvml_mark_monotonic_s): its power samples cannot be placed in its windows")
    from_s = ln.get("sustained_from_s")
    from_s = ln["duration_s"] / 2 if from_s is None else from_s
    fields = power_reading(samples, mark=mark, from_s=from_s, end_s=ln["duration_s"])
    kernel_clock = ln.get("kernel_clock") or {}
    return Measurement(name=name, unit="W", values=fields["window_power_w"], center="mean", stop_reason="time budget",
                       noise_target=POWER_NOISE, overhead_cycles=0.0, sm_clock_mhz=clock.sm_clock_mhz,
                       throttle=list(clock.throttle), kernel=clock.kernel,
                       launch=dict(ln, series_mhz=[], window_clock_mhz=kernel_clock.get("windows_mhz"), **fields,
                                   **({} if power_limit_w is None else {"power_limit_w": round(power_limit_w, 3)})))


def nvml_energy_reader(info: devices.GpuInfo) -> Callable[[], tuple[int | None, int | None]]:  # pragma: no mutate block  (GPU only)
    """NVML's (total energy mJ, power mW) of the GPU ``info``; (None, None) where NVML is absent."""
    nvml, handle = devices._nvml_handle(info.pci_bus_id)

    def read():
        if handle is None:
            return None, None
        energy = power = None
        try:
            energy = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception:
            pass
        try:
            power = int(nvml.nvmlDeviceGetPowerUsage(handle))
        except Exception:
            pass
        return energy, power
    return read


def nvml_power_limit_w(info: devices.GpuInfo) -> float | None:  # pragma: no mutate block  (GPU only)
    """The GPU's enforced power limit (NVML nvmlDeviceGetEnforcedPowerLimit, W); None where NVML cannot say."""
    nvml, handle = devices._nvml_handle(info.pci_bus_id)
    if handle is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1e3
    except Exception:
        return None


class EnergyStress:
    """One stress's clock measurement (:func:`throughput.stress_clock`) and the NVML energy samples
    taken beside it (:class:`EnergyRecorder`): the clock fact reads ``clock``, the power fact
    :meth:`power` of the same samples, so clock, rate and power come from the same launches. ``rerun``
    runs the stress again (a failing fact's confirmation)."""

    def __init__(self, clock: Measurement, samples: Sequence[Sample], rerun: Callable[[], EnergyStress],
                 power_limit_w: float | None = None):
        self.clock, self.samples, self.rerun, self.power_limit_w = clock, list(samples), rerun, power_limit_w

    def power(self, name: str) -> Measurement:
        """The stress's power over its clock's windows (:func:`power_measurement`), beside the GPU's enforced
        power limit; measured again, it runs the stress again. A ValueError where the energy counter cannot
        give it."""
        m = power_measurement(self.clock, self.samples, name, self.power_limit_w)
        m.remeasure = lambda: self.rerun().power(name)
        return m


#: a stress that starts from a thermal state waits at most this long for the GPU to cool to it (an H100 fell
#: from 61-67 to 42-55 degrees C in the ~10 s between the tensor stress and the zero-operand one, 2026-11-26)
COOL_TIMEOUT_S = 20.0


def cool_down(temperature: Callable[[], int | None], at_most_c: float, *, timeout_s: float = COOL_TIMEOUT_S,
              poll_s: float = 0.2, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> dict:
    """Wait until the GPU's temperature (``temperature()``, degrees C) is at most ``at_most_c``, or
    ``timeout_s`` has passed: a power below the cap rises with the temperature its stress starts from
    (unit_compare.SAME_START_TEMPERATURE_C), so a stress that follows a hotter one starts from one state
    run after run instead of from however far the GPU had cooled. What happened goes to the report: the
    target, the seconds waited, the temperature reached and whether it was reached (a GPU that stays
    hotter is measured anyway, its reading compared as unit_compare.near_state allows)."""
    t0 = clock()
    while True:
        now_c = temperature()
        waited = clock() - t0
        if now_c is None or now_c <= at_most_c or waited >= timeout_s:
            return dict(at_most_c=at_most_c, waited_s=round(waited, 2), temperature_c=now_c,
                        reached=now_c is not None and now_c <= at_most_c)
        sleep(poll_s)


def energy_stress(cp, wl, *, clock_name: str, info: devices.GpuInfo, duration_s: float, sustained_from_s: float,
                  period_s: float = PERIOD_S,
                  start_at_most_c: float | None = None) -> EnergyStress:  # pragma: no mutate block  (GPU only)
    """``wl``'s sustained clock (:func:`throughput.stress_clock`) with NVML's energy counter sampled
    beside it every ``period_s``: one stress, its clock and (:meth:`EnergyStress.power`) its power over
    the same windows. The clock does not depend on the counter: a GPU without one still has its clock.
    ``start_at_most_c``: the stress starts once the GPU has cooled to that temperature (:func:`cool_down`),
    measured again too."""
    from . import throughput
    from .clocks import nvml_reader
    recorder = EnergyRecorder(nvml_reader(info), nvml_energy_reader(info))
    settle = None if start_at_most_c is None else (lambda temperature: cool_down(temperature, start_at_most_c))
    clock = throughput.stress_clock(cp, wl, name=clock_name, info=info, duration_s=duration_s, read=recorder,
                                    period_s=period_s, sustained_from_s=sustained_from_s, settle=settle)

    def again() -> EnergyStress:
        return energy_stress(cp, wl, clock_name=clock_name, info=info, duration_s=duration_s,
                             sustained_from_s=sustained_from_s, period_s=period_s, start_at_most_c=start_at_most_c)
    clock.remeasure = lambda: again().clock
    return EnergyStress(clock, recorder.samples, again, nvml_power_limit_w(info))
