"""hwtests/test_node_links.py through the plugin on fake GPUs (no GPU, no CuPy): on a node with one
GPU the pair tests skip, saying the pair facts need two, and measure nothing; on two GPUs a pair
test's verdicts name the pair, the report's JSON and the terminal carry the GPU x GPU matrix, and
the fleet rule compares the two directions. The node's measurements are a stand-in (links.Node
needs CuPy) that hands out copy-engine readings recorded on H100s (pytest_gpuprops/facts/sm_90.toml,
p2p_ce_copy_gbps: 9f007e6c->1559a37f 397.69) or planted ones, and refuses anything else."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from gp_testing import fake_gpu_conftest

from pytest_gpuprops import links, report_schema, session

HWTESTS = Path(__file__).parent.parent / "hwtests"
PAIR_FACTS = ("p2p_peer_access, p2p_ce_copy_gbps, p2p_ce_bidir_gbps, p2p_sm_load_gbps, p2p_sm_store_gbps, "
              "p2p_latency_near_ns, p2p_latency_near_cycles, p2p_latency_far_ns, p2p_latency_far_cycles")
PAIR_TESTS = "peer_access or copy_engine or sm_kernel or peer_latency or errors_steady"


class GivenNode:
    """links.Node's stand-in: ``ce_copy`` answers from ``copies`` {(src, dst): [GB/s, ...]} and logs
    each call in ``asked``; any other measurement fails the test that asks for it."""

    copies: dict = {}
    asked: list = []

    def __init__(self, kernels_dir, cache_dir=None):
        self.kernels_dir = kernels_dir

    def close(self):
        pass

    def ce_copy(self, src, dst):
        GivenNode.asked.append((src, dst))
        return list(self.copies[(src, dst)])

    def __getattr__(self, name):
        raise AssertionError(f"the stand-in node was asked to measure {name}: not given")


def _run(pytester, monkeypatch, count, *args, node=GivenNode):
    """test_node_links.py on ``count`` fake H100s (renamed: hwtests/test_node_links.py may be imported
    in this process already), the node's measurements given by GivenNode."""
    pytester.makeconftest(fake_gpu_conftest("sm_90", count=count).replace('"Fake GPU"', '"NVIDIA H100 80GB HBM3"'))
    pytester.makepyfile(test_links_of_the_node=(HWTESTS / "test_node_links.py").read_text())
    monkeypatch.setattr(session.GpuPropsState, "runner",
                        lambda self, index=None: SimpleNamespace(kernels_dir=pytester.path, cache_dir=None))
    monkeypatch.setattr(links, "Node", node)
    monkeypatch.setattr(GivenNode, "asked", [])
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(pytester.path))  # pair_lock's files, of this test only
    return pytester.runpytest_inprocess("-p", "no:randomly", "-m", "node", *args)


def test_on_one_gpu_the_pair_tests_skip_saying_they_need_two(pytester, monkeypatch):
    r = _run(pytester, monkeypatch, 1, "-rs", "-k", PAIR_TESTS)
    r.assert_outcomes(skipped=8)  # peer access, CE copy, CE both ways, SM load + store, latency near + far; NVLink errors
    reasons = {}
    for line in r.stdout.lines:  # "SKIPPED [2] test_links_of_the_node.py:115: <reason>"
        m = re.fullmatch(r"SKIPPED \[(\d+)\] test_links_of_the_node\.py:\d+: (.*)", line)
        if m:
            reasons[m.group(2)] = reasons.get(m.group(2), 0) + int(m.group(1))
    assert reasons == {f"this node has 1 GPU(s): the pair facts ({PAIR_FACTS}) need two; not run": 7,
                       "this node has 1 GPU: no peer to load the NVLinks with": 1}
    assert GivenNode.asked == []  # nothing measured
    # the pair tests' one parameter on such a node says what it is
    ids = pytester.runpytest_inprocess("-p", "no:randomly", "-m", "node", "-k", PAIR_TESTS, "--collect-only", "-q")
    assert [line for line in ids.stdout.lines if "::test_" in line] == [
        f"test_links_of_the_node.py::{name}" for name in (
            "test_peer_access[one-gpu]", "test_copy_engine_rate[one-gpu]", "test_copy_engine_rate_both_ways[one-gpu]",
            "test_sm_kernel_rate[one-gpu-load]", "test_sm_kernel_rate[one-gpu-store]", "test_peer_latency[one-gpu-near]",
            "test_peer_latency[one-gpu-far]",
            "test_nvlink_errors_steady")]


