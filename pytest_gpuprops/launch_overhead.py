"""measure layer: what launching a kernel costs on the GPU's side, per launch, in microseconds.

Two facts, both of an empty kernel (kernels/launch_overhead.cu ``empty``, one block of one thread):

* ``launch_stream_back_to_back_us``: :data:`BATCH` launches queued on one stream run back to back;
  the time from CUDA events before and after the batch, over :data:`BATCH`. Each launch waits for the
  kernel before it to complete, so this is the GPU's cadence of dependent launches: its front end
  taking a launch, the block's dispatch and exit, the kernel's completion;
* ``launch_graph_node_us``: the same kernels captured as one CUDA graph (CuPy's stream capture: a chain
  of :data:`BATCH` kernel nodes), uploaded once and replayed; the replay's time over :data:`BATCH`.

Both are read on :data:`STREAMS` streams, the fact the median over the streams of each stream's median
batch. The driver spreads a context's streams over its hardware queues, and each keeps a rate of its own
run after run: one stream's reading moved 11 % from one process to the next (1.77-1.98 us on one H100),
the 8 streams of one process read 1.785-1.892 us, each the same again in a second pass (H100
GPU-3563e156, 2026-11-27). The median over 8 streams holds the graph node to 0.1 % from process to
process; the stream launch's whole set of streams still moves by up to 10 % (GPU-fc37663d: 1.825-2.017
us in four processes), so that fact is not recorded (hwtests/test_launch_overhead.py). The first
stream of a context that has run nothing else, measured first, reads faster still (graph 0.80 us
against 0.976-0.979 on every other stream): the front end then serves one queue alone, which a
process that launches anything else never sees.

The host is kept out of both. A CuPy launch costs the Python host several microseconds, more than the
GPU spends on an empty kernel, so events around launches issued as the host goes time the host's
issue rate, not the GPU. Every batch is therefore queued behind ``launch_gate``, a kernel that holds
the stream until the host has queued the whole batch and sets a word of mapped pinned memory; the
events then see the batch at the GPU's pace. The same batch without the gate is timed too and kept
in the stream fact's launch record as ``host_paced_us``: where it is above the fact, the host is what
limits a Python loop of launches.

Both facts depend on the GPU, its driver and the host (the front end fetches launches from the
driver's queues in host memory, over PCIe), so they are the GPU's facts, with the driver in their
source.

Not a fact here: the time from the host's launch call to the kernel's first instruction. It needs the
host clock and %globaltimer on one time line; a ping-pong through mapped memory places them only
within its round trip (~1-2 us over PCIe, the order of the quantity itself), and the host's side of it
is the interpreter's call overhead (several us through CuPy), not the GPU's or the driver's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

from .measurement import Measurement
from .stats import StopRule, stop_reason

SOURCE = "launch_overhead.cu"
FACTS = ("launch_stream_back_to_back_us", "launch_graph_node_us")
#: launches per timed batch: enough to make the two events' own cost small (one event is well under
#: a launch), few enough that the driver queues them all behind the gate without blocking the host
BATCH = 128
#: streams each fact is read on (at least the driver's 8 hardware queues a context, CUDA_DEVICE_MAX_CONNECTIONS)
STREAMS = 8
#: the streams' medians may spread this far (interquartile, stats.robust_relative_noise) before the reading
#: is NOISY: 8 streams of one H100 spread 2-3 %, the queues of a GPU out of step with each other far more
STREAM_SPREAD_TARGET = 0.10
WARMUP = 2  # batches before the timed ones: module load, the graph's first replay
#: how long the gate waits for the host before it opens by itself, marking the batch as not gated
GATE_TIMEOUT_NS = 2_000_000_000
HOST_ALLOC_MAPPED = 2  # cudaHostAllocMapped
_ON_STREAMS = (f"on each of {STREAMS} streams made together (the driver spreads them over its hardware queues, which "
               "differ by a few %) batches repeated until the noise target, their median; the value: the median over "
               "the streams")
STREAM_METHOD = (f"{BATCH} launches of an empty kernel (1 block of 1 thread, launch_overhead.cu) queued on one "
                 "stream behind a gate kernel that holds the stream until all are queued (the host kept out: "
                 f"a Python launch costs more than the GPU's own); CUDA events around the batch, over {BATCH}; "
                 f"{_ON_STREAMS}")
GRAPH_METHOD = (f"the same {BATCH} empty kernels captured as one CUDA graph (CuPy stream capture: a chain of "
                f"{BATCH} kernel nodes), uploaded once, replayed behind the gate; CUDA events around the "
                f"replay, over {BATCH}; {_ON_STREAMS}")


class GateTimedOut(RuntimeError):
    """The gate opened by itself: the host did not queue the batch within GATE_TIMEOUT_NS."""


@dataclasses.dataclass(frozen=True)
class Batch:
    """One timed batch: the events' elapsed time, the launches (or graph nodes) in it, and whether the
    gate timed out (the batch then ran as the host issued it, not at the GPU's pace)."""

    elapsed_ms: float
    launches: int
    gate_timed_out: bool = False


def per_launch_us(batch: Batch) -> float:
    """Microseconds per launch of a gated batch; a batch the gate did not hold is refused."""
    if batch.launches <= 0:
        raise ValueError(f"a batch of {batch.launches} launches has no time per launch")
    if batch.gate_timed_out:
        raise GateTimedOut(
            f"the gate opened by itself after {GATE_TIMEOUT_NS / 1e9:g} s: the host had not queued the batch of "
            f"{batch.launches} launches by then, so it ran at the host's pace, not the GPU's. The driver's launch "
            "queue is likely shorter than the batch (the host blocks in a launch until the GPU frees room): lower "
            "launch_overhead.BATCH, or check that nothing else holds this GPU")
    return batch.elapsed_ms * 1e3 / batch.launches


def measure_batches(name: str, takes: Sequence[Callable[[], Batch]], stop: StopRule, *, what: str, launch: dict,
                    warmup: int = WARMUP, lock=None, clock: Callable[[], float] = time.monotonic) -> Measurement:
    """On each stream in turn (``takes``: one batch source a stream), batches until the stop rule ends them
    (after ``warmup`` untimed ones), each as microseconds per launch, while ``lock`` (the GPU's) is held. The
    measurement's values are the streams' medians (the reading: their median); the launch record keeps
    each stream's batches and why they stopped."""
    if not takes:
        raise ValueError(f"{name}: no stream to measure on")
    medians, per_stream, reasons = [], [], []
    with lock if lock is not None else contextlib.nullcontext():
        for take in takes:
            for _ in range(warmup):
                per_launch_us(take())
            values: list[float] = []
            start, reason = clock(), None
            while reason is None:
                values.append(per_launch_us(take()))
                reason = stop_reason(values, stop, clock() - start)
            medians.append(statistics.median(values))
            per_stream.append([round(v, 4) for v in values])
            reasons.append(reason)
    stopped = reasons[0] if len(set(reasons)) == 1 else ", ".join(f"{reasons.count(r)} streams {r}" for r in sorted(set(reasons)))
    return Measurement(name=name, unit="us", values=medians, stop_reason=stopped, noise_target=STREAM_SPREAD_TARGET,
                       overhead_cycles=0.0, sm_clock_mhz=None, throttle=[], kernel=what, spread="iqr",
                       launch={**launch, "streams": len(takes), "per_stream_batches_us": per_stream})


class Launcher:  # pragma: no mutate block  (GPU only)
    """The empty kernel, the gate and a stream on one GPU (a runner's), and the timed batches."""

    def __init__(self, runner, timeout_s: float = 30.0):
        self.cp, self.index, self.timeout_s = runner.cp, runner.info.index, timeout_s
        cubin = runner.compile(SOURCE).cubin
        with self.cp.cuda.Device(self.index):
            self.empty = runner.load(cubin, "empty")
            self.gate_fn = runner.load(cubin, "launch_gate")
            self.streams = [self.cp.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
            # mapped pinned memory: under unified addressing (every 64-bit Linux CUDA system) the host
            # pointer is the device pointer too
            self._gate_ptr = self.cp.cuda.runtime.hostAlloc(8, HOST_ALLOC_MAPPED)
        import ctypes
        self.gate = (ctypes.c_uint32 * 2).from_address(self._gate_ptr)
        self._graphs: dict[int, object] = {}

    def close(self) -> None:
        self._graphs.clear()
        if self._gate_ptr:
            self.cp.cuda.runtime.freeHost(self._gate_ptr)
            self._gate_ptr = 0

    def _launch_empty(self, stream, n: int = 1) -> int:
        for _ in range(n):
            self.empty((1,), (1,), (), stream=stream)
        return n

    def _timed(self, issue: Callable[[object], int], gated: bool = True, k: int = 0) -> Batch:
        """Events around what ``issue(stream)`` queues on stream ``k`` (it returns how many launches), behind
        the gate."""
        import numpy

        from .driver_launch import wait_for
        cp, s = self.cp, self.streams[k]
        with cp.cuda.Device(self.index):
            self.gate[0] = self.gate[1] = 0
            if gated:
                self.gate_fn((1,), (1,), (numpy.uint64(self._gate_ptr), numpy.uint64(GATE_TIMEOUT_NS)), stream=s)
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s)
            n = issue(s)
            e1.record(s)
            s.done  # noqa: B018  cudaStreamQuery: hands queued work to the GPU where a driver batches it
            self.gate[0] = 1
            wait_for(e1, self.timeout_s, f"a batch of {n} empty-kernel launches")
            return Batch(cp.cuda.get_elapsed_time(e0, e1), n, gated and bool(self.gate[1]))

    def stream_batch(self, n: int = BATCH, k: int = 0) -> Batch:
        return self._timed(lambda s: self._launch_empty(s, n), k=k)

    def host_paced_batch(self, n: int = BATCH) -> Batch:
        """The same launches without the gate: the host's issue rate where it is the slower."""
        return self._timed(lambda s: self._launch_empty(s, n), gated=False)

    def graph_batch(self, n: int = BATCH, k: int = 0) -> Batch:
        graph = self._graph(n)

        def replay(s):
            graph.launch(s)
            return n
        return self._timed(replay, k=k)

    def _graph(self, n: int):
        """A graph of ``n`` empty-kernel nodes in a chain, captured from a stream and uploaded once."""
        if n not in self._graphs:
            with self.cp.cuda.Device(self.index):
                capture = self.cp.cuda.Stream(non_blocking=True)
                capture.begin_capture()
                self._launch_empty(capture, n)
                graph = capture.end_capture()
                graph.upload(self.streams[0])
                self.streams[0].synchronize()
            self._graphs[n] = graph
        return self._graphs[n]
