"""health layer, judging: what each NVML reading means for the GPU, and what to do about it. The
primitives every check's judge uses (:class:`Judged`, an unread query's verdict, the clock-event and
virtualization names) and the thresholds of the memory (ECC, row remapping, page retirement), clock,
power, persistence and compute-mode checks; the PCIe link's judges are health_link.py's, the
verdicts health_verdicts.py's."""

from __future__ import annotations

import dataclasses

from .assertions import FAIL, PASS, SKIPPED
from .health import (
    APP_CLOCKS,
    COMPUTE_MODE,
    ECC_AGGREGATE,
    ECC_MODE,
    ECC_VOLATILE,
    LOCKED_CLOCKS,
    PERSISTENCE,
    POWER_LIMIT,
    REMAP_FAILURE,
    REMAP_PENDING,
    HealthReading,
    Unread,
)

#: retired pages (single- plus double-bit causes) at which DCGM fails a GPU (DcgmGPUHardwareLimits.h); used
#: only on GPUs that retire pages instead of remapping rows (before Ampere)
RETIRED_PAGES_LIMIT = 63
#: NVML clock-event (throttle) reason bits, as nvidia-smi names them
EVENT_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
              0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
              0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
IDLE_BIT, APP_CLOCKS_BIT = 0x1, 0x2
VIRTUALIZATION = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}


@dataclasses.dataclass
class Judged:
    """One check's judgement, before it becomes a Verdict (health_verdicts.verdicts)."""
    status: str
    text: str  # what NVML said, in words
    measured: float | None = None
    flags: list[str] = dataclasses.field(default_factory=list)


def not_read(u: Unread, why: str = "") -> Judged:
    if u.why == "unsupported":
        return Judged(SKIPPED, str(u), flags=[f"not supported here ({u}){': ' + why if why else ''}"])
    if u.why == "no permission":
        return Judged(SKIPPED, str(u), flags=[f"NVML refused the query ({u}): run as a user allowed to query "
                                               "the GPU"])
    return Judged(FAIL, str(u), flags=[f"NVML could not read the GPU ({u}): check it with nvidia-smi -q and "
                                        "the kernel log (Xid); a GPU that fell off the bus reads this way"])


def first_unread(*values) -> Unread | None:
    return next((v for v in values if isinstance(v, Unread)), None)


def event_names(bits: int) -> str:
    names = [n for b, n in EVENT_BITS.items() if bits & b]
    return "+".join(names) if names else "none"


def events_read(r: HealthReading):
    """The clock-event reasons as read: from nvmlDeviceGetCurrentClocksEventReasons, or from the older
    nvmlDeviceGetCurrentClocksThrottleReasons where the binding has only that."""
    new, old = r.get("nvmlDeviceGetCurrentClocksEventReasons"), r.get("nvmlDeviceGetCurrentClocksThrottleReasons")
    return old if old is not None and isinstance(new, Unread) else new


def vm_note(r: HealthReading) -> str:
    mode = r.get("nvmlDeviceGetVirtualizationMode")
    if isinstance(mode, Unread) or mode is None:
        return ""
    return "" if mode == 0 else f"; virtualization: {VIRTUALIZATION.get(mode, mode)}"


def in_vm(r: HealthReading) -> bool:
    mode = r.get("nvmlDeviceGetVirtualizationMode")
    return isinstance(mode, int) and mode in (1, 2)


def share(fraction: float) -> str:
    if abs(fraction - 0.5) < 0.03:
        return "halved"
    if abs(fraction - 0.25) < 0.02:
        return "cut to a quarter"
    return f"cut to about {fraction:.0%}"


def _ecc_mode(r: HealthReading) -> Judged:
    mode = r.get("nvmlDeviceGetEccMode")
    if isinstance(mode, Unread):
        return not_read(mode, "this GPU has no ECC")
    current, pending = (int(x) for x in mode)
    word = {0: "disabled", 1: "enabled"}
    text = f"{word.get(current, current)} (pending: {word.get(pending, pending)})"
    if current != pending:
        return Judged(FAIL, text, float(current), [f"ECC mode change pending ({word.get(current, current)} now, "
                                             f"{word.get(pending, pending)} after a reset): it takes effect at the "
                                             "next GPU reset (nvidia-smi -r) or reboot"])
    if not current:
        return Judged(PASS, text, float(current), ["ECC disabled: uncorrectable memory errors go undetected; datacenter "
                                             "GPUs ship with it on (nvidia-smi -e 1, then reset the GPU)"])
    return Judged(PASS, text, float(current))