def test_on_two_gpus_a_pair_verdict_names_the_pair_and_the_report_has_the_matrix(pytester, monkeypatch):
    # GPU 0 -> 1 as recorded; GPU 1 -> 0 planted at 357.8 GB/s (10 % under the band's 396.853 ± 3 %)
    monkeypatch.setattr(GivenNode, "copies", {(0, 1): [397.69, 397.70, 397.68] * 4, (1, 0): [357.8] * 12})
    r = _run(pytester, monkeypatch, 2, "-k", "test_copy_engine_rate and not both_ways", "--gpuprops-gpus", "all",
             "--gpuprops-report", "r.json")
    r.assert_outcomes(passed=1, failed=1)
    # the failing pair measured three times (a failure is confirmed), the passing one once; both locks each time
    assert sorted(GivenNode.asked) == [(0, 1), (1, 0), (1, 0), (1, 0)]
    assert sorted(p.name for p in pytester.path.glob("gpuprops-gpu*.lock")) == ["gpuprops-gpu0.lock",
                                                                                "gpuprops-gpu1.lock"]
    data = json.loads((pytester.path / "r.json").read_text())
    report_schema.check_report(data, "r.json")
    facts = sorted(data["facts"], key=lambda f: f["gpu"]["index"])
    assert [(f["fact"], f["status"], f["gpu"]["index"], f["peer"]["index"]) for f in facts] == [
        ("p2p_ce_copy_gbps", "PASS", 0, 1), ("p2p_ce_copy_gbps", "FAIL", 1, 0)]
    assert facts[1]["peer"]["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    labels = ["node1:gpu0 (GPU-00000000)", "node1:gpu1 (GPU-00000001)"]
    assert data["links"] == {"p2p_ce_copy_gbps": {"unit": "GB/s", "gpus": labels, "cells": [
        [None, {"value": 397.69, "status": "PASS"}], [{"value": 357.8, "status": "FAIL"}, None]]}}
    out = r.stdout.str()
    assert "GPU:      GPU 1 NVIDIA H100 80GB HBM3 (GPU-00000001-0000-0000-0000-000000000000) on node1 -> peer GPU 0 " \
           "(GPU-00000000-0000-0000-0000-000000000000)" in out
    r.stdout.fnmatch_lines([
        "*node links: GPU x GPU*",
        "p2p_ce_copy_gbps (GB/s; row: the GPU that issued, column: its peer)",
        "*node1:gpu0 (GPU-00000000)*node1:gpu1 (GPU-00000001)",
        "*",
        "node1:gpu0 (GPU-00000000)  x *397.7",
        "node1:gpu1 (GPU-00000001)  357.8 FAIL *x",
    ], consecutive=True)
    # the two directions are one case of the fleet rule, 11 % apart and past the units recorded: both flagged
    r.stdout.fnmatch_lines(["gpuprops outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)"])


class HostNode(GivenNode):
    """The stand-in with host copies: ``host_window`` hands out ``windows`` in order ({fact key: [series]})."""

    windows: list = []

    def host_cpus(self, index):
        return None

    def host_window(self, index):
        GivenNode.asked.append(("host", index))
        return HostNode.windows.pop(0)


#: H100 GPU-e03e5018's H2D series of a second process, 2026-11-27 (a shared host's traffic: 3 of 12 copies within
#: 1 % of the 90th percentile, NOISY), and of its first process (settled)
DISTURBED = [52.4, 52.1, 52.4, 52.4, 53.1, 53.7, 52.6, 52.2, 53.5, 52.5, 52.4, 52.3]
SETTLED = [54.7, 54.4, 54.6, 54.2, 54.6, 54.8, 53.3, 54.9, 54.6, 54.4, 54.7, 54.7]
#: a whole series 2.6 % down, every copy settled about its own level (GPU-8badd6b4's slowest series, 2026-11-27)
LOW_LEVEL = [53.2, 53.3, 53.2, 53.1, 53.2, 53.3, 53.2, 53.2, 53.3, 53.1, 53.2, 53.2]
D2H = [55.0, 54.9, 55.1, 55.0, 54.9, 55.0, 55.1, 55.0, 54.9, 55.0, 55.0, 55.1]
D2H_LOADED = [51.5, 51.4, 51.6, 51.5, 51.5, 51.4, 51.6, 51.5, 51.5, 51.4, 51.5, 51.6]


def _window(h2d):
    return {"h2d": h2d, "d2h": [D2H] * len(h2d), "d2h_loaded": [D2H_LOADED] * len(h2d)}


def test_a_host_link_reads_its_best_series_of_one_window_shared_by_the_three_host_facts(pytester, monkeypatch):
    """Series slowed by the host's traffic, settled at a lower level or not settled, are passed over for the
    window's best; one window serves the three host facts."""
    monkeypatch.setattr(HostNode, "windows", [_window([LOW_LEVEL, DISTURBED, SETTLED, LOW_LEVEL, DISTURBED, LOW_LEVEL]),
                                              _window([DISTURBED] * 6)])
    r = _run(pytester, monkeypatch, 1, "-k", "host_link", "--gpuprops-baseline", "none",
             "--gpuprops-report", "r.json", node=HostNode)
    r.assert_outcomes(passed=3)
    assert GivenNode.asked == [("host", 0)] and len(HostNode.windows) == 1
    facts = {f["fact"]: f for f in json.loads((pytester.path / "r.json").read_text())["facts"]}
    # SETTLED's settled copies' median, not LOW_LEVEL's 53.2 nor DISTURBED's 53.5 (3 of its 12 copies settled)
    assert facts["host_to_device_gbps"]["measured"] == pytest.approx(54.65)
    launch = facts["host_to_device_gbps"]["measurement"]["launch"]
    assert (launch["best_series"], launch["series_gbps"]) == (2, [53.2, 53.5, 54.65, 53.2, 53.5, 53.2])
    assert facts["device_to_host_bidir_gbps"]["measured"] == 51.5
    assert "6 series of 12 copies after 2, taken in turns" in facts["device_to_host_gbps"]["method"]
    # a window with no settled series, reading inside the band (GPU-ec662279's, 2026-11-27): judged, flagged, and
    # not this unit's baseline
    store = pytester.path / "store"
    r = _run(pytester, monkeypatch, 1, "-k", "host_link_rate and h2d", "--gpuprops-baselines", str(store),
             "--gpuprops-report", "r2.json", node=HostNode)
    r.assert_outcomes(passed=1)
    (v,) = json.loads((pytester.path / "r2.json").read_text())["facts"]
    assert v["status"] == "PASS" and v["measured"] == pytest.approx(53.5)
    assert v["flags"][0].startswith("judged though its copies did not settle: 3 of 12 copies")
    # the next run's settled 56.15 is 5 % above it, past the 3.3 % same-unit band: compared with it, MOVED; it
    # is no baseline, so nothing is compared
    monkeypatch.setattr(HostNode, "windows", [_window([[x + 1.5 for x in SETTLED]] * 6)])
    r = _run(pytester, monkeypatch, 1, "-k", "host_link_rate and h2d", "--gpuprops-baselines", str(store),
             "--gpuprops-report", "r3.json", node=HostNode)
    r.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "r3.json").read_text())
    assert data["facts"][0]["measured"] == pytest.approx(56.15) and data["fleet"] == []
    r.stdout.fnmatch_lines(["gpuprops baseline: GPU-00000000: run of *, 1 facts; since then: *; 0 MOVED"])


