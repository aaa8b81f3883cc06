"""assert layer: tolerant comparisons of measurements with facts (the cost models the model facts
compare with are in :mod:`pytest_gpuprops.models`).

``evaluate*`` never raise: they return a :class:`Verdict` that the report layer records.
:func:`raise_for` turns a failing verdict into the assertion error a person reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .ceilings import (
    IMPOSSIBLE_CLOCK,
    IMPOSSIBLE_RATE,
    impossible_reading,
    impossible_sample,
)
from .facts import Fact
from .measurement import Measurement

PASS, FAIL, NOISY, SCHEDULE_CHANGED, RECORDED = "PASS", "FAIL", "NOISY", "SCHEDULE CHANGED", "RECORDED"
#: a failure that did not reproduce when measured again: the method, not the hardware, is in doubt
UNSTABLE = "UNSTABLE"
#: a test that failed or errored outside the verdict layer (a plain assert, a launch error), or a
#: physically impossible reading (ceilings.impossible_reading: flagged, never passed or failed)
ERROR = "ERROR"
SKIPPED = "SKIPPED"
#: a fact in time units (MHz, TFLOP/s, GB/s) that failed while NVML reported the clocks held down
#: (power cap, thermal or hardware slowdown): red like FAIL, but it says the clock may be the cause
THROTTLED = "THROTTLED"
#: statuses that make a run red; the report and pytest's exit status agree on them
NOT_OK = (FAIL, THROTTLED, NOISY, SCHEDULE_CHANGED, UNSTABLE, ERROR)
#: units whose values move with the clock the GPU ran at (the SKU's facts); cycle counts do not
TIME_UNITS = ("MHz", "TFLOP/s", "GB/s", "GB/s/SM")
#: what to look at when a fact in a time unit fails, by unit
CHECK_HINTS = {
    "MHz": "nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE on this GPU: clock-event reasons, the enforced "
           "power limit, application clocks, temperature; the health_* verdicts of this run",
    "TFLOP/s": "the SM clock it ran at (in the measured text) against the sustained-clock facts; nvidia-smi -q -d "
               "PERFORMANCE,POWER for power capping; other processes on the GPU (nvidia-smi)",
    "GB/s": "nvidia-smi -q -d CLOCK,ECC,PERFORMANCE: the memory clock, ECC and row-remap state (health_* verdicts); "
            "other processes on the GPU",
    "GB/s/SM": "the L2's rate an SM gets: nvidia-smi -q -d PERFORMANCE,POWER for power capping; other processes on the "
               "GPU; the L2 read rate (l2_read_gbps) of this run beside it",
}


class FactMismatch(AssertionError):
    """A hardware fact does not hold on this GPU."""


class NoisyMeasurement(AssertionError):
    """The measurement never settled under its noise target; it is not trusted either way."""


class ScheduleChanged(AssertionError):
    """A compiler other than the recorded ones schedules the kernel differently (not a hardware fault)."""


class UnstableMeasurement(AssertionError):
    """A measurement failed its fact, but measuring again did not reproduce the failure."""


class ImpossibleReading(AssertionError):
    """A reading the hardware cannot give: a rate above its ceiling at the clock read beside it, or a
    clock above the GPU's maximum. The method is at fault (the rate and the clock were read over
    different work, or the clock64 / %globaltimer ratio is off), so it neither holds nor fails the fact."""


@dataclasses.dataclass
class Verdict:
    fact: str
    arch: str
    status: str
    expected: str
    measured: float | None
    measured_text: str
    unit: str
    method: str
    source: str
    kind: str = "measured"
    flags: list[str] = dataclasses.field(default_factory=list)
    reproduce: str = ""
    nodeid: str = ""
    measurement: dict | None = None
    #: every measurement behind the verdict when a failure was measured again: [{"measured", "status"}]
    attempts: list[dict] = dataclasses.field(default_factory=list)
    gpu: dict | None = None  # index, name, uuid, pci_bus_id of the GPU measured (None: static)
    tolerance: float | None = None  # the fact's tolerance in its unit (measured facts): fleet rules use it
    #: "arch" (the SM's fact) or "gpu" (the memory system's, per GPU model): the fleet rules compare a
    #: fact among GPUs of the same arch, or of the same model for "gpu"
    scope: str = "arch"
    #: the fact's same-unit band (a fraction of the unit's own baseline reading): the baseline compare
    #: uses it; None where the fact has none yet, and the compare falls back to ``tolerance``
    same_unit_tolerance_rel: float | None = None
    #: a population fact's [lowest, highest] unit reading when the band was set: the fleet rules use it
    units_range: list[float] | None = None
    #: a pair fact's peer GPU (the other end of the link; ``gpu`` issued the work), as ``gpu``
    peer: dict | None = None
    #: the reading its unit accepted outside the SKU's population, within which this one passed
    #: (accepted_units.py: measured, date, path, forced, sm_clock_mhz, band); None for every other verdict
    accepted_reading: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status in (PASS, RECORDED, SKIPPED)

    @property
    def gpu_text(self) -> str:
        """"GPU 0 NVIDIA H100 80GB HBM3 (GPU-7ef69811...)", or "" for a compile-time verdict."""
        if not self.gpu:
            return ""
        g = self.gpu
        host = f" on {g['host']}" if g.get("host") else ""
        text = f"GPU {g.get('index', '?')} {g.get('name', '?')} ({g.get('uuid') or g.get('pci_bus_id') or 'no UUID'}){host}"
        if self.peer:
            p = self.peer
            text += f" -> peer GPU {p.get('index', '?')} ({p.get('uuid') or p.get('pci_bus_id') or 'no UUID'})"
        return text

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def verdict_text(self) -> str:
        return self.status + "".join(f" ({f})" for f in self.flags)

    def message(self) -> str:
        impossible = any(f.startswith((IMPOSSIBLE_RATE, IMPOSSIBLE_CLOCK)) for f in self.flags)
        head = {FAIL: "does not hold", NOISY: "could not be measured reliably",
                SCHEDULE_CHANGED: "compiler schedule changed",
                ERROR: "gave a physically impossible reading" if impossible else "errored",
                UNSTABLE: "failed once but did not fail again when measured again",
                THROTTLED: "does not hold, measured while the GPU's clocks were held down"}.get(self.status, self.status)
        lines = [f"fact {self.fact} on {self.arch} {head}:"]
        if self.gpu:
            lines.append(f"  GPU:      {self.gpu_text}")
        lines += [f"  expected: {self.expected}",
                  f"  measured: {self.measured_text}"]
        if self.flags:
            lines.append(f"  flags:    {', '.join(self.flags)}")
        for n, a in enumerate(self.attempts, 1):
            lines.append(f"  attempt {n}: {a['measured_text']} -> {a['status']}")
        lines += [f"  method:   {self.method}", f"  source:   {self.source}"]
        if self.status in (FAIL, THROTTLED) and self.unit in CHECK_HINTS:
            lines.append(f"  check:    {CHECK_HINTS[self.unit]}")
        elif impossible:
            lines.append(f"  check:    {IMPOSSIBLE_HINT}")
        if self.reproduce:
            lines.append(f"  reproduce: {self.reproduce}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["verdict"] = self.verdict_text
        return d


#: the flag of a verdict whose unit read beyond every unit a population fact was measured on
BEYOND_UNITS = "beyond the units measured so far"
#: the flag of a population fact's FAIL: the unit is outside the SKU's recorded population
OFF_POPULATION = "outside the SKU's recorded population"
#: a link rate (Measurement spread "settled") whose copies never settled, judged all the same where it reads at
#: or above its band's lower edge: a disturbance (a host's traffic) only slows copies, so such a reading shows
#: the link at least that fast; below the edge it may be the disturbance, and stays NOISY
JUDGED_UNSETTLED = "judged though its copies did not settle"
#: the flag of a PASS outside the band of a fact that differs by unit, within its population's reach
WITHIN_REACH = "a finding about this unit, not red"
#: How far past its recorded units a reading of a fact that differs by unit (``units_range``) is still a
#: unit of the SKU: a reading outside the band but at most this far above the lowest unit recorded and below
#: the highest is a finding (PASS, flagged OFF_POPULATION and WITHIN_REACH, listed at the run's end); past
#: it, FAIL. So every recorded unit shifted by more than this is red at first sight, and a healthy unit
#: a few % off the units recorded so far is not: single-SM latencies depend on where the unit's SM 0 lies
#: (H100 GPU-fbebbb9e read its L2-path latencies 4-7 % above GPU-970b7d1c beside it and 0.6-3.3 % past
#: their bands; 2026-11-26, docs/results.md). The unit's own baseline then holds it to its same-unit
#: band; ``--gpuprops-population strict`` makes every reading outside the band FAIL.
POPULATION_REACH = 0.10
#: what to look at when a reading is physically impossible
IMPOSSIBLE_HINT = ("whether the rate and the SM clock beside it were read over the same launches (measurement.launch: "
                   "kernel_mhz per repeat, rate_windows_mhz per stress window) and the clock64 / %globaltimer stamps "
                   "they came from; a clock over the maximum: nvidia-smi -q -d CLOCK")
#: an SM clock this far under the GPU's maximum has fallen (NVML's clock steps are 15 MHz, < 1 %)
CLOCK_FELL = 0.01


def sm_clock_fell(fact: Fact, m: Measurement, max_sm_clock_mhz: float | None) -> bool:
    """Whether the clock a fact in a time unit depends on fell while it was measured: the SM clock (MHz,
    TFLOP/s, on-chip GB/s) read under its maximum by more than :data:`CLOCK_FELL` while NVML named a
    clock-event reason. DRAM bandwidth runs on the memory clock, which NVML's clock-event reasons do not
    describe: never. An unknown maximum or clock counts as fallen when NVML named a reason (nothing to
    tell otherwise)."""
    if fact.unit not in TIME_UNITS or not m.throttle or fact.name.startswith("dram_"):
        return False
    if not max_sm_clock_mhz or not m.sm_clock_mhz:
        return True
    return m.sm_clock_mhz < max_sm_clock_mhz * (1 - CLOCK_FELL)


def clock_fell(fact: Fact, m: Measurement, max_sm_clock_mhz: float | None) -> bool:
    """Whether a failure may be the clock's, not the fact's: its clock fell (:func:`sm_clock_fell`) and
    it read below the fact's value. A reading above it is no fallen clock's (a slower clock reads lower:
    H100 GPU-41edd6a1's e4m3 rate read 1763 TFLOP/s against 1702 ± 51.1 under sw_power_cap, and was
    called THROTTLED)."""
    return m.reading < fact.value and sm_clock_fell(fact, m, max_sm_clock_mhz)


def within_reach(fact: Fact, value: float, reach: float = POPULATION_REACH) -> bool:
    """Whether ``value`` is no further past ``fact``'s recorded units than ``reach`` of them: at most
    ``reach`` above the lowest and below the highest (:data:`POPULATION_REACH`). False for a fact
    without recorded units (an arch fact: every unit must read it) or a zero unit."""
    if not fact.units_range:
        return False
    lo, hi = fact.units_range
    if lo <= 0 or hi <= 0:
        return False
    return hi * (1 - reach) <= value <= lo * (1 + reach)


def clock_text(m: Measurement) -> str:
    """The SM clock a measurement ran at, as its verdict says it: the clock, or why there is none (a
    reading of an SM clock above what the GPU can run is not one: measure.Runner.session_sm_clock_mhz)."""
    if m.sm_clock_mhz:
        return f"SM clock {m.sm_clock_mhz} MHz"
    refused = m.launch.get("session_clock_refused_mhz") if isinstance(m.launch, dict) else None
    if refused:
        return f"SM clock unknown: the session's clock spin read {refused} MHz, above what the GPU can run"
    return "SM clock not read"


def evaluate(fact: Fact, m: Measurement, *, reproduce: str = "", max_sm_clock_mhz: float | None = None,
             strict_population: bool = False) -> Verdict:
    """Compare a measurement's median with a measured fact. A fact in a time unit that fails is
    THROTTLED only where the clock it depends on fell (:func:`clock_fell`); otherwise it is a FAIL
    that names the throttle reasons seen as context.

    The guard: a reading that cannot be (ceilings.impossible_reading: a rate above SMs x its work per SM
    per clock at the SM clock recorded beside it, or a clock, its own or a rate's, above
    ``max_sm_clock_mhz`` + ceilings.CLOCK_ALLOWANCE_MHZ: one 15 MHz step and the reading width) is ERROR, flagged "physically impossible reading: ...", whatever
    the tolerance says: such a rate passing its band would hide that it was not read at the clock it
    states (H100 bf16 893.6 TFLOP/s beside 1617 MHz: 102.2 % of 874.3), and failing it would blame the
    GPU for the method's fault. The SM count comes from the measurement (``launch["sm_count"]``)."""
    flags = []
    if m.throttle:
        flags.append("throttled: " + "+".join(m.throttle))
    unsettled = not m.settled
    if unsettled and (m.spread != "settled" or fact.value is None or m.reading < fact.value - fact.tolerance):
        status = NOISY
        flags.append(f"{m.unsettled_reason()} ({m.stop_reason})")
    elif unsettled:  # at or above the band's lower edge: the link runs at least that fast
        status = PASS if fact.accepts(m.reading) else FAIL
        flags.append(f"{JUDGED_UNSETTLED}: {m.unsettled_reason()}; a disturbance only slows copies, and the reading "
                     f"is {'inside' if status == PASS else 'above'} the band")
    elif fact.accepts(m.reading):
        status = PASS
    elif clock_fell(fact, m, max_sm_clock_mhz):
        status = THROTTLED
    else:
        status = FAIL
        if sm_clock_fell(fact, m, max_sm_clock_mhz):  # and yet no THROTTLED: the reading is above the value
            flags[0] = (f"clock-event reasons {'+'.join(m.throttle)} seen, but the reading is above the fact's value: "
                        f"a fallen clock reads lower (SM clock {m.sm_clock_mhz} MHz of {max_sm_clock_mhz or '?'})")
        elif m.throttle and fact.unit in TIME_UNITS:
            flags[0] = (f"clock-event reasons {'+'.join(m.throttle)} seen, but the clock this fact depends on did not "
                        f"fall (SM clock {m.sm_clock_mhz} MHz of {max_sm_clock_mhz or '?'})"
                        + ("; DRAM bandwidth runs on the memory clock" if fact.name.startswith("dram_") else ""))
    if fact.units_range and status != NOISY and not fact.units_range[0] <= m.reading <= fact.units_range[1]:
        lo, hi = fact.units_range
        if status == FAIL and not strict_population and within_reach(fact, m.reading):
            status = PASS
            flags.append(f"{OFF_POPULATION}: {m.reading:.4g} against units {lo:g} .. {hi:g} (named in the source), "
                         f"outside the band {fact.expected_text()}; {WITHIN_REACH}: within "
                         f"{POPULATION_REACH:.0%} of the units recorded (red with --gpuprops-population strict); "
                         "its own baseline holds it from the next run on")
        elif status in (FAIL, THROTTLED):
            flags.append(f"{OFF_POPULATION}: {m.reading:.4g} against units {lo:g} .. {hi:g} (named in the source); "
                         "a finding about this unit: the band changes only with the method or a planned recording")
        else:
            flags.append(f"{BEYOND_UNITS} ({lo:g} .. {hi:g}): inside the band, past every unit recorded; "
                         "tools/unit_values.py lists such readings")
    impossible = impossible_reading(fact.name, fact.unit, m.reading, arch=fact.arch, sms=m.launch.get("sm_count"),
                                    clock_mhz=m.sm_clock_mhz, max_sm_clock_mhz=max_sm_clock_mhz)
    impossible += impossible_sample(fact.name, fact.unit, m.max, arch=fact.arch, sms=m.launch.get("sm_count"),
                                    max_sm_clock_mhz=max_sm_clock_mhz)
    if impossible:
        status, flags[:0] = ERROR, impossible
    # a memory-system latency is fixed in ns: its cycles follow the SM clock, so the ns are said beside them
    ns = (f"; {m.reading / m.sm_clock_mhz * 1e3:.1f} ns" if fact.scope == "gpu" and fact.unit == "cycles"
          and m.sm_clock_mhz else "")
    return Verdict(fact=fact.name, arch=fact.arch, status=status, expected=fact.expected_text(),
                   measured=m.reading, measured_text=f"{m.reading:.3f} {m.unit} (min {m.min:.3f}, max {m.max:.3f}, "
                   f"noise {m.noise:.2%}, n={m.n}, {m.stop_reason}; {clock_text(m)}{ns})",
                   unit=fact.unit, method=fact.method, source=fact.source, flags=flags, reproduce=reproduce,
                   measurement=m.as_dict(), tolerance=fact.tolerance, scope=fact.scope,
                   same_unit_tolerance_rel=fact.same_unit_tolerance_rel,
                   units_range=list(fact.units_range) if fact.units_range else None)


