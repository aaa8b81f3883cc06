"""results layer: a unit against its own baseline. A fact that moved by more than its same-unit band
since a baseline run on the same GPU (same UUID) is MOVED; the compare takes like with like: the same
method (the facts entry's text), the same SM clock state where the unit has run in several, a rate of SM
work scaled by the two clocks, a latency whose path leaves the SM scaled half way with its band widened by
the other half (the clock read beside it), a power below the cap in a near state (a clock within 2 %, a stress begun
within 6 degrees C) in a band widened for the difference, on the temperature's side only (docs/method.md,
"the unit's own baseline").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from . import ceilings
from .assertions import Verdict
from .results import MOVED, _baseline_reading, gpu_key, gpu_label, run_key


def same_unit_band(v: Verdict, base: float) -> float:
    """How far a unit's reading may move from its own baseline reading ``base``: the fact's same-unit
    band where it has one (a fraction of ``base``), else the fact's tolerance."""
    if v.same_unit_tolerance_rel:
        return v.same_unit_tolerance_rel * abs(base)
    return float(v.tolerance)


#: two readings of one unit whose SM clocks are this close ran in the same clock state. An H100 runs a
#: process at 1980 or at 1995 MHz, and some facts differ between the two states by more than a unit
#: repeats within one (L2 read bandwidth ~2 % lower at 1995 MHz; memory latencies in cycles follow the clock)
SAME_CLOCK = 0.004


#: units of facts that follow the SM clock's state but not in proportion to it: a reading in another state
#: than every baseline reading is no like-for-like compare (H200 GPU-d94475a2, 2026-11-26: zero-operand tensor
#: power 281.7-282.2 W in the processes that ran at 1725 MHz, 287.8-288.1 W at 1740 MHz, +2 % for +0.9 %)
CLOCK_STATE_UNITS = ("W",)

#: two readings of a power below the power cap ran in the same thermal state when their stresses began this
#: close in temperature (NVML, whole degrees C). Such a power rises with the die's temperature at the stress's
#: start: GPU-b842806c 313.9 W from 48 degrees C, 320.8-323.1 from 51-53; GPU-2b139b2f 310.6-311.1 from 41,
#: 319.4 from 44; GPU-17718160 310.0 from 42, 315.0 from 49 (H100s, 2026-11-26), while some units stay flat
#: (GPU-9eaba352 311.9 / 311.7 from 48 / 53). Within 2 degrees and one clock state the H100 readings of
#: 2026-11-24..26 (27 units) differ by at most 2.1 %, a step some units take at one temperature (GPU-e4fcac46
#: 309.6 and 315.8 W, both from 41 degrees C): inside the fact's 3 % same-unit band. A power held at the cap
#: (sw_power_cap: the random-operand stress at 700 W) is set by the cap and takes every thermal state as one
SAME_START_TEMPERATURE_C = 2


def start_temperature_c(v: Verdict) -> float | None:
    """The GPU's temperature (NVML, degrees C) when the stress a verdict's measurement read began, where
    it was recorded (throughput.stress_clock's ``launch.temperature_c``)."""
    temps = ((v.measurement or {}).get("launch") or {}).get("temperature_c")
    return temps[0] if isinstance(temps, list) and temps and isinstance(temps[0], (int, float)) else None


def _clock(value) -> float | None:
    """A clock (MHz) as a stored reading holds it, where it holds one: a positive number."""
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def reading_clock(v: Verdict) -> float | None:
    """The SM clock a verdict's measurement ran at (MHz), where it was read: the clock read beside its
    launches where it was (:func:`clock_beside`), else the one its measurement recorded."""
    return clock_beside(v) or _clock((v.measurement or {}).get("sm_clock_mhz"))


def clock_beside(v: Verdict) -> float | None:
    """The SM clock read just before and after a verdict's launches (MHz; KernelSpec.clock_beside: a latency
    whose path leaves the SM), where it was."""
    return _clock(((v.measurement or {}).get("launch") or {}).get("clock_beside_mhz"))


