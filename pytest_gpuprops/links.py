"""measure layer for the node: the links between GPUs and to the host, as measurements.

A GPU that passes every SM and memory fact can still be cut off from its peers: an NVLink trained
down or off, peer access that falls back to staging through the host, a PCIe link at a lower width.
These are measured per ordered GPU pair (``src`` issues, ``dst`` is the peer) and per GPU (host):

* copy engine: ``cudaMemcpyPeerAsync`` of 1 GiB from ``src``'s memory to ``dst``'s, on a stream of
  ``src``, timed by CUDA events on that stream; both directions at once: the ``src -> dst`` copy's
  own events while ``dst -> src`` runs on a stream of ``dst`` (nvbandwidth's bidirectional definition:
  one direction's rate while the other is loaded);
* SM kernels: ``stream_copy`` (kernels/stream_bandwidth.cu) on every SM of ``src`` with one buffer in
  ``dst``'s memory: ``load`` reads the peer's buffer (data crosses ``dst -> src``), ``store`` writes it;
* latency: one thread of ``src`` chases a random cycle of 128-byte lines in ``dst``'s memory
  (kernels/link_chase.cu, warm in ``dst``'s L2), in ns (%globaltimer) and ``src`` SM cycles;
* host: ``cudaMemcpyAsync`` of 256 MiB between pinned host memory and the GPU, each way; and of 1 GiB
  while the opposite direction runs; from a thread on the GPU's own NUMA node's CPUs, which the pinned
  memory is allocated from (:meth:`Node.host_cpus`); a window of :data:`HOST_ROUNDS` series of each, in
  turns, read by its best series (stats.best_series: the host's own traffic slows whole series).

Each series is :data:`REPEATS` timed copies after :data:`WARMUP`, in GB/s (10^9 B/s). While a
pair is measured both GPUs' locks are held (lower index first), so no other process of the suite
loads either end of the link. The NVLink state NVML reports is pytest_gpuprops/nvlink.py's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from . import compile as gp_compile
from . import devices, gpulock
from .measurement import Measurement
from .peer_chase import CHASE_FOOTPRINT, CHASE_HOPS, CHASE_LAUNCHES, chase_layout, chase_values, sampled_sms
from .stats import SETTLED_BAND, SETTLED_MIN_SHARE

PEER_BYTES = 1 << 30
HOST_BYTES = 256 << 20
#: a host copy timed under the opposite direction's load: longer, so host-memory contention averages out
HOST_LOADED_BYTES = 1 << 30
WARMUP = 2
REPEATS = 12
#: a host-link fact measured again (confirming a failure, or after a series too disturbed to read) waits this
#: long first, outside every lock: a shared host's traffic slows H2D copies 3-6 % for stretches of 1-3 s and
#: more (H100 GPU-d5fa12bd, 2026-11-27: in 3 of 6 processes whole 2-s stretches of series read 50.7-52.4
#: against 53.4-54.4 GB/s, while D2H held 54.7-55.1; cudaHostAlloc, THP-backed and 4 KiB-page registered
#: buffers, interleaved, read alike, so the buffer's pages are not the cause). Attempts back to back land in
#: one stretch and confirm the disturbance, not the link
HOST_CONFIRM_PAUSE_S = 3.0
#: a host link is read from this many rounds, each one series of every host fact in turn (H2D, D2H, D2H under
#: the opposite load: ~0.8 s a round, ~5 s a window), and each fact's reading is its best series
#: (stats.best_series). A shared host's traffic slows H2D series by 1-4 % for stretches of 1-3 s and never
#: speeds one up (H100 node GPU-8badd6b4, 2026-11-27: 16 series a direction in each of 3 processes, 0.45 s
#: apart; one series' settled rate: H2D 52.41-54.84, D2H 53.91-55.09 GB/s; the best of 8 consecutive series,
#: 3.6 s, read H2D within 0.94 % over 6 windows, one series alone within 3.6 %). Six rounds span about as long:
#: on node GPU-c280d065 + GPU-b91b3c06 four processes' windows read H2D within 0.41-0.54 %, D2H 0.21-0.46 %
#: and D2H under load 0.41-0.67 % (H100 GPU-ba7d32dd: H2D 54.54, 54.90)
HOST_ROUNDS = 6
#: test-only: a node whose pair facts must fail as a pair forced through the host does
#: (peer access not enabled: copies are staged through host memory, SM kernels cannot reach the peer)
NO_PEER_ENV = "GPUPROPS_PLANT_NO_PEER"
#: how a link rate's copies make its reading (rate_measurement; stats.settled_copies), as the methods say it
SETTLED_TEXT = (f"the median of the copies at the settled rate (within {SETTLED_BAND:.0%} of their 90th "
                f"percentile; NOISY where fewer than {SETTLED_MIN_SHARE:.0%} of them are)")


class PeerAccessOff(Exception):
    """Peer access between two GPUs is not on: SM kernels of one cannot reach the other's memory."""


