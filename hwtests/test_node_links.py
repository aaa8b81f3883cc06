"""The node's links: NVLink and peer-to-peer per ordered GPU pair, the host link per GPU
(pytest_gpuprops/links.py measures them; docs/method.md "The node's links" compares the method with
nvbandwidth's and DCGM's). After a driver or firmware update the faults a fleet sees most, after a
GPU missing from the bus, are links: an NVLink trained down or off, peer access that falls back to
staging through the host, a PCIe link at a lower width. Each passes every SM fact.

A pair test runs on the GPU that issues the work (``src``: the GPU under test, each GPU in turn with
``--gpuprops-gpus all``) towards its peer ``dst``, the GPU ``peer+k`` indices after it; its verdicts
name both (the report's GPU x GPU matrix). Both GPUs' locks are held while a pair is measured.

* p2p_peer_access: the driver lets src's SMs read and write dst's memory (peer access enabled);
* p2p_ce_copy_gbps: copy engine, 1 GiB src -> dst (cudaMemcpyPeerAsync on a stream of src);
* p2p_ce_bidir_gbps: the same copy's own rate while a dst -> src copy of 1 GiB runs;
* p2p_sm_<load|store>_gbps: every SM of src copies 1 GiB with dst's buffer as the source (load:
  the data crosses dst -> src) or the destination (store); stream_copy of stream_bandwidth.cu;
* p2p_latency_<near|far>_<ns|cycles>: one thread on each of 8 SMs of src in turn chases a random cycle
  of 128-byte lines (4 MiB, warm in dst's L2) in dst's memory: one link round trip and dst's L2 hit per
  hop; the SMs fall in two groups ~6 % apart (which SMs are near differs by unit), so the nearest and
  the farthest sampled SM are the facts;
* host_to_device_gbps, device_to_host_gbps: 256 MiB pinned-memory copies, each way on its own;
  device_to_host_bidir_gbps: a 1 GiB GPU -> host copy's own rate while host -> GPU copies run
  (nvbandwidth's bidirectional definition; host -> GPU under load is too unsteady to be a fact yet);
  the three from one window of series in turns, each read by its best series (a host's traffic slows
  whole series of copies for seconds, never speeds one up);
* nvlink_links_up, nvlink_version: NVML's link state; nvlink_errors_steady: no NVLink error counter
  (replay, recovery, CRC) grows while 1 GiB copies load the links both ways.

`pytest hwtests -m node` runs them alone. On a node with one GPU the pair tests skip, saying so.
"""

import pytest

from pytest_gpuprops import devices, links, nvlink, peer_chase, stats

pytestmark = [pytest.mark.gpu, pytest.mark.node]
# the links are the node's (the SKU's and its topology: NV18 between SXM H100s), not the SM arch's
_PAIR_FACTS = ("p2p_peer_access", "p2p_ce_copy_gbps", "p2p_ce_bidir_gbps", "p2p_sm_load_gbps", "p2p_sm_store_gbps",
               "p2p_latency_near_ns", "p2p_latency_near_cycles", "p2p_latency_far_ns", "p2p_latency_far_cycles")
_GPU_FACTS = ("host_to_device_gbps", "device_to_host_gbps", "device_to_host_bidir_gbps", "nvlink_links_up",
              "nvlink_version")
VISIBLE = devices.visible_gpu_count()
#: where a host copy's thread runs and its pinned memory lies (links.Node.host_cpus)
HOST_CPUS = ("from a thread on the GPU's own NUMA node's CPUs (NVML's CPU affinity), its pinned memory allocated there; "
             f"a window measured again (a failure's confirmation) {links.HOST_CONFIRM_PAUSE_S:g} s after the last")
#: how a host fact's copies make its reading (links.Node.host_window, stats.best_series)
HOST_WINDOW = (f"{links.HOST_ROUNDS} series of {links.REPEATS} copies after {links.WARMUP}, taken in turns with the "
               "other host facts' series (a window of ~5 s); each series' rate the median of its copies at the "
               f"settled rate (within {links.SETTLED_BAND:.0%} of their 90th percentile), the reading the best "
               f"series', settled or not (one with fewer than {links.SETTLED_MIN_SHARE:.0%} of its copies settled is "
               "judged only at or above the band's lower edge, else NOISY, and never a baseline): a host's traffic "
               "slows whole series, never speeds one up")
