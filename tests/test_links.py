"""The node-links measure layer (links.py) without a GPU: rates in decimal GB/s, link rates as the
suite's Measurement (unit, noise target, the repeat that confirms a failure), the chase's cycle
laid out in memory and followed line by line, the SMs the latency is sampled on and their medians,
NVLink error counters' growth, NVML's link state read through a stand-in NVML, the test-only plant
that forces a pair through the host, the pair's two GPU locks, and a planted wrong link fact that
fails a recorded H100 reading. Recorded numbers come from the H100 entries of
pytest_gpuprops/facts/sm_90.toml (their source strings)."""

import dataclasses
import re
import statistics
from types import SimpleNamespace

import pytest
from filelock import FileLock, Timeout

from pytest_gpuprops import (
    assertions,
    confirmation,
    devices,
    gpulock,
    inputs,
    links,
    measure,
    nvlink,
    peer_chase,
    results,
    stats,
)
from pytest_gpuprops import facts as gp_facts

H100 = "NVIDIA H100 80GB HBM3"


# -- rates ----------------------------------------------------------------------------------------


def test_gbps_is_decimal_bytes_per_second():
    assert links.gbps(1e9, 1.0) == 1.0
    assert links.gbps(2e9, 0.5) == 4.0
    # 1 GiB is 1.073741824 decimal GB: a GiB a second is not 1 GB/s
    assert links.gbps(links.PEER_BYTES, 1.0) == pytest.approx(1.073741824, rel=1e-12)
    # the recorded H100 copy-engine reading 397.69 GB/s is 1 GiB in 2.69995 ms
    assert links.gbps(links.PEER_BYTES, 2.69995e-3) == pytest.approx(397.69, abs=0.01)


def test_rates_are_each_copy_s_gbps_in_order():
    assert links.rates(1e9, [1.0, 0.5, 0.25]) == [1.0, 2.0, 4.0]
    assert links.rates(links.HOST_BYTES, []) == []
    # the recorded H100 host readings: 256 MiB at 54.96 and 55.04 GB/s
    secs = [links.HOST_BYTES / 54.96e9, links.HOST_BYTES / 55.04e9]
    assert links.rates(links.HOST_BYTES, secs) == pytest.approx([54.96, 55.04], abs=1e-9)


def test_the_copy_sizes_are_one_gib_peer_to_peer_and_256_mib_to_the_host():
    assert (links.PEER_BYTES, links.HOST_BYTES) == (1 << 30, 256 << 20)


# -- a link rate as a Measurement -----------------------------------------------------------------


def test_rate_measurement_is_a_gbps_measurement_of_the_copies_given():
    again = []

    def remeasure():
        again.append(1)
        return "measured again"
    launch = {"src": 0, "dst": 1}
    values = (397.69, 397.70, 397.68)  # recorded 9f007e6c->1559a37f, 397.69, with +-0.01 around it
    m = links.rate_measurement("p2p_ce_copy_gbps", values, what="cudaMemcpyPeerAsync", launch=launch,
                               remeasure=remeasure)
    assert isinstance(m, measure.Measurement)
    assert (m.name, m.unit, m.values, m.kernel, m.launch) == ("p2p_ce_copy_gbps", "GB/s", list(values),
                                                              "cudaMemcpyPeerAsync", {"src": 0, "dst": 1})
    assert m.stop_reason == "3 copies" and m.n == 3 and m.median == 397.69
    assert (m.noise_target, m.overhead_cycles, m.sm_clock_mhz, m.throttle) == (0.02, 0.0, None, [])
    # its own copy of the launch: the caller's dict changing later does not rewrite the measurement
    launch["dst"] = 7
    assert m.launch == {"src": 0, "dst": 1}
    # the repeat a failure is confirmed with is the caller's, called only when asked
    assert again == [] and m.remeasure() == "measured again" and again == [1]


def test_a_link_rate_is_the_median_of_its_settled_copies_so_a_third_of_them_slow_leaves_it_at_the_link():
    # H100 GPU-970b7d1c's 256 MiB copies, a third of them 2-6 % slow (55.31 the fastest): 8 of 12 within 1 % of
    # the series' 90th percentile, their median the reading, their spread the noise
    spread = [55.08, 55.15, 55.31, 55.04, 53.83, 51.88, 52.66, 52.74, 54.99, 54.88, 54.92, 55.2]
    m = links.rate_measurement("host_to_device_gbps", spread, what="x", launch={}, remeasure=None)
    assert (m.center, m.spread, m.noise_target) == ("settled", "settled", 0.02)
    assert m.settled and m.settled_share == pytest.approx(8 / 12) and m.reading == pytest.approx(55.06)
    assert m.noise < 0.003 and "8 of 12 copies at the settled rate" in m.summary()
    # the median of every copy read the slow ones in
    assert m.median == pytest.approx(54.955)


