"""health layer, the PCIe link's judges: its width and generation against the most the GPU and the
slot support, read at rest or under a load (health.sample_under_load), and the slot's maximum
generation against the GPU's; a slower link is said as the share of host bandwidth it leaves."""

from __future__ import annotations

from collections.abc import Sequence

from .assertions import FAIL, PASS, SKIPPED
from .health import (
    GEN_UNDER_LOAD,
    LOAD,
    PCIE_GEN,
    PCIE_MAX_GEN,
    PCIE_WIDTH,
    WIDTH_UNDER_LOAD,
    HealthReading,
    Unread,
)
from .health_judges import (
    IDLE_BIT,
    Judged,
    event_names,
    events_read,
    first_unread,
    in_vm,
    not_read,
    share,
    vm_note,
)

#: per-lane PCIe bandwidth by generation (GB/s after encoding), to say how much a slower link costs
_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def _link(r: HealthReading, cur_call: str, max_call: str, fmt, what: str):
    """((current, maximum), None) for a link reading NVML answered sensibly, else (None, the verdict)."""
    cur, top = r.get(cur_call), r.get(max_call)
    bad = first_unread(cur, top)
    if bad is not None:
        return None, not_read(bad)
    cur, top = int(cur), int(top)
    if cur <= 0 or top <= 0 or cur > top:
        return None, Judged(SKIPPED, f"{fmt(cur)} {what} {fmt(top)}{vm_note(r)}", float(cur), [
            f"NVML reads {fmt(cur)} {what} {fmt(top)}, not a trained link: nothing to judge (it says this under some "
            "virtual machines; read lspci -vv on the host)"])
    return (cur, top), None


def _gen_share(cur: int, top: int) -> str:
    return share(_LANE_GBPS[cur] / _LANE_GBPS[top] if cur in _LANE_GBPS and top in _LANE_GBPS else cur / top)


def judge_link_under_load(kind: str, samples: Sequence[int], top: int, load: str, *, vm: str = "") -> Judged:
    """The PCIe link's ``kind`` ("gen" or "width") as NVML read it ``samples`` times while ``load`` kept
    the link busy, against ``top``, the most the GPU and the slot support (nvmlDeviceGetMaxPcieLinkGeneration
    / nvmlDeviceGetMaxPcieLinkWidth). A busy link trains up to its maximum, so the best reading is what
    it trained to: below ``top`` FAILs, equal PASSes. Readings that are not a trained link (0, above the
    maximum: some virtual machines) are SKIPPED as read; no reading at all FAILs (the check did not
    look). ``vm``: "; virtualization: ..." where not bare metal."""
    fmt = (lambda g: f"Gen{g}") if kind == "gen" else (lambda w: f"x{w}")
    if not samples:
        return Judged(FAIL, f"no reading under load ({load}){vm}", None, [
            f"the PCIe {kind} was not read while the load ran ({load}): the check could not look at a busy link; "
            "read it with nvidia-smi -q -d PCIE while a copy runs"])
    best = max(samples)
    seen = ", ".join(f"{fmt(v)} in {samples.count(v)}" for v in sorted(set(samples), reverse=True))
    text = f"{fmt(best)} of {fmt(top)} under load (best of {len(samples)} readings: {seen}; {load}){vm}"
    if best <= 0 or top <= 0 or best > top:
        return Judged(SKIPPED, text, float(best), [
            f"NVML reads {fmt(best)} of {fmt(top)} under load, not a trained link: nothing to judge (it says this "
            "under some virtual machines; read lspci -vv on the host)"])
    if best == top:
        return Judged(PASS, text, float(best))
    if kind == "gen":
        return Judged(FAIL, text, float(best), [
            f"PCIe Gen{best} of Gen{top} while copies kept the link busy: it trained below the most the GPU and this "
            "slot support; reseat, check the riser/slot/retimer and the BIOS PCIe speed setting; bandwidth to the "
            f"host is {_gen_share(best, top)}"])
    return Judged(FAIL, text, float(best), [
        f"PCIe x{best} of x{top} while copies kept the link busy: it trained narrower than the GPU and this slot "
        f"support; reseat or check the riser/slot; bandwidth to the host is {share(best / top)}"])