#: the peers of the GPU under test, as offsets (peer = (src + k) % visible); one placeholder that
#: skips, saying why, on a node with fewer than two GPUs
OFFSETS = list(range(1, VISIBLE)) or [0]
PEER_ACCESS_SOURCE = ("CUDA Runtime API, cudaDeviceCanAccessPeer / cudaDeviceEnablePeerAccess: GPUs of one node joined by "
                      "NVLink (or a PCIe switch without ACS redirection) access each other's memory; on the H100 and H200 "
                      "nodes measured (NV18, nvidia-smi topo -m) both directions were on")
NVLINK_ERRORS_SOURCE = ("DCGM's hardware limits (dcgm_gpu_hardware_limits.h: DCGM_LIMIT_MAX_LWLINK_ERROR = 1 replay or "
                        "recovery); flit CRC 0 on the healthy H100 nodes measured 2026-11-26 (GPU-9f007e6c + GPU-1559a37f, "
                        "GPU-44868ae7 + GPU-41500cde)")


def _gpu_scoped():
    from pytest_gpuprops import facts as gp_facts
    gp_facts.register_gpu_scoped(*_PAIR_FACTS, *_GPU_FACTS, "nvlink_errors_steady")


_gpu_scoped()


@pytest.fixture(scope="module")
def node(gpuprops_state):
    runner = gpuprops_state.runner()
    n = links.Node(runner.kernels_dir, runner.cache_dir)
    yield n
    n.close()


@pytest.fixture(params=OFFSETS, ids=[f"peer+{k}" if k else "one-gpu" for k in OFFSETS])
def peer(request, gpuprops):
    """The peer GPU's index; the verdicts of the test name the pair."""
    if not request.param:
        pytest.skip(f"this node has {VISIBLE} GPU(s): the pair facts ({', '.join(_PAIR_FACTS)}) need two; not run")
    dst = (gpuprops.gpu.index + request.param) % VISIBLE
    gpuprops.peer_index = dst
    return dst


def _pair_method(what: str, src: int, dst: int) -> str:
    return f"{what}; GPU {src} -> GPU {dst}, both GPUs' locks held"


@pytest.mark.fact("p2p_peer_access")
def test_peer_access(gpuprops, node, peer):
    src = gpuprops.gpu.index

    def judge():
        with links.pair_lock(src, peer):
            why = node.peer_access(src, peer)
        return why is None, "peer access on" if why is None else f"peer access off: {why}"
    gpuprops.check_condition(gpuprops.fact_name, judge, source=PEER_ACCESS_SOURCE,
                             method=_pair_method("cudaDeviceCanAccessPeer, then cudaDeviceEnablePeerAccess", src, peer))


def _pair_rate(gpuprops, node, src, dst, measure, what):
    name = gpuprops.fact_name

    def once():
        with links.pair_lock(src, dst):
            values = measure()
        return links.rate_measurement(name, values, what=what, launch={"src": src, "dst": dst}, remeasure=once)
    gpuprops.check(name, once(), method=_pair_method(what, src, dst))


@pytest.mark.fact("p2p_ce_copy_gbps")
def test_copy_engine_rate(gpuprops, node, peer):
    src = gpuprops.gpu.index
    _pair_rate(gpuprops, node, src, peer, lambda: node.ce_copy(src, peer),
               f"cudaMemcpyPeerAsync of {links.PEER_BYTES >> 30} GiB on a stream of the source GPU, CUDA events; "
               f"{links.REPEATS} after {links.WARMUP}, {links.SETTLED_TEXT}")


@pytest.mark.fact("p2p_ce_bidir_gbps")
def test_copy_engine_rate_both_ways(gpuprops, node, peer):
    src = gpuprops.gpu.index
    _pair_rate(gpuprops, node, src, peer, lambda: node.ce_bidir(src, peer),
               f"cudaMemcpyPeerAsync of {links.PEER_BYTES >> 30} GiB src -> dst, its own events, while two dst -> src "
               f"copies of the same size, issued first, run on a stream of dst; {links.REPEATS} after {links.WARMUP}, {links.SETTLED_TEXT}")