def test_one_slow_copy_leaves_a_link_rate_settled_at_the_others_median():
    # H100 GPU-e369c733, 2026-11-26: GPU -> host copies under load, one of twelve at half speed
    one_slow = [51.91, 52.09, 52.12, 27.66, 50.32, 51.98, 51.45, 51.98, 52.11, 52.05, 51.99, 52.15]
    m = links.rate_measurement("device_to_host_bidir_gbps", one_slow, what="x", launch={}, remeasure=None)
    assert m.settled and m.settled_share == pytest.approx(9 / 12) and m.reading == pytest.approx(52.05)
    assert dataclasses.replace(m, spread="stdev").noise > 0.13


@pytest.mark.parametrize("what, copies", [
    # GPU-2b139b2f's first process on a fresh node: 47.0-51.95 GB/s, its median 3.4 % low; 4 copies near the top
    ("disturbed throughout", [47.34, 48.81, 51.39, 49.03, 47.02, 49.36, 50.78, 50.49, 49.79, 51.67, 51.41, 51.95]),
    # GPU-5969eb1a (H100, 2026-11-26) H2D: a dip to 24.5 GB/s climbing back over eight copies
    ("a dip", [54.5, 54.5, 54.7, 54.6, 24.9, 24.5, 31.0, 36.1, 40.2, 43.9, 47.2, 51.6]),
    # its D2H: five copies at 53.5-53.8, then seven at 50.4-50.7 (the median, 51.6, was MOVED -6.1 %)
    ("a level drop", [53.5, 53.8, 53.5, 53.8, 53.6, 52.6, 50.7, 50.4, 50.6, 50.5, 50.7, 50.6]),
    # its D2H in the next process: 54.9 and 55.1, then ten at 53.4-53.9 (the median, 53.78, MOVED -2.2 %)
    ("the rest 2 % down", [54.9, 55.1, 53.9, 53.8, 53.7, 53.9, 53.7, 53.8, 53.7, 53.4, 53.8, 53.5]),
])
def test_a_series_with_fewer_than_half_its_copies_at_the_settled_rate_is_noisy(what, copies):
    m = links.rate_measurement("device_to_host_gbps", copies, what="x", launch={}, remeasure=None)
    assert m.settled_share < stats.SETTLED_MIN_SHARE and not m.settled, what
    assert m.noise < m.noise_target  # the settled copies agree: there are too few of them
    # and the verdict says that, not a noise over its target (a band above every reading: below the band an
    # unsettled reading may be the disturbance, so it is not judged)
    fact = gp_facts.Fact(name="device_to_host_gbps", arch="sm_90", unit="GB/s", value=56.5, tolerance_rel=0.01,
                         method="m", source="s")
    assert m.reading < fact.value - fact.tolerance
    v = assertions.evaluate(fact, m)
    assert v.status == assertions.NOISY and v.flags[0].startswith(
        f"{round(m.settled_share * 12)} of 12 copies at the settled rate, under 50%: a disturbance through the series")
    # measured again and settled: the first is discarded, and the verdict says why
    settled = links.rate_measurement("device_to_host_gbps", [56.5] * 12, what="x", launch={}, remeasure=None)
    final = confirmation.confirm(v, lambda: assertions.evaluate(fact, settled))
    assert final.status == assertions.PASS and any(
        f.startswith(f"{confirmation.DISCARDED_FIRST}, noisy: {round(m.settled_share * 12)} of 12 copies at the settled "
                     "rate") for f in final.flags)