def _ecc_count(r: HealthReading, counter: str) -> Judged:
    count = r.get(f"nvmlDeviceGetTotalEccErrors(UNCORRECTED, {counter})")
    if isinstance(count, Unread):
        mode = r.get("nvmlDeviceGetEccMode")
        off = not isinstance(mode, Unread) and mode is not None and not int(mode[0])
        return not_read(count, "ECC is disabled on this GPU, so there are no counts" if off else
                         "no ECC error counts on this GPU")
    text = f"{count} uncorrectable"
    if not count:
        return Judged(PASS, text, 0.0)
    if counter == "VOLATILE":
        advice = (f"{count} uncorrectable ECC error(s) since the driver loaded: the memory returned data it could not "
                  "correct; drain the GPU, read the kernel log for Xid 48/63/64/94/95 and nvidia-smi -q -d "
                  "ECC,ROW_REMAPPER, then reset it (nvidia-smi -r) so the failing rows are remapped")
    else:
        advice = (f"{count} uncorrectable ECC error(s) over the GPU's life (kept in its InfoROM): if the volatile count "
                  "is 0 and row remapping repaired them (health_row_remap_failure passes) it may stay in service; "
                  "errors that come back mean an RMA (NVIDIA's field diagnostic)")
    return Judged(FAIL, text, float(count), [advice])


def _neither(rows: Unread, pages: Unread) -> Judged:
    """No row remapping and no page retirement: a GPU without ECC memory repair, or a MIG GPU with
    instances (NVML does not report remapped rows there)."""
    return Judged(SKIPPED, f"{rows}; {pages}", flags=[
        f"not supported here ({rows}; {pages}): no row remapping or page retirement to check (a GPU without ECC, or "
        "a MIG GPU with instances)"])


def _remap_pending(r: HealthReading) -> Judged:
    rows = r.get("nvmlDeviceGetRemappedRows")
    if not isinstance(rows, Unread):
        corr, unc, pending, _failure = (int(x) for x in rows)
        text = f"{'pending' if pending else 'not pending'} (remapped rows: {corr} correctable, {unc} uncorrectable)"
        if pending:
            return Judged(FAIL, text, 1.0, ["pending row remap: reset the GPU (nvidia-smi -r) when idle or reboot; "
                                             "until then the remapped rows are not in use"])
        return Judged(PASS, text, 0.0)
    pages = r.get("nvmlDeviceGetRetiredPagesPendingStatus")
    if pages is None or rows.why != "unsupported":
        return not_read(rows)
    if isinstance(pages, Unread):
        return _neither(rows, pages) if pages.why == "unsupported" else not_read(pages)
    text = f"retired pages {'pending' if pages else 'not pending'} (row remapping: {rows.error})"
    if pages:
        return Judged(FAIL, text, 1.0, ["memory pages pending retirement: reset the GPU (nvidia-smi -r) when idle "
                                         "or reboot, so they are retired"])
    return Judged(PASS, text, 0.0)


def _remap_failure(r: HealthReading) -> Judged:
    rows = r.get("nvmlDeviceGetRemappedRows")
    if not isinstance(rows, Unread):
        corr, unc, _pending, failure = (int(x) for x in rows)
        text = f"{'failure occurred' if failure else 'no failure'} (remapped rows: {corr} correctable, {unc} " \
               "uncorrectable)"
        if failure:
            return Judged(FAIL, text, 1.0, ["row remapping failed: a memory bank has no spare rows left; drain the "
                                             "GPU and RMA it (NVIDIA's field diagnostic confirms)"])
        return Judged(PASS, text, 0.0)
    single = r.get("nvmlDeviceGetRetiredPages(SINGLE_BIT)")
    double = r.get("nvmlDeviceGetRetiredPages(DOUBLE_BIT)")
    if single is None or rows.why != "unsupported":
        return not_read(rows)
    bad = first_unread(single, double)
    if bad is not None:
        return _neither(rows, bad) if bad.why == "unsupported" else not_read(bad)
    total = len(single) + len(double)
    text = (f"{total} retired pages ({len(double)} double-bit, {len(single)} single-bit; row remapping: "
            f"{rows.error})")
    if total >= RETIRED_PAGES_LIMIT:
        return Judged(FAIL, text, float(total), [f"{total} retired pages, at or over the limit of "
                                                  f"{RETIRED_PAGES_LIMIT}: drain the GPU and RMA it"])
    return Judged(PASS, text, float(total))


def _app_clocks(r: HealthReading) -> Judged:
    sm, sm_def = r.get("nvmlDeviceGetApplicationsClock(SM)"), r.get("nvmlDeviceGetDefaultApplicationsClock(SM)")
    mem, mem_def = r.get("nvmlDeviceGetApplicationsClock(MEM)"), r.get("nvmlDeviceGetDefaultApplicationsClock(MEM)")
    bad = first_unread(sm, sm_def, mem, mem_def)
    if bad is not None:
        return not_read(bad, "this GPU has no application clocks")
    text = f"SM {sm} MHz (default {sm_def}), memory {mem} MHz (default {mem_def})"
    low = [f"{what} {v} of {d} MHz" for what, v, d in (("SM", sm, sm_def), ("memory", mem, mem_def)) if v < d]
    if low:
        return Judged(FAIL, text, float(sm), [f"application clocks below the default ({', '.join(low)}): someone set "
                                               "them with nvidia-smi -ac; restore with nvidia-smi -rac"])
    high = [f"{what} {v} over {d} MHz" for what, v, d in (("SM", sm, sm_def), ("memory", mem, mem_def)) if v > d]
    flags = [f"application clocks above the default ({', '.join(high)}): facts recorded at the default may move"] \
        if high else []
    return Judged(PASS, text, float(sm), flags)