def evaluate_static(fact: Fact, value: float, compiler: str, *, reproduce: str = "") -> Verdict:
    """Compare a compile-time schedule number with the values recorded per compiler version."""
    base = dict(fact=fact.name, arch=fact.arch, expected=fact.expected_text(), measured=value,
                measured_text=f"{value:g} {fact.unit} with {compiler}", unit=fact.unit, method=fact.method,
                source=fact.source, kind="static", reproduce=reproduce)
    if compiler in fact.by_compiler:
        ok = float(fact.by_compiler[compiler]) == float(value)
        return Verdict(status=PASS if ok else FAIL, **base)
    last_compiler, last_value = list(fact.by_compiler.items())[-1]
    if float(last_value) == float(value):
        return Verdict(status=PASS, flags=[f"{compiler} not recorded; same as {last_compiler}"], **base)
    return Verdict(status=SCHEDULE_CHANGED, flags=[f"{last_compiler}: {last_value}, {compiler}: {value:g}"], **base)


def evaluate_model(name: str, arch: str, cases: Sequence[tuple[str, float, float]], *, tolerance_rel: float,
                   unit: str, method: str, source: str, reproduce: str = "") -> Verdict:
    """A model fact: every case (label, predicted, measured) within ``tolerance_rel`` of the model."""
    bad = [(lab, p, x) for lab, p, x in cases if abs(x - p) > tolerance_rel * abs(p)]
    worst = max(cases, key=lambda c: abs(c[2] - c[1]) / abs(c[1]) if c[1] else 0.0)
    text = (f"{len(cases) - len(bad)}/{len(cases)} cases within ±{tolerance_rel * 100:g}% of the model; worst "
            f"{worst[0]}: model {worst[1]:.3f}, measured {worst[2]:.3f}")
    if bad:
        text += "\n            off the model: " + "; ".join(f"{lab}: model {p:.3f} measured {x:.3f}"
                                                           for lab, p, x in bad[:12])
        if len(bad) > 12:
            text += f"; and {len(bad) - 12} more"
    return Verdict(fact=name, arch=arch, status=FAIL if bad else PASS, expected=f"model ± {tolerance_rel * 100:g}%",
                   measured=float(len(cases) - len(bad)), measured_text=text, unit=unit, method=method,
                   source=source, kind="model", reproduce=reproduce)


def evaluate_condition(name: str, arch: str, holds: bool, measured_text: str, *, method: str, source: str,
                       reproduce: str = "") -> Verdict:
    """A property of a whole measurement (a sweep's knees): it holds or it does not."""
    return Verdict(fact=name, arch=arch, status=PASS if holds else FAIL, expected="holds", measured=None,
                   measured_text=measured_text, unit="", method=method, source=source, kind="condition",
                   reproduce=reproduce)


def raise_for(v: Verdict) -> None:
    if v.status in (FAIL, THROTTLED):
        raise FactMismatch(v.message())
    if v.status == NOISY:
        raise NoisyMeasurement(v.message())
    if v.status == SCHEDULE_CHANGED:
        raise ScheduleChanged(v.message())
    if v.status == UNSTABLE:
        raise UnstableMeasurement(v.message())
    if v.status == ERROR:
        raise ImpossibleReading(v.message())