@pytest.mark.parametrize("value, status", [(53.7, "PASS"), (51.5, "FAIL")])
def test_an_unsettled_link_rate_at_or_above_its_band_is_judged_and_never_compared(value, status):
    """A disturbance only slows copies: GPU-ec662279's H2D window (2026-11-27) read 54.95 GB/s from copies
    that never settled, inside the band; that shows the link at least that fast, so the verdict is judged,
    flagged, and kept out of the unit's baselines and the fleet compare (a baseline above it says nothing)."""
    level_drop = [53.5, 53.8, 53.5, 53.8, 53.6, 52.6, 50.7, 50.4, 50.6, 50.5, 50.7, 50.6]  # GPU-5969eb1a's D2H
    m = links.rate_measurement("device_to_host_gbps", level_drop, what="x", launch={}, remeasure=None)
    assert not m.settled and m.reading == pytest.approx(53.6)
    fact = gp_facts.Fact(name="device_to_host_gbps", arch="sm_90", unit="GB/s", value=value, tolerance_rel=0.01,
                         method="m", source="s")
    v = assertions.evaluate(fact, m)
    assert v.status == status and v.flags[0].startswith(f"{assertions.JUDGED_UNSETTLED}: 5 of 12 copies")
    assert v.flags[0].endswith("inside the band" if status == "PASS" else "above the band")
    v = dataclasses.replace(v, gpu={"uuid": "GPU-1", "index": 0, "name": "NVIDIA H100 80GB HBM3"})
    assert not results._baseline_reading(v)
    settled = dataclasses.replace(v, flags=[])
    assert results._baseline_reading(settled)  # the same verdict from settled copies is one
    # a latency (or any spread but "settled") that never settled is NOISY wherever it reads
    stdev = dataclasses.replace(m, spread="stdev", noise_target=0.001)
    assert assertions.evaluate(fact, stdev).status == assertions.NOISY


def test_an_unsettled_link_rate_exactly_at_its_bands_lower_edge_is_judged():
    at_edge = [53.0] * 5 + [50.0] * 7  # 5 of 12 settled, their median 53.0: the edge of 54.0 ± 1.0
    m = links.rate_measurement("device_to_host_gbps", at_edge, what="x", launch={}, remeasure=None)
    fact = gp_facts.Fact(name="device_to_host_gbps", arch="sm_90", unit="GB/s", value=54.0, tolerance_abs=1.0,
                         method="m", source="s")
    assert not m.settled and m.reading == 53.0 == fact.value - fact.tolerance
    assert assertions.evaluate(fact, m).status == assertions.PASS
    assert assertions.evaluate(dataclasses.replace(fact, value=54.01), m).status == assertions.NOISY


def test_settled_series_read_their_median_and_a_latency_keeps_its_median():
    settled = [52.13, 51.87, 52.03, 51.76, 51.9, 51.91, 51.88, 51.94, 51.81, 51.86, 51.46, 51.93]
    m = links.rate_measurement("device_to_host_bidir_gbps", settled, what="x", launch={}, remeasure=None)
    assert m.settled and m.settled_share == pytest.approx(11 / 12) and abs(m.reading / m.median - 1) < 0.001
    # a latency's launches (a disturbance makes them slower): their median, interquartile spread, no share
    lat = links.rate_measurement("p2p_latency_far_ns", [800.0, 801.0, 950.0], what="x", launch={}, remeasure=None,
                                 settled=False)
    assert (lat.center, lat.spread, lat.reading, lat.settled_share) == ("median", "iqr", 801.0, None)


def test_the_link_methods_say_how_the_copies_make_the_reading():
    assert links.SETTLED_TEXT == ("the median of the copies at the settled rate (within 1% of their 90th percentile; "
                                  "NOISY where fewer than 50% of them are)")

# -- the latency chase ----------------------------------------------------------------------------


def test_chase_values_are_ns_then_cycles_per_hop_of_each_launch():
    hops = peer_chase.CHASE_HOPS
    # totals of two launches, (cycles, ns): 1688 and 1686 cycles, 852 and 851 ns a hop (recorded per SM)
    results = [(1688 * hops, 852 * hops), (1686 * hops, 851 * hops)]
    assert peer_chase.chase_values(results, hops) == ([852.0, 851.0], [1688.0, 1686.0])
    assert peer_chase.chase_values([(30, 10)], 4) == ([2.5], [7.5])
    assert peer_chase.chase_values([], hops) == ([], [])


def _follow(words, base, lines, stride, start):
    """The lines visited from line ``start`` on, by reading each line's first word as the next
    line's address, as the kernel's chase does; the start line again at the end."""
    step = stride // 8
    seen = [start]
    line = start
    for _ in range(lines):
        address = int(words[line * step])
        assert address >= base and (address - base) % stride == 0, f"line {line} points at {address:#x}"
        line = (address - base) // stride
        assert 0 <= line < lines
        seen.append(line)
    return seen