#: a latency whose path leaves the SM (its build reads the clock beside its launches) counts SM cycles for only
#: part of the way: from the H100's 1995 MHz state to its 1980 one the DRAM chase read -0.49 / -0.81 % (the
#: clocks' ratio -0.76 %), the L2 hits' latencies -0.2 to -0.6 % (GPU-1d74b276, three processes, 2026-11-27). A
#: baseline read beside another clock state is scaled by the clocks' ratio to this exponent, the band widened
#: by it x the clocks' relative difference on both sides: any share between none of the path and all of it
PARTLY_CLOCKED_EXPONENT = 0.5


def partly_clocked(old: Verdict, new: Verdict) -> bool:
    """Whether two cycle readings of a fact read the clock beside their launches in other clock states
    (:data:`SAME_CLOCK`): the baseline is then compared at the new reading's clock
    (:data:`PARTLY_CLOCKED_EXPONENT`). A reading without that clock (one stored before it was read) is
    compared as it was read."""
    a, b = clock_beside(old), clock_beside(new)
    return new.unit == "cycles" and a is not None and b is not None and not same_clock(a, b)


def same_clock(a: float | None, b: float | None) -> bool:
    return a is None or b is None or abs(a - b) <= SAME_CLOCK * max(a, b)


#: a power reading at least this share of the GPU's enforced power limit (the stress's ``launch.power_limit_w``)
#: is held there by the cap: H100 GPU-bdc22158's random-operand stress read 697.9-699.3 W of its 700 W limit
#: (99.7-99.9 %) at 1587.8-1600.3 MHz over five processes, its zero-operand one 311.7-317.2 W (45 %) while
#: NVML named sw_power_cap beside both (a reason the zero-operand stress inherits from the one before it)
AT_POWER_CAP = 0.97


def held_at_power_cap(v: Verdict) -> bool:
    """Whether a verdict's power was held at the GPU's power cap: its reading at least :data:`AT_POWER_CAP` of
    the enforced power limit its stress recorded; for a reading that recorded no limit (reports before
    2026-11-26 late), whether NVML named sw_power_cap during its stress."""
    m = v.measurement or {}
    limit = (m.get("launch") or {}).get("power_limit_w")
    if isinstance(limit, (int, float)) and limit > 0 and isinstance(v.measured, (int, float)):
        return v.measured >= AT_POWER_CAP * limit
    return "sw_power_cap" in (m.get("throttle") or [])


def same_state(old: Verdict, new: Verdict) -> bool:
    """Whether two readings of one unit's fact ran in the same state: the same SM clock state
    (:data:`SAME_CLOCK`); and, for a power (:data:`CLOCK_STATE_UNITS`) below the power cap, stresses that
    began within :data:`SAME_START_TEMPERATURE_C` of each other. A power either of them read at the cap
    (:func:`held_at_power_cap`) is the cap's whatever the clock and the temperature: every state is one
    (GPU-bdc22158's random-operand power, 697.9-699.3 W at 1587.8-1600.3 MHz, went uncompared in a planted
    run for a clock 0.5 % off its baseline's). A reading without a clock or a temperature is taken as in
    every state."""
    if new.unit in CLOCK_STATE_UNITS and (held_at_power_cap(new) or held_at_power_cap(old)):
        return True
    if not same_clock(reading_clock(old), reading_clock(new)):
        return False
    if new.unit not in CLOCK_STATE_UNITS:
        return True
    a, b = start_temperature_c(old), start_temperature_c(new)
    return a is None or b is None or abs(a - b) <= SAME_START_TEMPERATURE_C