def _locked_clocks(r: HealthReading) -> Judged:
    events = events_read(r)
    clock, default = r.get("nvmlDeviceGetClockInfo(SM)"), r.get("nvmlDeviceGetDefaultApplicationsClock(SM)")
    if isinstance(events, Unread):
        return not_read(events)
    events = int(events)
    text = f"clock events: {event_names(events)}"
    have_clocks = first_unread(clock, default) is None
    if have_clocks:
        text += f"; SM {clock} MHz (default application clock {default})"
    if not events & APP_CLOCKS_BIT:
        return Judged(PASS, text, float(clock) if have_clocks else None)
    if not have_clocks:
        return not_read(first_unread(clock, default))
    if clock < default:
        return Judged(FAIL, text, float(clock), [f"SM clock {clock} MHz held below its default {default} MHz by the "
                                                  "applications-clocks or locked-clocks setting (nvidia-smi -lgc, "
                                                  "-ac): reset with nvidia-smi -rgc (and -rmc, -rac)"])
    return Judged(PASS, text, float(clock), [f"applications_clocks_setting active at SM {clock} MHz, not below the "
                                              f"default {default} MHz"])


def _power_limit(r: HealthReading) -> Judged:
    limit = r.get("nvmlDeviceGetPowerManagementLimit")
    default = r.get("nvmlDeviceGetPowerManagementDefaultLimit")
    enforced = r.get("nvmlDeviceGetEnforcedPowerLimit")
    bad = first_unread(limit, default)
    if bad is not None:
        return not_read(bad, "this GPU has no settable power limit")
    w = lambda mw: f"{mw / 1000:g} W"  # noqa: E731
    text = f"limit {w(limit)} (default {w(default)}, enforced " + \
        (f"{w(enforced)})" if not isinstance(enforced, Unread) else f"unread: {enforced.error})")
    lowest = min(limit, enforced) if not isinstance(enforced, Unread) else limit
    if limit < default:
        return Judged(FAIL, text, lowest / 1000, [f"power limit {w(limit)} below the default {w(default)}: clocks drop "
                                                   f"earlier under load; restore with nvidia-smi -pl {default / 1000:g}"])
    if lowest < default:
        return Judged(FAIL, text, lowest / 1000, [f"enforced power limit {w(lowest)} below the default {w(default)} "
                                                   f"while the set limit is {w(limit)}: another limit (the BMC, "
                                                   "out of band, or a system power policy) caps it; clear it there"])
    return Judged(PASS, text, lowest / 1000)


def _persistence(r: HealthReading) -> Judged:
    mode = r.get("nvmlDeviceGetPersistenceMode")
    if isinstance(mode, Unread):
        return not_read(mode)
    if int(mode):
        return Judged(PASS, "enabled", 1.0)
    return Judged(PASS, "disabled", 0.0, ["persistence mode off: the driver tears the GPU down when its last client "
                                           "exits (a slow first CUDA start; settings may not stick); enable it with "
                                           "nvidia-persistenced or nvidia-smi -pm 1"])


def _compute_mode(r: HealthReading) -> Judged:
    mode = r.get("nvmlDeviceGetComputeMode")
    if isinstance(mode, Unread):
        return not_read(mode)
    mode = int(mode)
    name = COMPUTE_MODES.get(mode, f"unknown ({mode})")
    if mode == 2:
        return Judged(FAIL, name, 2.0, ["compute mode PROHIBITED: no CUDA context can be created, nothing runs; set "
                                         "it back with nvidia-smi -c DEFAULT"])
    if mode not in COMPUTE_MODES:
        return Judged(FAIL, name, float(mode), [f"compute mode {mode} is none NVML documents: check nvidia-smi -q "
                                                 "and set it with nvidia-smi -c DEFAULT"])
    if mode in (1, 3):
        return Judged(PASS, name, float(mode), [f"{name}: one CUDA process at a time on this GPU; pytest-xdist "
                                                 "workers need a GPU each (--gpuprops-gpus)"])
    return Judged(PASS, name, 0.0)



#: the judge of each check judged here, by its name (health_verdicts.py joins them with the link's)
JUDGES = {
    ECC_MODE: _ecc_mode,
    ECC_VOLATILE: lambda r: _ecc_count(r, "VOLATILE"),
    ECC_AGGREGATE: lambda r: _ecc_count(r, "AGGREGATE"),
    REMAP_PENDING: _remap_pending,
    REMAP_FAILURE: _remap_failure,
    APP_CLOCKS: _app_clocks,
    LOCKED_CLOCKS: _locked_clocks,
    POWER_LIMIT: _power_limit,
    PERSISTENCE: _persistence,
    COMPUTE_MODE: _compute_mode,
}