@pytest.mark.parametrize("lines, stride, seed", [(64, 128, 1), (1000, 128, 7), (37, 256, 3)])
def test_chase_layout_is_one_cycle_through_every_line(lines, stride, seed):
    base = 0x7F3A_0000_0000  # a device address of the size CUDA hands out
    words = peer_chase.chase_layout(base, lines, seed=seed, stride=stride)
    assert str(words.dtype) == "uint64" and len(words) == lines * stride // 8
    step = stride // 8
    heads = [int(w) for w in words[::step]]
    assert all(base <= w < base + lines * stride and (w - base) % stride == 0 for w in heads)
    # only each line's first word is written; the rest of the line stays 0
    assert not any(int(w) for k, w in enumerate(words) if k % step)
    # from any line: every line once, then back where it started (one cycle, not several)
    for start in (0, lines // 2, lines - 1):
        seen = _follow(words, base, lines, stride, start)
        assert seen[-1] == start and sorted(seen[:-1]) == list(range(lines))


def test_chase_layout_is_random_and_repeatable_by_its_seed():
    base, lines = 1 << 40, 256
    a = peer_chase.chase_layout(base, lines)
    assert (a == peer_chase.chase_layout(base, lines, seed=1)).all()
    assert not (a == peer_chase.chase_layout(base, lines, seed=2)).all()
    order = _follow(a, base, lines, 128, 0)
    # not the lines in address order (a prefetcher's easy case): few hops go to the next line
    assert sum(b == a_ + 1 for a_, b in zip(order, order[1:])) < lines // 10


def test_the_chase_is_the_footprint_s_lines_of_128_bytes():
    words = peer_chase.chase_layout(0, peer_chase.CHASE_FOOTPRINT // 128)
    assert words.nbytes == peer_chase.CHASE_FOOTPRINT == 4 << 20
    assert len(_follow(words, 0, peer_chase.CHASE_FOOTPRINT // 128, 128, 5)) == 32768 + 1


def test_sampled_sms_are_spread_over_the_gpu():
    # the eight SMs of an H100 SXM (132 SMs) the recorded per-SM latencies name: SM 0, 16, 33, ... 115
    assert peer_chase.sampled_sms(132) == [0, 16, 33, 49, 66, 82, 99, 115]
    assert peer_chase.sampled_sms(8) == list(range(8))
    assert peer_chase.sampled_sms(3) == [0, 1, 2]  # fewer SMs than samples: each once
    assert peer_chase.sampled_sms(100, count=4) == [0, 25, 50, 75]
    assert peer_chase.CHASE_SMS == 8


def test_chase_per_sm_is_each_sm_s_median_ns_or_cycles():
    per_sm = {66: ([801.0, 800.0, 805.0], [1585.0, 1583.0, 1590.0]),
              0: ([852.0, 853.0, 851.0], [1688.0, 1690.0, 1686.0])}
    assert peer_chase.chase_per_sm(per_sm, 0) == {0: 852.0, 66: 801.0}
    assert peer_chase.chase_per_sm(per_sm, 1) == {0: 1688.0, 66: 1585.0}
    assert list(peer_chase.chase_per_sm(per_sm, 0)) == [0, 66]  # by SM, whatever order they came in
    # the recorded per-SM medians of 4a845d30->07bad91a (first process): their median is the pair's 847.5 ns
    recorded = {0: 852, 16: 851, 33: 858, 49: 850, 66: 801, 82: 799, 99: 845, 115: 845}
    got = peer_chase.chase_per_sm({sm: ([ns] * 3, [0.0] * 3) for sm, ns in recorded.items()}, 0)
    assert statistics.median(got.values()) == 847.5


# -- NVLink error counters ------------------------------------------------------------------------


def _state(errors):
    return nvlink.NvLinkState(links_up=sorted(errors), links_down=[], version=4.0, speed_gbps={}, errors=errors)


BEFORE = _state({0: {"replay": 5, "recovery": 0, "crc_flit": 0, "crc_data": 10},
                 1: {"replay": 0, "recovery": 2, "crc_flit": 0},
                 10: {"replay": 1}})


def test_error_growth_names_the_counters_that_grew_and_by_how_much():
    after = _state({0: {"replay": 7, "recovery": 0, "crc_flit": 0, "crc_data": 14},
                    1: {"replay": 0, "recovery": 2, "crc_flit": 1, "crc_data": 3},
                    10: {"replay": 4}})
    assert nvlink.error_growth(BEFORE, after, nvlink.JUDGED_COUNTERS) == {
        "link 0 replay": 2, "link 1 crc_flit": 1, "link 10 replay": 3}
    # by link number, not as text (link 10 after link 1)
    assert list(nvlink.error_growth(BEFORE, after, nvlink.JUDGED_COUNTERS)) == [
        "link 0 replay", "link 1 crc_flit", "link 10 replay"]
    # only the counters named: the data CRC is reported apart from the judged ones
    assert nvlink.error_growth(BEFORE, after, ("crc_data",)) == {"link 0 crc_data": 4}
    assert nvlink.error_growth(BEFORE, after) == {"link 0 replay": 2, "link 0 crc_data": 4, "link 1 crc_flit": 1,
                                                 "link 10 replay": 3}
    assert nvlink.JUDGED_COUNTERS == ("replay", "recovery", "crc_flit")


def test_no_growth_is_an_empty_answer():
    assert nvlink.error_growth(BEFORE, BEFORE) == {}


def test_a_link_or_counter_without_an_earlier_reading_has_no_growth():
    """A link that came up during the run (or a counter NVML answered only the second time) has no
    earlier reading: what its counter holds is since the driver loaded, not growth in the run."""
    after = _state({**BEFORE.errors, 2: {"replay": 9, "crc_flit": 4}, 1: {**BEFORE.errors[1], "crc_data": 6}})
    assert nvlink.error_growth(BEFORE, after) == {}


def test_a_counter_that_fell_was_reset_not_grown():
    after = _state({**BEFORE.errors, 0: {**BEFORE.errors[0], "replay": 0}})
    assert nvlink.error_growth(BEFORE, after) == {}


# -- NVML's link state, through a stand-in NVML ---------------------------------------------------


class StandInNvml:
    """The pynvml calls nvlink_state makes, answered from ``links``: {link: {"active", "version",
    "errors": {counter constant: value}, "speed_mbps"}}; a link not there raises, as NVML does for a
    link the GPU does not have."""

    class NVMLError(Exception):
        pass

    NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
    NVML_FI_DEV_NVLINK_GET_SPEED = 164

    def __init__(self, links_):
        self.links = links_

    def _link(self, handle, link):
        assert handle == "handle of 0000:18:00.0"
        if link not in self.links:
            raise self.NVMLError(f"no link {link}")
        return self.links[link]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        return 1 if self._link(handle, link)["active"] else 0

    def nvmlDeviceGetNvLinkVersion(self, handle, link):
        return self._link(handle, link)["version"]

    def nvmlDeviceGetNvLinkErrorCounter(self, handle, link, counter):
        errors = self._link(handle, link)["errors"]
        if counter not in errors:
            raise self.NVMLError("not supported")
        return errors[counter]

    def nvmlDeviceGetFieldValues(self, handle, fields):
        ((field_id, link),) = fields
        assert field_id == self.NVML_FI_DEV_NVLINK_GET_SPEED
        return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=self._link(handle, link)["speed_mbps"]))]


GPU = SimpleNamespace(index=0, pci_bus_id="0000:18:00.0")


def _nvml(monkeypatch, links_):
    nv = StandInNvml(links_)
    monkeypatch.setattr(devices, "_nvml_handle", lambda pci: (nv, f"handle of {pci}"))
    return nv


def test_nvlink_state_of_an_h100_with_one_link_down(monkeypatch):
    """18 NVLink 4.0 links at 26.562 GB/s, as NVML reported them on the H100 nodes measured; link 5
    planted down, link 3 without a data CRC counter."""
    link = {"active": True, "version": 6, "speed_mbps": 26562, "errors": {0: 0, 1: 0, 2: 0, 3: 2}}
    table = {k: dict(link) for k in range(18)}
    table[5] = {**link, "active": False}
    table[3] = {**link, "errors": {0: 1, 1: 0, 2: 0}}
    _nvml(monkeypatch, table)
    state = nvlink.nvlink_state(GPU)
    assert state.links_up == [k for k in range(18) if k != 5] and state.links_down == [5] and state.count == 17
    assert state.version == 4.0
    assert state.speed_gbps == {k: 26.562 for k in range(18) if k != 5}
    assert state.errors[0] == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 2}
    assert state.errors[3] == {"replay": 1, "recovery": 0, "crc_flit": 0}
    assert 5 not in state.errors