def confirm_pause() -> None:
    """The wait before a host-link fact's next series (HOST_CONFIRM_PAUSE_S); call it holding no lock."""
    import time
    time.sleep(HOST_CONFIRM_PAUSE_S)


def gbps(nbytes: float, seconds: float) -> float:
    """Decimal GB/s, as datasheets, nvbandwidth and NCCL give link rates."""
    return nbytes / seconds / 1e9


def rates(nbytes: float, seconds: Sequence[float]) -> list[float]:
    return [gbps(nbytes, s) for s in seconds]


def plant_no_peer() -> bool:
    return os.environ.get(NO_PEER_ENV, "") not in ("", "0")


def rate_measurement(name: str, values: Sequence[float], *, what: str, launch: dict,
                     remeasure: Callable[[], Measurement], noise_target: float = 0.02,
                     settled: bool = True) -> Measurement:
    """A link rate as the suite's Measurement: per-copy GB/s, a fixed count (no stop rule: a copy of
    1 GiB repeats within 0.1 % on NVLink, 256 MiB within ~2 % on PCIe), the reading the median of the copies
    at the settled rate (within stats.SETTLED_BAND of the series' top) and its noise their interquartile
    spread (Measurement center and spread "settled"); a series with fewer than half its copies there is
    NOISY and measured again. A host's disturbances slow copies for a while and never speed them up: one
    copy in twelve at half speed (H100 GPU-e369c733, 2026-11-26: loaded copies 51.45-52.15 GB/s and one at
    27.66), a dip to 24.5 GB/s climbing back over eight copies (GPU-5969eb1a H2D: 4 copies at 54.5-54.7
    first), a level 5.6 % down for the series' last seven copies (its D2H: 53.5-53.8, then 50.4-50.7; the
    median 51.6 was MOVED -6.1 % and an OUTLIER against its peer's 55.0). Their median read the
    disturbance; the settled copies' median reads the link, or says there was none to read. ``settled``
    False (a latency's launches, which a disturbance makes slower, not faster): their median and
    interquartile spread."""
    how = "settled" if settled else "median"
    return Measurement(name=name, unit="GB/s", values=list(values), stop_reason=f"{len(values)} copies",
                               noise_target=noise_target, overhead_cycles=0.0, sm_clock_mhz=None, throttle=[],
                               kernel=what, launch=dict(launch), remeasure=remeasure, center=how,
                               spread="settled" if settled else "iqr")


# ----------------------------------------------------------------------------------------------
# the node: buffers and timed copies on two GPUs (GPU only)