@pytest.mark.fact(lambda mode: f"p2p_sm_{mode}_gbps")
@pytest.mark.parametrize("mode", ["load", "store"])
def test_sm_kernel_rate(gpuprops, node, peer, mode):
    src, gpu = gpuprops.gpu.index, gpuprops.gpu

    def measure():
        try:
            return node.sm_copy(src, peer, mode, gpu.arch, gpu.sm_count)
        except links.PeerAccessOff as exc:
            pytest.fail(f"{gpuprops.fact_name}: GPU {src}'s SMs cannot reach GPU {peer}: {exc}", pytrace=False)
    side = "source (the data crosses dst -> src)" if mode == "load" else "destination"
    _pair_rate(gpuprops, node, src, peer, measure,
               f"stream_copy (stream_bandwidth.cu, 16-byte vectors, UNROLL 4, 8 blocks of 256 per SM) on every SM of "
               f"the source GPU over {links.PEER_BYTES >> 30} GiB with the peer's buffer as the {side}; CUDA events, "
               f"{links.REPEATS} after {links.WARMUP}, {links.SETTLED_TEXT}")


@pytest.mark.fact(lambda side: f"p2p_latency_{side}_ns", lambda side: f"p2p_latency_{side}_cycles")
@pytest.mark.parametrize("side", ["near", "far"])
def test_peer_latency(gpuprops, node, peer, side):
    src, gpu = gpuprops.gpu.index, gpuprops.gpu

    def chase():
        try:
            with links.pair_lock(src, peer):
                return node.chase(src, peer, gpu.arch, gpu.sm_count)
        except links.PeerAccessOff as exc:
            pytest.fail(f"p2p latency: GPU {src}'s SMs cannot reach GPU {peer}: {exc}", pytrace=False)
    what = (f"one thread on each of {peer_chase.CHASE_SMS} SMs of the source GPU in turn (spread over its SMs) chases a random "
            f"cycle of {peer_chase.CHASE_FOOTPRINT >> 20} MiB of 128-byte lines in the peer's memory (warm in its L2; "
            f"link_chase.cu, ld.global.cg), {peer_chase.CHASE_HOPS} hops a launch timed in the kernel by %globaltimer and "
            f"clock64, {peer_chase.CHASE_LAUNCHES - 1} launches per SM after one; the value is the median of the "
            + ("nearest SM's launches (the lowest SM median)" if side == "near" else
               "farthest SM's launches (the highest SM median)"))
    first = chase()
    for k, unit in enumerate(("ns", "cycles")):
        name = f"p2p_latency_{side}_{unit}"

        def once(per_sm=None, k=k, name=name, unit=unit):
            per_sm = per_sm if per_sm is not None else chase()
            sm, values = peer_chase.chase_extreme(per_sm, k, side)
            medians = peer_chase.chase_per_sm(per_sm, k)
            m = links.rate_measurement(name, values, what="link_chase", remeasure=once, settled=False,
                                       launch={"src": src, "dst": peer, "sm": sm,
                                               "per_sm": {str(s): round(v, 2) for s, v in medians.items()},
                                               **peer_chase.chase_clock(per_sm, sm)})
            m.unit, m.stop_reason = unit, f"SM {sm} of {len(per_sm)} sampled"
            return m
        gpuprops.check(name, once(first), method=_pair_method(what, src, peer))


@pytest.fixture(scope="module")
def host_windows():
    """Each GPU's last window of host series (links.Node.host_window), by GPU index."""
    return {}


def _host_window(node, windows: dict, index: int, fresh: bool) -> dict:
    """GPU ``index``'s window of host series (links.Node.host_window, under links.host_copy_lock): measured
    once a process for the three host facts, afresh for a fact measured again (after links.confirm_pause,
    outside the locks: out of the stretch of host traffic the last window may have read)."""
    if fresh or index not in windows:
        if fresh:
            links.confirm_pause()
        with links.host_copy_lock(index):
            windows[index] = node.host_window(index)
    return windows[index]


def _host_rate(gpuprops, node, windows: dict, key: str, method: str):
    """The host fact ``key`` of links.Node.host_window ('h2d', 'd2h', 'd2h_loaded') read from its best series."""
    index, name = gpuprops.gpu.index, gpuprops.fact_name

    def once(fresh: bool = False):
        series = _host_window(node, windows, index, fresh)[key]
        best, values = stats.best_series(series)
        return links.rate_measurement(name, values, what="cudaMemcpyAsync", remeasure=lambda: once(True),
                                      launch={"gpu": index, "cpus": devices.cpu_list(node.host_cpus(index)),
                                              "series_gbps": [round(stats.series_rate(s), 3) for s in series],
                                              "best_series": best})
    gpuprops.check(name, once(), method=f"{method}; {HOST_WINDOW}; {HOST_CPUS}")