def test_a_host_link_window_is_measured_again_only_after_a_pause(pytester, monkeypatch):
    """A window with no settled series that reads under the band is NOISY and discarded (it may read the
    disturbance); the link is read from fresh windows, each 3 s after the last (links.confirm_pause, outside the
    locks); a link that is slow in every window fails, confirmed."""
    pauses = []
    monkeypatch.setattr(links, "confirm_pause", lambda: pauses.append(links.HOST_CONFIRM_PAUSE_S))
    deep = [x - 2.5 for x in DISTURBED]  # its settled copies' median 51.0, under 54.345 - 2.24
    monkeypatch.setattr(HostNode, "windows", [_window([deep] * 6), _window([SETTLED] * 6), _window([SETTLED] * 6)])
    r = _run(pytester, monkeypatch, 1, "-k", "host_link_rate and h2d", "--gpuprops-baseline", "none", node=HostNode)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*host_to_device_gbps*54.650*PASS (first measurement discarded, noisy*"])
    assert pauses == [3.0, 3.0] and not HostNode.windows  # the noisy window, then two settled ones, each after a pause
    slow = [27.3, 27.4, 27.3, 27.2, 27.3, 27.4, 27.3, 27.3, 27.2, 27.3, 27.4, 27.3]  # a link trained down to gen 4
    monkeypatch.setattr(HostNode, "windows", [_window([slow] * 6)] * 3)
    pauses.clear()
    r = _run(pytester, monkeypatch, 1, "-k", "host_link_rate and h2d", "--gpuprops-baseline", "none", node=HostNode)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*fact host_to_device_gbps on sm_90 does not hold*", "*confirmed: failed 3 of 3*"])
    assert pauses == [3.0, 3.0]
