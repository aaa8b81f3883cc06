"""Confirmation: a verdict that would be reported red, or a reading that would be MOVED against its unit's own
baseline, measured again with fresh launches before it is, and judged on every measurement (the judging layer's
policy for measuring again; assertions.py makes each verdict)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .assertions import ERROR, FAIL, NOISY, PASS, THROTTLED, UNSTABLE, Verdict

#: how many times a failing measurement is measured again (fresh launches) before it is reported
CONFIRMATIONS = 2
#: the flag of a verdict judged on new measurements because its first was no reading of the fact: noisy
#: (it never settled) or physically impossible (its time or clock was disturbed)
DISCARDED_FIRST = "first measurement discarded"


def confirm(first: Verdict, measure_again: Callable[[], Verdict] | None, times: int = CONFIRMATIONS) -> Verdict:
    """A failing, noisy or physically impossible verdict measured ``times`` more times with fresh
    launches.

    A failure stands only if every new measurement fails too (the verdict then lists them all); if any
    passes, the verdict is UNSTABLE: the fact is neither confirmed nor refuted, and the run says so
    instead of passing it. A first measurement that never settled (NOISY) or could not be (ERROR: its
    time or clock was disturbed) read nothing of the fact, so it is discarded and the new measurements
    are judged by the same rule, the verdict flagged :data:`DISCARDED_FIRST` with why; if a new
    measurement is impossible too, the ERROR stands. H100 GPU-aba34808 read its FFMA rate noisy or
    impossible in the first measurement of three warm processes and its host -> GPU copy noisy once
    (copies 46.6-54.5 GB/s), the next two measurements steady and passing each time (2026-11-26,
    docs/results.md). Passing verdicts, and verdicts that cannot be measured again, are returned as they are.
    """
    if first.status not in (FAIL, THROTTLED, NOISY, ERROR) or measure_again is None:
        return first
    runs = [first] + [measure_again() for _ in range(times)]
    attempts = [_attempt(r) for r in runs]
    if first.status not in (NOISY, ERROR):
        return _judged(runs, attempts)
    if first.status == NOISY and all(r.status == NOISY for r in runs):  # never settled: nothing to discard
        return _judged(runs, attempts)
    impossible = sum(r.status == ERROR for r in runs)
    if first.status == ERROR and impossible > 1:
        final = dataclasses.replace(first, attempts=attempts)
        final.flags = [*first.flags, f"confirmed: impossible in {impossible} of {len(runs)} measurements"]
        return final
    why = (f"physically impossible: {first.flags[0]}" if first.status == ERROR
           else "noisy: " + next((f for f in first.flags if f.startswith("noise ") or "at the settled rate" in f),
                                 "it did not settle"))
    final = _judged(runs[1:], attempts)
    final.flags = [*final.flags, f"{DISCARDED_FIRST}, {why} ({first.measured_text.splitlines()[0]}); judged on "
                                 f"the {len(runs) - 1} after it"]
    return final


#: the flag of a reading that moved off its unit's own baseline and was measured again before the run's end
#: compared it (:func:`confirm_move`)
MEASURED_AGAIN_OFF_BASELINE = "off its unit's baseline"


def confirm_move(first: Verdict, moved: Callable[[Verdict], bool], measure_again: Callable[[], Verdict] | None,
                 times: int = CONFIRMATIONS) -> Verdict:
    """A passing reading that moved off its unit's own baseline (``moved``) measured ``times`` more times
    with fresh launches before the run's end compares it (unit_compare): the median reading judges, its
    verdict listing every attempt and flagged with how many moved. A state of the GPU that passes within
    seconds moves one reading, not the median (the L2 read's high state: +2.6 % over one 1.5-s measurement
    on H100 GPU-94750347, +1.04 % in one whole-suite process of GPU-3f304f7f, both false MOVED at its 1 %
    band; docs/results.md); a change of the unit moves every reading, and the median is MOVED at the run's
    end as before. Measurements that were noisy or impossible do not judge; where an even number is left,
    no median is theirs to take and the first reading stands. A failing first reading is :func:`confirm`'s;
    a reading that did not move, or cannot be measured again, is returned as it is."""
    if first.status != PASS or measure_again is None or not moved(first):
        return first
    runs = [first] + [measure_again() for _ in range(times)]
    judged = sorted((r for r in runs if r.status not in (NOISY, ERROR)), key=lambda r: r.measured)
    median = judged[len(judged) // 2] if len(judged) % 2 else first
    final = dataclasses.replace(median, attempts=[_attempt(r) for r in runs], flags=list(median.flags))
    readings = ", ".join(f"{r.measured:.6g}" for r in runs)
    final.flags.append(f"{MEASURED_AGAIN_OFF_BASELINE} in {sum(map(moved, runs))} of {len(runs)} measurements "
                       f"({readings} {first.unit}): " + ("the median judged" if len(judged) % 2 else
                                                         f"{len(judged)} settled, no median: the first stands"))
    return final


#: what of a measurement's launch record each attempt keeps beside its reading: the evidence of a discarded one
#: (its per-repeat kernel clocks, its events against the host's clock, its values)
ATTEMPT_EVIDENCE = ("kernel_mhz", "gpu_over_host")


def _attempt(r: Verdict) -> dict:
    out = {"measured": r.measured, "measured_text": r.measured_text.split("\n")[0], "status": r.status}
    m = r.measurement or {}
    out.update({k: m["launch"][k] for k in ATTEMPT_EVIDENCE if m.get("launch", {}).get(k) is not None})
    if r.status in (NOISY, ERROR) and m.get("values"):
        out["values"] = [round(float(x), 6) for x in m["values"]]
    return out


def _judged(runs: list[Verdict], attempts: list[dict]) -> Verdict:
    """The verdict of measurements of one fact: all passed, PASS; all failed (or were noisy), the first's
    failure, confirmed; otherwise UNSTABLE. ``attempts`` (every measurement taken) go with it."""
    first, statuses = runs[0], {r.status for r in runs}
    if statuses == {PASS}:
        return dataclasses.replace(first, attempts=attempts, flags=list(first.flags))
    if statuses <= {FAIL, THROTTLED, NOISY}:
        final = dataclasses.replace(first, attempts=attempts)
        final.flags = [*first.flags, f"confirmed: failed {len(runs)} of {len(attempts)} measurements"]
        return final
    unstable = dataclasses.replace(first, status=UNSTABLE, attempts=attempts)
    unstable.flags = [*first.flags, f"{sum(r.status == PASS for r in runs)} of {len(runs)} measurements passed"]
    return unstable