#: a power below the cap read in another SM clock state than every baseline reading of its thermal state is
#: compared with a baseline scaled by the clocks' ratio to this power, its band widened by POWER_CLOCK_SLACK x the
#: clocks' relative difference: between one process and the next at one start temperature (or corrected for it by
#: 0.4 % a degree) the zero-operand power followed the clock with exponents 0.45 (H100 GPU-5a4f00df, 317.5 W at 1815
#: MHz, 318.7 at 1830), 0.9 (GPU-190bcd2c), 0.8-2 (GPU-540d8aa9), 1.9 (GPU-2f4cf031, 312.0 W at 1815, 317.0 at 1830)
#: and 2.3 (H200 GPU-d94475a2, 282.2 W at 1725, 287.8 at 1740), 2026-11-26/27: the voltage steps with the clock on
#: some units and not on others. The middle of that range, and its half-width
POWER_CLOCK_EXPONENT = 1.4
POWER_CLOCK_SLACK = 0.95
#: ... where the two clocks are at most this far apart (a step or two of the clock; farther is another regime)
POWER_CLOCK_REACH = 0.02
#: a power below the cap whose stress began more than SAME_START_TEMPERATURE_C warmer than its baseline's may read
#: this share of the baseline more per degree C, and one begun cooler as much less: a die draws more the warmer
#: it is, never less (the steepest unit: H100 GPU-2b139b2f 310.6-311.1 W from 41 degrees C, 319.4 from 44, 0.94 %
#: a degree; GPU-5a4f00df 318.7 W from 57, 322.3 from 60 at one clock, 0.38 %, 2026-11-26). The band opens on
#: that side only: a reading that moved against the temperature is held to the same-unit band
POWER_TEMPERATURE_SLACK = 0.01
#: ... where the two stresses began at most this far apart (degrees C)
POWER_TEMPERATURE_REACH_C = 6


def near_state(old: Verdict, new: Verdict) -> bool:
    """Whether a power below the cap read in another state can still be compared with ``old``: clocks within
    :data:`POWER_CLOCK_REACH` of each other (:data:`POWER_CLOCK_SLACK`), stresses begun within
    :data:`POWER_TEMPERATURE_REACH_C` (:data:`POWER_TEMPERATURE_SLACK`)."""
    a, b = reading_clock(old), reading_clock(new)
    if a is not None and b is not None and abs(a - b) > POWER_CLOCK_REACH * max(a, b):
        return False
    ta, tb = start_temperature_c(old), start_temperature_c(new)
    return ta is None or tb is None or abs(ta - tb) <= POWER_TEMPERATURE_REACH_C


def power_band(old: Verdict, new: Verdict, base: float, band: float) -> tuple[float, float, str]:
    """A near-state power's band below and above ``base`` (``old``'s reading scaled to ``new``'s clock by
    :data:`POWER_CLOCK_EXPONENT`), ``band`` the same-unit one: widened on both sides for the clocks'
    difference and on the temperature's side for a stress begun more than SAME_START_TEMPERATURE_C apart;
    with the words that say how."""
    a, b = reading_clock(old), reading_clock(new)
    clock = POWER_CLOCK_SLACK * abs(b - a) / a * abs(base) if a and b and not same_clock(a, b) else 0.0
    below = above = band + clock
    how = f" + {POWER_CLOCK_SLACK:g} x the clocks' {abs(b - a) / a:.2%}" if clock else ""
    ta, tb = start_temperature_c(old), start_temperature_c(new)
    if ta is not None and tb is not None and abs(tb - ta) > SAME_START_TEMPERATURE_C:
        warm = POWER_TEMPERATURE_SLACK * abs(tb - ta) * abs(base)
        if tb > ta:
            above += warm
        else:
            below += warm
        how += f" + {POWER_TEMPERATURE_SLACK:.0%} a degree C {'above' if tb > ta else 'below'} for {tb - ta:+g} °C"
    return below, above, how


def partly_clocked_band(old: Verdict, new: Verdict, base: float, band: float) -> tuple[float, float, str]:
    """A partly clocked latency's band below and above ``base`` (``old``'s reading scaled to ``new``'s clock by
    :data:`PARTLY_CLOCKED_EXPONENT`), ``band`` the same-unit one, widened on both sides by the exponent x the
    clocks' relative difference; and the text that says so."""
    a, b = clock_beside(old), clock_beside(new)
    rel = abs(b - a) / a
    extra = PARTLY_CLOCKED_EXPONENT * rel * abs(base)
    return band + extra, band + extra, f" + {PARTLY_CLOCKED_EXPONENT:g} x the clocks' {rel:.2%}"


