"""The peer chase's arithmetic, no GPU in it: a random cycle of lines in the peer's memory (its layout), the SMs
it is timed from, and each launch's nanoseconds and cycles a hop read into the near and far latency and the SM
clock they ran at. links.Node launches it (kernels/link_chase.cu)."""

from __future__ import annotations

from collections.abc import Sequence

from . import stats

#: hops of one latency launch: ~1 us a hop over NVLink, so ~20 ms a launch, launch overhead negligible
CHASE_HOPS = 16384
CHASE_FOOTPRINT = 4 << 20  # bytes: warm in the peer's L2 (50 MB on an H100), 32768 lines
CHASE_LAUNCHES = 4  # per sampled SM; the first is the warm-up (brings the cycle into the peer's L2)
#: SMs the latency is sampled on, spread over the GPU (an SM's place moves it by up to ~6 %)
CHASE_SMS = 8


def chase_values(results: Sequence[tuple[int, int]], hops: int) -> tuple[list[float], list[float]]:
    """(ns per hop, cycles per hop) of each timed chase launch, from its (cycles, ns) totals."""
    return [ns / hops for _, ns in results], [c / hops for c, _ in results]


def sampled_sms(sms: int, count: int = CHASE_SMS) -> list[int]:
    """``count`` SM ids spread evenly over ``sms`` (0, sms/count, ...)."""
    return sorted({k * sms // min(count, sms) for k in range(min(count, sms))})


def chase_per_sm(per_sm: dict[int, tuple[list[float], list[float]]], which: int) -> dict[int, float]:
    """Each sampled SM's median (which 0: ns, 1: cycles) over its launches."""
    import statistics
    return {sm: statistics.median(values[which]) for sm, values in sorted(per_sm.items())}


def chase_extreme(per_sm: dict[int, tuple[list[float], list[float]]], which: int, side: str) -> tuple[int, list[float]]:
    """The sampled SM nearest the link ('near': the lowest median) or farthest ('far': the highest), and its
    launches' values (which 0: ns, 1: cycles). An H100's or H200's SMs fall in two groups ~6 % apart
    (~800 and ~850 ns to the peer's L2), and which SM numbers are near differs by unit (floorsweeping):
    the median over a sample moves with that, the two groups' ends do not."""
    medians = chase_per_sm(per_sm, which)
    pick = min if side == "near" else max
    sm = pick(medians, key=lambda s: (medians[s], s))
    return sm, list(per_sm[sm][which])


def chase_clock(per_sm: dict[int, tuple[list[float], list[float]]], sm: int) -> dict:
    """The SM clock SM ``sm``'s chase launches ran at, each its cycles over its nanoseconds (both timed over the
    same hops), as stats.clock_summary says it: the peer latency in cycles follows the SM clock's state as
    the L2 and DRAM latencies do (H100 GPU-88396b0d, 2026-11-27: 1573.5 cycles at 1965 MHz, 1592.6 at 1995, the
    nanoseconds 800.8 and 798.3), so its unit baseline is compared at this clock (unit_compare.partly_clocked)."""
    ns, cycles = per_sm[sm]
    return stats.clock_summary("clock_beside", [c / n * 1e3 for n, c in zip(ns, cycles) if n > 0])


def chase_layout(base: int, lines: int, seed: int = 1, stride: int = 128):
    """The words of a random cycle through ``lines`` lines of ``stride`` bytes at device address
    ``base``: word k * stride / 8 of line k holds the address of the line after it in the cycle."""
    import numpy
    order = numpy.random.default_rng(seed).permutation(lines)
    after = numpy.empty(lines, dtype=numpy.int64)
    after[order] = numpy.roll(order, -1)
    words = numpy.zeros(lines * stride // 8, dtype=numpy.uint64)
    words[numpy.arange(lines) * (stride // 8)] = base + after * stride
    return words