def test_nvlink_state_without_nvlinks_or_nvml(monkeypatch):
    _nvml(monkeypatch, {})  # a PCIe GPU: NVML has no link 0..17
    state = nvlink.nvlink_state(GPU)
    assert (state.links_up, state.links_down, state.version, state.count) == ([], [], None, 0)
    monkeypatch.setattr(devices, "_nvml_handle", lambda pci: (None, None))
    assert nvlink.nvlink_state(GPU) is None


def test_nvlink_state_names_the_newest_version_of_its_links(monkeypatch):
    link = {"active": True, "speed_mbps": 0, "errors": {}}
    _nvml(monkeypatch, {0: {**link, "version": 4}, 1: {**link, "version": 6}})
    state = nvlink.nvlink_state(GPU)
    assert state.version == 4.0 and state.speed_gbps == {}  # a speed of 0 is not reported
    _nvml(monkeypatch, {0: {**link, "version": 99}})
    assert nvlink.nvlink_state(GPU).version is None  # a version NVML added since: unnamed, not guessed


def test_nvlink_state_counts_the_gpus_nvml_sees_on_the_machine(monkeypatch):
    nv = _nvml(monkeypatch, {0: {"active": False, "version": 6, "speed_mbps": 0, "errors": {}}})
    assert nvlink.nvlink_state(GPU).machine_gpus is None  # an NVML that cannot count: unknown, not 1
    nv.nvmlDeviceGetCount = lambda: 8
    assert nvlink.nvlink_state(GPU).machine_gpus == 8