@pytest.mark.fact(lambda direction: {"h2d": "host_to_device_gbps", "d2h": "device_to_host_gbps"}[direction])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_host_link_rate(gpuprops, node, host_windows, direction):
    way = "pinned host memory -> GPU" if direction == "h2d" else "GPU -> pinned host memory"
    _host_rate(gpuprops, node, host_windows, direction, f"cudaMemcpyAsync of {links.HOST_BYTES >> 20} MiB, {way}, CUDA events")


@pytest.mark.fact("device_to_host_bidir_gbps")
def test_host_link_rate_both_ways(gpuprops, node, host_windows):
    """GPU -> host while host -> GPU runs. The other way round (host -> GPU under the GPU -> host load)
    reads 46.4-48.1 GB/s with 1-3.4 % copy-to-copy noise on the H100s measured: a band that held those
    units could not catch a 10 % drop, so it is not a fact yet (docs/node.md)."""
    _host_rate(gpuprops, node, host_windows, "d2h_loaded",
               f"cudaMemcpyAsync of {links.HOST_LOADED_BYTES >> 30} GiB, GPU -> pinned host memory, its own CUDA "
               f"events, while two host -> GPU copies of the same size, issued first, run on a second stream")


def _reading(name, value, unit, remeasure):
    """One NVML reading as a measurement (exact facts: a count of links, a version)."""
    m = links.rate_measurement(name, [value], what="NVML", launch={}, remeasure=remeasure)
    m.unit, m.stop_reason = unit, "one reading"
    return m


def _nvlinks(gpu, *, fabric=False):
    """NVML's reading of the GPU's links; ``fabric``: skip where the machine has no NVLink fabric to check
    (nvlink.no_fabric: one GPU on the machine and no link up)."""
    state = nvlink.nvlink_state(gpu)
    if state is None:
        pytest.skip(f"NVML cannot be read for GPU {gpu.index}: install nvidia-ml-py and check nvidia-smi")
    if fabric and (why := nvlink.no_fabric(state)):
        pytest.skip(why)
    return state


@pytest.mark.fact(lambda what: f"nvlink_{what}")
@pytest.mark.parametrize("what", ["links_up", "version"])
def test_nvlink_state(gpuprops, gpu, what):
    name = gpuprops.fact_name

    def once(state=None):
        state = state or _nvlinks(gpu)
        value = float(state.count if what == "links_up" else (state.version or 0.0))
        return _reading(name, value, "links" if what == "links_up" else "version", once)
    state = _nvlinks(gpu, fabric=True)  # one reading: the value checked and the method text that describes it
    m = once(state)
    gpuprops.check(name, m, method=(
        f"NVML nvmlDeviceGetNvLinkState over links 0..{nvlink.MAX_NVLINKS - 1}: {state.count} up"
        + (f" (down: {state.links_down})" if state.links_down else "")
        + (f", {sorted(set(state.speed_gbps.values()))} GB/s per link" if state.speed_gbps else "")
        if what == "links_up" else "NVML nvmlDeviceGetNvLinkVersion of the links up (6 = NVLink 4.0)"))


@pytest.mark.fact("nvlink_errors_steady")
def test_nvlink_errors_steady(gpuprops, gpu, node):
    src = gpu.index
    if VISIBLE < 2:
        pytest.skip(f"this node has {VISIBLE} GPU: no peer to load the NVLinks with")
    dst = (src + 1) % VISIBLE

    def judge():
        with links.pair_lock(src, dst):
            before = _nvlinks(gpu)
            if not before.links_up:
                return False, "no NVLink up"
            node.ce_bidir(src, dst)
            after = _nvlinks(gpu)
        grown = nvlink.error_growth(before, after, nvlink.JUDGED_COUNTERS)
        data = sum(nvlink.error_growth(before, after, ("crc_data",)).values())
        text = ("no replay, recovery or flit CRC count grew" if not grown else
                "grew: " + ", ".join(f"{k} +{d}" for k, d in grown.items()))
        return not grown, text + f"; data CRC count (not judged): +{data} over {len(after.links_up)} links"
    gpuprops.check_condition(gpuprops.fact_name, judge, source=NVLINK_ERRORS_SOURCE,
                             method=f"NVML NVLink error counters (replay, recovery, flit CRC judged; data CRC reported) of every "
                                    f"link up, read before and after {links.WARMUP + links.REPEATS} copies of 1 GiB each way "
                                    f"between GPU {src} and GPU {dst}")
