"""The method text of the throughput and sustained-clock facts (what one launch does, how it was
timed, the clock it ran at) and how a rate compares with its SKU's datasheet peak and with the peak
at the clock it ran at.
"""

from __future__ import annotations

from collections.abc import Callable

from .clocks import EARLY_FROM_S
from .datasheets import PEAK_FIELD, PER_SM_CYCLE, Datasheet, clock_peak_tflops, implied_clock_mhz
from .measurement import Measurement
from .workloads import PAGE_BYTES, WGMMA_UNROLL, WGMMA_WARPGROUPS


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
        parts.append("no datasheet tabulated for this GPU (datasheets.DATASHEETS)")
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
    d = ln.get("defines") or {}
    if d.get("LAYOUT") == "LAYOUT_SHARED_CHUNK":  # since 2026-11-26 (afternoon): every chunk read by many SMs at once
        chunk_kib = d["CHUNK16"] * 16 / 1024
        chunks = max(1, round(ln.get("buffer_bytes", 0) / (chunk_kib * 1024)))
        reads = (f"a {_mib(ln):.1f} MiB window (L2 / 4) read as {chunks} chunks of {chunk_kib:g} KiB: block b walks "
                 f"chunk b mod {chunks} with 16-byte ld.global.cg (LDG.E.128.STRONG.GPU), {d.get('UNROLL')} a thread "
                 f"a trip, so every chunk is read by {ln['grid'] // chunks} blocks on many SMs at once, again and again")
    else:
        reads = (f"16-byte ld.global.cg (LDG.E.128.STRONG.GPU) over a {_mib(ln):.1f} MiB window (L2 / 4), read again "
                 "and again")
    return (f"{reads}, in each of {k} such windows {ln['stride_bytes'] / 2**20:g} MiB apart in one "
            f"{ln['region_bytes'] / 2**20:.1f} MiB allocation, each from a {page:g} MiB page boundary on pages of its "
            f"own: the same reads in {k} placements of the lines among the L2 slices and partitions")


def _placement_timing(m: Measurement) -> str:
    """How a placed rate (:func:`throughput.measure_placed_rate`) is timed and reduced, with the windows' spread."""
    ln = m.launch
    k, n = ln["placements"], ln["launches"]
    lo, hi = ln.get("placement_lowest"), ln.get("placement_highest")
    spread = ln.get("placement_spread")
    heat = f"after {ln['preheat_s']:g} s of untimed repeats, " if ln.get("preheat_s") else ""
    text = (f"{heat}per repeat, every window in turn: one untimed launch that reads it once, then {n} launch"
            f"{'es' if n != 1 else ''} of ~{ln['launch_s'] * 1e3:.1f} ms between CUDA events; a repeat's value is the "
            f"mean of the {k} windows' rates, median of {m.n} repeats")
    if lo is not None and hi is not None and spread is not None:
        text += (f"; the windows' rates (each the median over repeats) {lo:g}-{hi:g} {m.unit}, "
                 f"{spread * 100:.2f} % apart (relative std {ln.get('placement_noise', 0) * 100:.2f} %)")
    return text


#: how the clock beside a median of an even count is taken (rates.median_pair)
_EVEN = ", the mean of the middle two's for an even count"


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
    timed = "timed launch" if ln.get("placements") else "launch"
    if ln.get("kernel_mhz", ()) is None:  # a kernel without stamps (the DRAM kinds: a block per tile)
        shape = f"a block of {ln['block']} threads per tile, {ln['grid']} blocks, one pass a launch"
        clock = f"SM clock {m.sm_clock_mhz} MHz (NVML over the repeats)"
    else:
        shape = f"on every SM: grid {ln['grid']} x {ln['block']} threads"
        clock = (f"SM clock {m.sm_clock_mhz} MHz (clock64 / %globaltimer per block over every {timed} of the "
                 f"median-rate repeat{_EVEN if m.n % 2 == 0 else ''}; NVML {ln.get('nvml_mhz')} MHz)")
    text = f"{ln['kernel']} ({ln['source']}) {shape}, {what}; {timing}; {clock}"
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


def stress_rate_method(m: Measurement, arch: str, sm_count: int, sheet: Datasheet | None) -> str:
    """The method text of a throughput fact read from a stress (:func:`throughput.stress_rate`)."""
    ln = m.launch
    text = (f"{ln['kernel']} ({ln['source']}) on every SM: grid {ln['grid']} x {ln['block']} threads, "
            f"{_WHAT[ln['kind']](ln)}; the load of the sustained-clock stress (launches of ~{ln['launch_s'] * 1e3:.0f} "
            f"ms two deep for {ln['duration_s']:g} s after {ln['idle_s']:g} s idle): its rate in each of the "
            f"{len(m.values)} windows of {sustained_part_text(ln)}, each the work of the launches that started in it over "
            f"their %globaltimer span, median of the windows; SM clock {m.sm_clock_mhz} MHz (clock64 / %globaltimer "
            f"over the median-rate window's own launches{_EVEN if m.n % 2 == 0 else ''}; the stress's sustained clock "
            f"{ln.get('stress_sustained_mhz')} MHz)")
    frac = fraction_text(ln["kind"], m.median, arch, sm_count, m.sm_clock_mhz, sheet)
    return text + (f"; {frac}" if frac else "")