@pytest.mark.parametrize("machine_gpus, up, applies", [
    (1, [], False),          # a VM given one GPU of an NVLink board: 0 of 18 up, nothing to check
    (2, [], True),           # a peer on the machine and no link up: a finding
    (1, [0, 1], True),       # one GPU with links up: judged
    (None, [], True),        # NVML could not count the GPUs: judged, never skipped on a guess
])
def test_link_facts_skip_only_where_the_machine_has_no_fabric(machine_gpus, up, applies):
    state = nvlink.NvLinkState(links_up=up, links_down=[k for k in range(18) if k not in up], version=None,
                               speed_gbps={}, errors={}, machine_gpus=machine_gpus)
    why = nvlink.no_fabric(state)
    assert (why is None) == applies
    if why:
        assert "1 GPU on this machine" in why and "18 NVLinks" in why and "node with its peers" in why


def test_nvml_versions_name_the_nvlink_generations():
    """nvml.h's nvmlNvlinkVersion_t: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0 (Hopper), 7 = 5.0."""
    assert nvlink.NVLINK_VERSIONS == {1: 1.0, 2: 2.0, 3: 2.2, 4: 3.0, 5: 3.1, 6: 4.0, 7: 5.0}
    h100 = gp_facts.load_facts("sm_90", gpu_name=H100)["nvlink_version"]
    assert h100.value == nvlink.NVLINK_VERSIONS[6]


# -- the test-only plant: a pair forced through the host ------------------------------------------


@pytest.mark.parametrize("value, planted", [(None, False), ("", False), ("0", False), ("1", True)])
def test_plant_no_peer_is_on_for_1_off_for_0_empty_or_unset(monkeypatch, value, planted):
    """The values start-up lets through (inputs.check_plant_no_peer refuses any other)."""
    if value is None:
        monkeypatch.delenv(links.NO_PEER_ENV, raising=False)
    else:
        monkeypatch.setenv(links.NO_PEER_ENV, value)
        inputs.check_plant_no_peer()
    assert links.NO_PEER_ENV == "GPUPROPS_PLANT_NO_PEER"
    assert links.plant_no_peer() is planted


# -- the pair's locks -----------------------------------------------------------------------------


@pytest.fixture
def taken(monkeypatch):
    """gpulock.gpu_lock (the one links.py calls) replaced by locks that log their taking and release."""
    log = []

    class Logged:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            log.append(("take", self.index))

        def __exit__(self, *exc):
            log.append(("release", self.index))
    assert links.gpulock is gpulock
    monkeypatch.setattr(gpulock, "gpu_lock", Logged)
    return log


@pytest.mark.parametrize("src, dst", [(0, 1), (1, 0), (3, 1)])
def test_pair_lock_takes_both_gpus_lower_index_first(taken, src, dst):
    low, high = sorted((src, dst))
    with links.pair_lock(src, dst):
        assert taken == [("take", low), ("take", high)]
    assert taken[2:] == [("release", high), ("release", low)]


def test_pair_lock_of_one_gpu_takes_its_lock_once(taken):
    with links.pair_lock(2, 2):
        assert taken == [("take", 2)]
    assert taken == [("take", 2), ("release", 2)]