def nearest_clock(candidates: list[Verdict], v: Verdict) -> Verdict:
    """Of a unit's baseline readings of one fact (newest first), the one taken at the SM clock nearest
    this reading's: like is compared with like where the unit has run in both clock states."""
    mine = reading_clock(v)
    if mine is None:
        return candidates[0]
    return min(candidates, key=lambda o: abs((reading_clock(o) or mine) - mine))


def _baseline_index(baseline: Iterable[Verdict]) -> dict[tuple, list[Verdict]]:
    """The baseline's readings that can serve (:func:`_baseline_reading`), by unit and test."""
    old: dict[tuple, list[Verdict]] = {}
    for v in baseline:
        if _baseline_reading(v):
            old.setdefault((gpu_key(v), *run_key(v)), []).append(v)
    return old


def _same_method_readings(old: dict[tuple, list[Verdict]], v: Verdict) -> list[Verdict]:
    """The baseline readings (:func:`_baseline_index`) of ``v``'s unit and test taken by ``v``'s method."""
    return [o for o in old.get((gpu_key(v), *run_key(v)), []) if same_method(o, v)]


def _comparable(candidates: list[Verdict], v: Verdict) -> list[Verdict]:
    """The baseline readings ``candidates`` that ``v`` can be compared with: all of them, or for a power
    (:data:`CLOCK_STATE_UNITS`) those of its own state (:func:`same_state`: SM clock, and the temperature its
    stress began at), else those of its thermal state at a clock near enough to scale (:func:`near_state`).
    None left where there were some: no like-for-like compare, so none is made."""
    if v.unit not in CLOCK_STATE_UNITS:
        return candidates
    return [o for o in candidates if same_state(o, v)] or [o for o in candidates if near_state(o, v)]


def compare(baseline: Iterable[Verdict], current: Iterable[Verdict]) -> list[Verdict]:
    """MOVED verdicts for facts whose measurement on a GPU (same UUID) moved by more than the
    fact's same-unit band (:func:`same_unit_band`) since the baseline run. Where the baseline holds
    readings of a fact at several SM clocks (baselines.Store.baseline), the nearest is compared; a rate of
    SM work (ceilings.scales_with_sm_clock) read in another clock state than that one is compared with it
    scaled by the two clocks (H100 GPU-28469c12: FFMA 66.008 TFLOP/s at 1980.5 MHz, 66.743 at 1995.6); a
    latency whose path leaves the SM, read beside another clock state, half way (:func:`partly_clocked`); a
    power is compared in its own state (:data:`CLOCK_STATE_UNITS`), else in a near one (:func:`near_state`) with a
    wider band (:func:`power_band`), else not at all."""
    return _compare(_baseline_index(baseline), current)


def moved_index(baseline: Iterable[Verdict]) -> dict[tuple, list[Verdict]]:
    """``baseline`` indexed once, for :func:`moved` to ask of one reading at a time (a check, as it reads)."""
    return _baseline_index(baseline)


def moved(index: dict[tuple, list[Verdict]], v: Verdict) -> bool:
    """Whether :func:`compare` calls ``v`` MOVED against the baseline :func:`moved_index` indexed."""
    return bool(_compare(index, [v]))


def compare_all(baseline: Iterable[Verdict], current: Iterable[Verdict]) -> tuple[list[Verdict], list[str], list[str]]:
    """(:func:`compare`, :func:`method_changed`, :func:`other_clock_state`) of one baseline, indexed once."""
    old, current = _baseline_index(baseline), list(current)
    return _compare(old, current), _method_changed(old, current), _other_state(old, current)