class Node:  # pragma: no mutate block  (GPU only)
    """Buffers, streams and kernels on the GPUs of one process, for pair and host measurements."""

    def __init__(self, kernels_dir: Path, cache_dir: Path | None = None):
        import cupy
        self.cp = cupy
        self.kernels_dir = Path(kernels_dir)
        self.cache_dir = cache_dir
        self._bufs: dict[int, tuple] = {}
        self._funcs: dict[tuple[int, str], object] = {}
        self._peer: dict[tuple[int, int], str | None] = {}
        self._cpus: dict[int, set[int] | None] = {}
        self._tmp = tempfile.mkdtemp(prefix="gpuprops-links-")

    # -- set-up ----------------------------------------------------------------------------------
    def peer_access(self, src: int, dst: int) -> str | None:
        """Turn on ``src``'s access to ``dst``'s memory; None when on, else why it is not."""
        key = (src, dst)
        if key not in self._peer:
            rt = self.cp.cuda.runtime
            if plant_no_peer():
                why = f"peer access left off ({NO_PEER_ENV} is set: a test-only pair forced through the host)"
            elif not rt.deviceCanAccessPeer(src, dst):
                why = (f"the driver says GPU {src} cannot access GPU {dst}'s memory (cudaDeviceCanAccessPeer = 0): "
                       "no NVLink or PCIe peer path between them, or peer-to-peer disabled (IOMMU/ACS, "
                       "virtualisation); check `nvidia-smi topo -m` and `nvidia-smi topo -p2p r`")
            else:
                why = None
                with self.cp.cuda.Device(src):
                    try:
                        rt.deviceEnablePeerAccess(dst)
                    except self.cp.cuda.runtime.CUDARuntimeError as exc:
                        if "AlreadyEnabled" not in str(exc) and "ALREADY_ENABLED" not in str(exc).upper():
                            why = f"cudaDeviceEnablePeerAccess({dst}) on GPU {src} failed: {exc}"
            self._peer[key] = why
        return self._peer[key]

    def buffers(self, index: int):
        """GPU ``index``'s two 1 GiB buffers (source, destination), allocated once."""
        if index not in self._bufs:
            with self.cp.cuda.Device(index):
                a = self.cp.zeros(PEER_BYTES, dtype=self.cp.uint8)
                b = self.cp.zeros(PEER_BYTES, dtype=self.cp.uint8)
            self._bufs[index] = (a, b)
        return self._bufs[index]

    def function(self, index: int, arch: str, source: str, kernel: str, defines: dict):
        key = (index, f"{source}:{kernel}:{sorted(defines.items())}")
        if key not in self._funcs:
            built = gp_compile.compile_cuda(self.kernels_dir / source, arch, defines, cache_dir=self.cache_dir)
            path = os.path.join(self._tmp, f"{source}-{abs(hash(key[1]))}-{index}.cubin")
            with open(path, "wb") as f:
                f.write(built.cubin)
            with self.cp.cuda.Device(index):
                self._funcs[key] = self.cp.RawModule(path=path).get_function(kernel)
        return self._funcs[key]

    def close(self) -> None:
        self._bufs.clear()
        self.cp.get_default_memory_pool().free_all_blocks()
        self.cp.get_default_pinned_memory_pool().free_all_blocks()

    # -- timing ----------------------------------------------------------------------------------
    def _timed(self, index: int, issue: Callable, count: int) -> list[float]:
        """Seconds of ``count`` issues on a fresh stream of GPU ``index``, each between two events."""
        cp = self.cp
        with cp.cuda.Device(index):
            stream = cp.cuda.Stream(non_blocking=True)
            times = []
            for _ in range(count):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(stream)
                issue(stream)
                b.record(stream)
                b.synchronize()
                times.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
        return times

    def _repeat(self, index: int, issue: Callable) -> list[float]:
        self._timed(index, issue, WARMUP)
        return self._timed(index, issue, REPEATS)

    # -- pair measurements ---------------------------------------------------------------------
    def ce_copy(self, src: int, dst: int) -> list[float]:
        """GB/s of 1 GiB copies src -> dst by the copy engine, issued on a stream of src."""
        rt = self.cp.cuda.runtime
        self.peer_access(src, dst)
        a, _ = self.buffers(src)
        _, b = self.buffers(dst)
        return rates(PEER_BYTES, self._repeat(
            src, lambda s: rt.memcpyPeerAsync(b.data.ptr, dst, a.data.ptr, src, PEER_BYTES, s.ptr)))

    def ce_bidir(self, src: int, dst: int) -> list[float]:
        """GB/s of the src -> dst copy, each timed by its own events while dst -> src copies run on a
        stream of dst: two of the same size, issued first, so the reverse traffic covers the whole
        timed copy (nvbandwidth's bidirectional definition: the measured stream's bytes over its time)."""
        cp, rt = self.cp, self.cp.cuda.runtime
        self.peer_access(src, dst)
        self.peer_access(dst, src)
        a_src, b_src = self.buffers(src)
        a_dst, b_dst = self.buffers(dst)
        with cp.cuda.Device(src):
            s_fwd = cp.cuda.Stream(non_blocking=True)
        with cp.cuda.Device(dst):
            s_back = cp.cuda.Stream(non_blocking=True)
        return self._under_load(
            src, PEER_BYTES, lambda s: rt.memcpyPeerAsync(b_dst.data.ptr, dst, a_src.data.ptr, src, PEER_BYTES, s.ptr),
            s_fwd, lambda s: rt.memcpyPeerAsync(b_src.data.ptr, src, a_dst.data.ptr, dst, PEER_BYTES, s.ptr), s_back)

    def _under_load(self, index: int, nbytes: int, issue_timed: Callable, timed, issue_other: Callable, other
                    ) -> list[float]:
        """GB/s of ``issue_timed`` on stream ``timed`` of GPU ``index``, by its own events, while two
        ``issue_other`` copies, issued first on stream ``other``, load the opposite direction."""
        cp = self.cp
        out = []
        for k in range(WARMUP + REPEATS):
            for _ in range(2):
                issue_other(other)
            with cp.cuda.Device(index):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(timed)
                issue_timed(timed)
                e1.record(timed)
            timed.synchronize()
            other.synchronize()
            if k >= WARMUP:
                out.append(gbps(nbytes, cp.cuda.get_elapsed_time(e0, e1) / 1e3))
        return out

    def sm_copy(self, src: int, dst: int, mode: str, arch: str, sms: int) -> list[float]:
        """GB/s crossing the link when every SM of src copies 1 GiB with the peer's buffer as the
        source (mode 'load') or the destination ('store')."""
        cp = self.cp
        why = self.peer_access(src, dst)
        if why:
            raise PeerAccessOff(why)
        block = 256
        fn = self.function(src, arch, "stream_bandwidth.cu", "stream_copy", {"BLOCK": block, "UNROLL": 4})
        local_a, local_b = self.buffers(src)
        peer_a, peer_b = self.buffers(dst)
        source, target = (peer_a, local_b) if mode == "load" else (local_a, peer_b)
        grid = sms * (2048 // block)
        with cp.cuda.Device(src):
            stamps = cp.zeros(grid * 4, dtype=cp.uint64)
        n16 = PEER_BYTES // 16
        import numpy
        return rates(PEER_BYTES, self._repeat(
            src, lambda s: fn((grid,), (block,), (stamps, source, target, numpy.uint64(n16), numpy.int32(1)),
                              stream=s)))

    def chase(self, src: int, dst: int, arch: str, sms: int) -> dict[int, tuple[list[float], list[float]]]:
        """Per sampled SM of src (:func:`sampled_sms`): (ns per hop, cycles per hop) of a chase by one
        thread on that SM through dst's memory, per launch after the first."""
        cp = self.cp
        why = self.peer_access(src, dst) if src != dst else None
        if why:
            raise PeerAccessOff(why)
        import numpy
        lines = CHASE_FOOTPRINT // 128
        with cp.cuda.Device(dst):
            chain = cp.zeros(CHASE_FOOTPRINT // 8, dtype=cp.uint64)
            chain.set(chase_layout(chain.data.ptr, lines))
        fn = self.function(src, arch, "link_chase.cu", "link_chase", {})
        per_sm = {}
        with cp.cuda.Device(src):
            start = cp.array([chain.data.ptr], dtype=cp.uint64)
            out = cp.zeros(4, dtype=cp.uint64)
            claimed = cp.zeros(1, dtype=cp.uint32)
            for sm in sampled_sms(sms):
                results = []
                for k in range(CHASE_LAUNCHES):
                    claimed.fill(0)
                    out[3] = 0
                    fn((2 * sms,), (1,), (start, out, numpy.int32(CHASE_HOPS), numpy.uint32(sm), claimed))
                    cp.cuda.Device(src).synchronize()
                    total = out.get()
                    if not total[3]:
                        continue  # no block landed on that SM this time
                    start[0] = out[0]
                    if k:
                        results.append((int(total[1]), int(total[2])))
                if results:
                    per_sm[sm] = chase_values(results, CHASE_HOPS)
        del chain
        return per_sm

    # -- host measurements ---------------------------------------------------------------------
    def host_cpus(self, index: int) -> set[int] | None:
        """The CPUs a host copy of GPU ``index`` runs on and allocates its pinned memory from: the GPU's
        own NUMA node's (devices.cpus_near), as NCCL binds its threads, so a copy does not cross the
        host's socket link as the process's thread happened to lie (None: where it lies)."""
        if index not in self._cpus:
            self._cpus[index] = devices.cpus_near(self.cp.cuda.Device(index).pci_bus_id)
        return self._cpus[index]

    def _pinned(self, index: int, nbytes: int = HOST_BYTES):
        cp = self.cp
        with cp.cuda.Device(index):
            host = [cp.cuda.alloc_pinned_memory(nbytes) for _ in range(2)]
        a, b = self.buffers(index)
        return host, a, b

    def host_copy(self, index: int, direction: str) -> list[float]:
        """GB/s of 256 MiB copies between pinned host memory and GPU ``index`` ('h2d' or 'd2h')."""
        rt = self.cp.cuda.runtime
        with devices.on_cpus(self.host_cpus(index)):
            host, a, _ = self._pinned(index)
            if direction == "h2d":
                def issue(s):
                    rt.memcpyAsync(a.data.ptr, host[0].ptr, HOST_BYTES, rt.memcpyHostToDevice, s.ptr)
            else:
                def issue(s):
                    rt.memcpyAsync(host[0].ptr, a.data.ptr, HOST_BYTES, rt.memcpyDeviceToHost, s.ptr)
            return rates(HOST_BYTES, self._repeat(index, issue))

    def host_window(self, index: int) -> dict[str, list[list[float]]]:
        """HOST_ROUNDS rounds of one series each of ``h2d`` and ``d2h`` (:meth:`host_copy`) and ``d2h_loaded``
        (:meth:`host_copy_loaded`), in turns, so each fact's series spread over the whole window: the
        series of each, in order. Hold :func:`host_copy_lock` while it runs."""
        window: dict[str, list[list[float]]] = {"h2d": [], "d2h": [], "d2h_loaded": []}
        for _ in range(HOST_ROUNDS):
            window["h2d"].append(self.host_copy(index, "h2d"))
            window["d2h"].append(self.host_copy(index, "d2h"))
            window["d2h_loaded"].append(self.host_copy_loaded(index, "d2h"))
        return window

    def host_copy_loaded(self, index: int, direction: str) -> list[float]:
        """GB/s of the 1 GiB ``direction`` copy, its own events, while the opposite direction runs on
        a second stream: two copies of the same size, issued first, cover the whole timed copy
        (nvbandwidth's host <-> device bidirectional definition)."""
        cp, rt = self.cp, self.cp.cuda.runtime
        with devices.on_cpus(self.host_cpus(index)):
            host, a, b = self._pinned(index, HOST_LOADED_BYTES)
            h2d = (a.data.ptr, host[0].ptr, HOST_LOADED_BYTES, rt.memcpyHostToDevice)
            d2h = (host[1].ptr, b.data.ptr, HOST_LOADED_BYTES, rt.memcpyDeviceToHost)
            timed, other = (h2d, d2h) if direction == "h2d" else (d2h, h2d)
            with cp.cuda.Device(index):
                s_timed, s_other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
            return self._under_load(index, HOST_LOADED_BYTES, lambda s: rt.memcpyAsync(*timed, s.ptr), s_timed,
                                    lambda s: rt.memcpyAsync(*other, s.ptr), s_other)


def pair_lock(src: int, dst: int):
    """Both GPUs' locks, the lower index first (two pair tests in two processes cannot deadlock)."""
    stack = ExitStack()
    for index in sorted({src, dst}):
        stack.enter_context(gpulock.gpu_lock(index))
    return stack


def host_copy_lock(index: int):
    """GPU ``index``'s lock, then the node's host-link lock (gpulock.host_link_lock): one GPU of a node
    at a time copies to or from host memory."""
    stack = pair_lock(index, index)
    stack.enter_context(gpulock.host_link_lock())
    return stack