def _under_load(r: HealthReading, kind: str) -> Judged:
    key, max_call = ((GEN_UNDER_LOAD, "nvmlDeviceGetMaxPcieLinkGeneration") if kind == "gen"
                     else (WIDTH_UNDER_LOAD, "nvmlDeviceGetMaxPcieLinkWidth"))
    samples, top = list(r.get(key)), r.get(max_call)
    bad = first_unread(top, *samples)
    if bad is not None:
        return not_read(bad)
    return judge_link_under_load(kind, [int(v) for v in samples], int(top), str(r.get(LOAD)), vm=vm_note(r))


def _pcie_width(r: HealthReading) -> Judged:
    if r.get(WIDTH_UNDER_LOAD) is not None:
        return _under_load(r, "width")
    got, early = _link(r, "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth", lambda w: f"x{w}", "of")
    if early:
        return early
    cur, top = got
    text = f"x{cur} of x{top}{vm_note(r)}"
    if cur < top:
        return Judged(FAIL, text, float(cur), [f"PCIe x{cur} of x{top}: reseat or check the riser/slot; bandwidth to "
                                                f"the host is {share(cur / top)}"])
    return Judged(PASS, text, float(cur))


def _pcie_gen(r: HealthReading) -> Judged:
    if r.get(GEN_UNDER_LOAD) is not None:
        return _under_load(r, "gen")
    got, early = _link(r, "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
                       lambda g: f"Gen{g}", "of")
    if early:
        return early
    cur, top = got
    pstate = r.get("nvmlDeviceGetPerformanceState")
    events = events_read(r)
    known = not isinstance(pstate, Unread) and pstate is not None and not isinstance(events, Unread) \
        and events is not None
    state = [f"P{pstate}" if not isinstance(pstate, Unread) and pstate is not None else f"pstate {pstate}",
             f"clock events: {event_names(int(events))}" if not isinstance(events, Unread) and events is not None
             else f"clock events {events}"]
    text = f"Gen{cur} of Gen{top} ({', '.join(state)}){vm_note(r)}"
    if cur == top:
        return Judged(PASS, text, float(cur))
    if not known:
        return Judged(SKIPPED, text, float(cur), [f"Gen{cur} of Gen{top}, and NVML cannot say whether the GPU is idle "
                                                   "(an idle GPU lowers the generation to save power): read it under "
                                                   "load (nvidia-smi -q -d PCIE while a copy runs)"])
    if pstate != 0 or int(events) & IDLE_BIT:
        return Judged(SKIPPED, text, float(cur), [f"Gen{cur} of Gen{top} on an idle GPU: it lowers the generation "
                                                   "to save power at idle, so this reading cannot tell a downtrained "
                                                   "link from a resting one; read it under load (nvidia-smi -q -d PCIE "
                                                   "while a copy runs)"])
    return Judged(FAIL, text, float(cur), [f"PCIe Gen{cur} of Gen{top} on a busy GPU: the link trained below its "
                                            "maximum; reseat, check the riser/slot/retimer and the BIOS PCIe speed "
                                            f"setting; bandwidth to the host is {_gen_share(cur, top)}"])


def _pcie_max_gen(r: HealthReading) -> Judged:
    got, early = _link(r, "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetGpuMaxPcieLinkGeneration",
                       lambda g: f"Gen{g}", "link maximum, GPU")
    if early:
        return early
    link, gpu = got
    text = f"Gen{link} link maximum, GPU Gen{gpu}{vm_note(r)}"
    if link == gpu:
        return Judged(PASS, text, float(link))
    if in_vm(r):
        return Judged(SKIPPED, text, float(link), [f"inside a virtual machine NVML reads the link's maximum as "
                                                    f"Gen{link} of the GPU's Gen{gpu}: the virtual bridge may set "
                                                    "that, not the host slot; check the slot on the host"])
    return Judged(FAIL, text, float(link), [f"the slot or host caps the link at Gen{link} though the GPU does "
                                             f"Gen{gpu}: check the BIOS PCIe speed setting, the riser/retimer or the "
                                             f"slot; bandwidth to the host is {_gen_share(link, gpu)}"])


#: the judge of each link check, by its name
JUDGES = {PCIE_WIDTH: _pcie_width, PCIE_GEN: _pcie_gen, PCIE_MAX_GEN: _pcie_max_gen}