def test_pair_lock_holds_both_gpus_files_against_another_process(monkeypatch, tmp_path):
    """The real file locks: while a pair is measured, no other process (here another lock object on
    the same file, as another process has) can take either GPU; after it, both are free."""
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))

    def free(index):
        other = FileLock(str(gpulock.gpu_lock_path(index)), timeout=0)
        try:
            other.acquire()
        except Timeout:
            return False
        other.release()
        return True
    with links.pair_lock(1, 0):
        assert not free(0) and not free(1) and free(2)
    assert free(0) and free(1)


# -- the facts: the method the code runs, a planted wrong value fails ------------------------------


def test_the_h100_link_facts_say_the_method_links_py_runs():
    f = gp_facts.load_facts("sm_90", gpu_name=H100)
    rate = f"{links.REPEATS} after {links.WARMUP}, {links.SETTLED_TEXT}"
    for name in ("p2p_ce_copy_gbps", "p2p_ce_bidir_gbps", "p2p_sm_load_gbps", "p2p_sm_store_gbps"):
        assert rate in f[name].method, name
        assert f[name].unit == "GB/s" and f[name].scope == "gpu"
    window = (f"{links.HOST_ROUNDS} series of {links.REPEATS} copies after {links.WARMUP}, taken in turns with the "
              "other host facts' series")
    for gpu in (H100, "NVIDIA H200"):
        g = gp_facts.load_facts("sm_90", gpu_name=gpu)
        for name in ("host_to_device_gbps", "device_to_host_gbps", "device_to_host_bidir_gbps"):
            assert window in g[name].method and "the reading the best series'" in g[name].method, (gpu, name)
            assert f"{links.HOST_CONFIRM_PAUSE_S:g} s after the last" in g[name].method, (gpu, name)
            assert g[name].unit == "GB/s" and g[name].scope == "gpu"
    for name in ("p2p_ce_copy_gbps", "p2p_ce_bidir_gbps", "p2p_sm_load_gbps", "p2p_sm_store_gbps"):
        assert f"{links.PEER_BYTES >> 30} GiB" in f[name].method, name
    for name in ("host_to_device_gbps", "device_to_host_gbps"):
        assert f"{links.HOST_BYTES >> 20} MiB" in f[name].method, name
    for name in ("p2p_latency_near_ns", "p2p_latency_near_cycles", "p2p_latency_far_ns", "p2p_latency_far_cycles"):
        method = f[name].method
        assert f"{peer_chase.CHASE_HOPS} hops" in method and f"{peer_chase.CHASE_FOOTPRINT >> 20} MiB" in method
        assert f"{peer_chase.CHASE_SMS} SMs" in method
        assert f"{peer_chase.CHASE_LAUNCHES - 1} launches per SM after one" in method
        assert ("nearest SM" if "near" in name else "farthest SM") in method
    sms = ", ".join(str(sm) for sm in peer_chase.sampled_sms(132))
    assert all(f"SMs {sms} of 132" in f[n].method for n in ("p2p_latency_near_ns", "p2p_latency_far_ns"))


def test_the_nearest_and_farthest_sampled_sm_are_the_latency_facts():
    """H200 GPU-d74fea8f (2026-11-26): six of its eight sampled SMs near the link, so the median over them
    read 803 where its neighbour read 849; the nearest and farthest SM's launches do not move with that."""
    per_sm_ns = {0: 799.5, 16: 803.4, 33: 807.9, 49: 797.2, 66: 852.3, 82: 803.1, 99: 847.6, 115: 798.2}
    per_sm = {sm: ([ns, ns + 0.1, ns - 0.1], [ns * 1.98, ns * 1.98, ns * 1.98]) for sm, ns in per_sm_ns.items()}
    sm, ns = peer_chase.chase_extreme(per_sm, 0, "near")
    assert sm == 49 and ns == pytest.approx([797.2, 797.3, 797.1])
    sm, cycles = peer_chase.chase_extreme(per_sm, 1, "far")
    assert sm == 66 and cycles == pytest.approx([852.3 * 1.98] * 3)
    # a tie goes to the lower SM number, so a repeat picks the same SM
    assert peer_chase.chase_extreme({3: ([800.0], [1.0]), 1: ([800.0], [1.0])}, 0, "near")[0] == 1


def _planted_copy(tmp_path, name, value, *, drop_units_range=False):
    """The packaged sm_90.toml with the H100 section's ``name`` set to ``value`` (and, if asked, its
    units_range line removed)."""
    text = (gp_facts.PACKAGED_DIR / "sm_90.toml").read_text()
    head = f'[gpus."{H100}".{name}]\nvalue = '
    assert text.count(head) == 1
    pattern = re.escape(head) + r"[0-9.]+\n" + (r"(tolerance_rel = [0-9.]+\n)units_range = [^\n]*\n"
                                                if drop_units_range else "")
    planted, n = re.subn(pattern, lambda m: head + f"{value}\n" + (m.group(1) if drop_units_range else ""), text)
    assert n == 1 and planted != text
    path = tmp_path / "sm_90.toml"
    path.write_text(planted)
    return path