def _compare(old: dict[tuple, list[Verdict]], current: Iterable[Verdict]) -> list[Verdict]:
    moved = []
    for v in current:
        if not _baseline_reading(v):
            continue
        candidates = _comparable(_same_method_readings(old, v), v)
        if not candidates:  # other_clock_state() names a power that had readings of other states only
            continue
        o = nearest_clock(candidates, v)
        if v.unit in CLOCK_STATE_UNITS and not same_state(o, v):  # near states only: the one of the narrowest band
            o = min(candidates, key=lambda c: sum(power_band(c, v, 1.0, 0.0)[:2]))
        clock, mine = reading_clock(o), reading_clock(v)
        other_state = bool(clock and mine and not same_clock(clock, mine))
        # SM work per second, or a power below the cap (near_state), in another clock state: the baseline as it
        # reads at this reading's clock; the power's band widened for how far its clock dependence may stray
        power = v.unit in CLOCK_STATE_UNITS and not same_state(o, v)
        partly = partly_clocked(o, v)
        scaled = other_state and (ceilings.scales_with_sm_clock(v.fact) or power or partly)
        exponent = POWER_CLOCK_EXPONENT if power else PARTLY_CLOCKED_EXPONENT if partly else 1.0
        base = o.measured * (mine / clock) ** exponent if scaled else o.measured
        band = same_unit_band(v, base)
        below, above, widened = power_band(o, v, base, band) if power else \
            partly_clocked_band(o, v, base, band) if partly else (band, band, "")
        if not base - below <= v.measured <= base + above:
            how = (f"same-unit band {v.same_unit_tolerance_rel:.2%}" if v.same_unit_tolerance_rel
                   else "the fact's tolerance: no same-unit band recorded") + widened
            spread = f"± {below:.3g}" if below == above else f"-{below:.3g} / +{above:.3g}"
            at = (f" (its {o.measured:.3f} at {clock:g} MHz scaled to {mine:g} MHz)" if scaled
                  else f" at {clock:g} MHz" if other_state else "")
            # a power depends on the die's temperature too (SAME_START_TEMPERATURE_C)
            warm = (start_temperature_c(o), start_temperature_c(v))
            if v.unit in CLOCK_STATE_UNITS and None not in warm:
                at += f" (its stress began at {warm[0]:g} °C, this one at {warm[1]:g} °C)"
            m = dataclasses.replace(v, status=MOVED, kind="baseline", attempts=[],
                                    expected=f"baseline {base:.3f} {spread} {v.unit} ({how}){at}",
                                    measured_text=f"{v.measured:.3f} {v.unit} on {gpu_label(v)} "
                                    f"(moved {v.measured - base:+.3f}, {(v.measured - base) / base:+.2%})")
            m.flags = []
            moved.append(m)
    return moved


def other_clock_state(baseline: Iterable[Verdict], current: Iterable[Verdict]) -> list[str]:
    """The facts of ``current`` in :data:`CLOCK_STATE_UNITS` read in another state (:func:`same_state`: SM
    clock, start temperature) than every baseline reading of the same unit and test: not compared, so said
    beside the compare's result (the store keeps a reading per state, so the next run in this state is
    compared)."""
    return _other_state(_baseline_index(baseline), current)


def _other_state(old: dict[tuple, list[Verdict]], current: Iterable[Verdict]) -> list[str]:
    out = []
    for v in current:
        if _baseline_reading(v) and (there := _same_method_readings(old, v)) and not _comparable(there, v):
            out.append(v.fact)
    return list(dict.fromkeys(out))


def same_method(old: Verdict, new: Verdict) -> bool:
    """Whether two readings of a fact were taken by one method, as the facts file describes it (its
    entry's ``method``, which changes with the method): a reading of another method is no baseline (the
    H100's random-operand power read 1-3 % lower when its windows came to share their boundaries).
    Readings without a method text are taken as the same."""
    return not old.method or not new.method or old.method == new.method


def method_changed(baseline: Iterable[Verdict], current: Iterable[Verdict]) -> list[str]:
    """The facts of ``current`` whose baseline readings (same unit, same test) were all taken by another
    method (:func:`same_method`): not compared, so said beside the compare's result."""
    return _method_changed(_baseline_index(baseline), current)


def _method_changed(old: dict[tuple, list[Verdict]], current: Iterable[Verdict]) -> list[str]:
    out = []
    for v in current:
        there = old.get((gpu_key(v), *run_key(v))) if _baseline_reading(v) else None
        if there and not any(same_method(o, v) for o in there):
            out.append(v.fact)
    return list(dict.fromkeys(out))