def _copies(values):
    return links.rate_measurement("p2p_ce_copy_gbps", values, what="cudaMemcpyPeerAsync", launch={"src": 0, "dst": 1},
                                  remeasure=None)


def test_a_planted_copy_engine_rate_outside_the_units_recorded_is_refused_when_read(tmp_path):
    path = _planted_copy(tmp_path, "p2p_ce_copy_gbps", 440)
    with pytest.raises(gp_facts.FactsError) as exc:
        gp_facts.load_facts("sm_90", path, gpu_name=H100)
    assert (f'fact [gpus."{H100}".p2p_ce_copy_gbps] units_range = [395.87, 397.84] reaches outside value +- '
            "tolerance (426.8 .. 453.2)") in str(exc.value)


def test_a_planted_wrong_copy_engine_rate_fails_a_recorded_h100_reading(tmp_path):
    # 397.7 GB/s: the recorded 9f007e6c->1559a37f 397.69 and 1559a37f->9f007e6c 397.79, between them
    reading = _copies([397.69, 397.70, 397.71])
    packaged = gp_facts.load_facts("sm_90", gpu_name=H100)["p2p_ce_copy_gbps"]
    assert assertions.evaluate(packaged, reading).status == assertions.PASS
    path = _planted_copy(tmp_path, "p2p_ce_copy_gbps", 440, drop_units_range=True)
    fact = gp_facts.load_facts("sm_90", path, gpu_name=H100)["p2p_ce_copy_gbps"]
    assert fact.value == 440 and fact.units_range is None
    assert fact.tolerance == pytest.approx(440 * packaged.tolerance_rel)
    v = assertions.evaluate(fact, reading)
    assert v.status == assertions.FAIL and v.measured == 397.70
    assert v.expected == f"440 ± {fact.tolerance:.3g} GB/s" and v.unit == "GB/s"


# -- a host link's window: its best series ---------------------------------------------------------


def test_a_host_window_takes_one_series_of_each_host_fact_a_round_in_turns():
    asked = []

    class Node(links.Node):
        def __init__(self):
            pass

        def host_copy(self, index, direction):
            asked.append((direction, index))
            return [float(len(asked))]

        def host_copy_loaded(self, index, direction):
            asked.append((direction + "_loaded", index))
            return [float(len(asked))]

    window = Node().host_window(3)
    assert asked == [("h2d", 3), ("d2h", 3), ("d2h_loaded", 3)] * links.HOST_ROUNDS
    assert window == {"h2d": [[1.0 + 3 * k] for k in range(links.HOST_ROUNDS)],
                      "d2h": [[2.0 + 3 * k] for k in range(links.HOST_ROUNDS)],
                      "d2h_loaded": [[3.0 + 3 * k] for k in range(links.HOST_ROUNDS)]}


def test_the_peer_chase_says_the_clock_its_launches_ran_at_from_their_own_cycles_over_nanoseconds():
    # H100 GPU-88396b0d, 2026-11-27: 1592.6 cycles and 798.3 ns a hop in a process at 1995 MHz
    per_sm = {0: ([798.3, 798.0, 796.5], [1592.6, 1592.0, 1593.0]), 66: ([800.0], [1574.0])}
    assert peer_chase.chase_clock(per_sm, 0) == {"clock_beside_mhz": 1995.0, "clock_beside_range_mhz": [1995.0, 2000.0]}
    assert peer_chase.chase_clock(per_sm, 66) == {"clock_beside_mhz": 1967.5, "clock_beside_range_mhz": [1967.5, 1967.5]}


def test_a_chase_launch_that_read_no_time_is_left_out_of_its_clock():
    # a launch whose %globaltimer did not move (0 ns) has no clock; every launch that read time has one
    per_sm = {0: ([0.0, 1.0, 0.8], [1592.6, 1.98, 1.584])}
    assert peer_chase.chase_clock(per_sm, 0) == {"clock_beside_mhz": 1980.0, "clock_beside_range_mhz": [1980.0, 1980.0]}
    assert peer_chase.chase_clock({0: ([0.0], [1592.6])}, 0) == {}
