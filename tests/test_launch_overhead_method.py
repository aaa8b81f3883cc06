"""pytest_gpuprops.launch_overhead without a GPU: the microseconds per launch of a batch, the refusal
of a batch the gate did not hold, the repeat loop's stop rule and warm-up; the Launcher's plan of
launches on a simulated GPU that logs every call the host makes (the gate queued first, the batch
between two events, the gate opened only once all of it is queued, the graph captured and uploaded
once); and hwtests/test_launch_overhead.py recorded, checked and failing a planted value end to end on
that simulated GPU. (Named apart from hwtests/test_launch_overhead.py: pytest imports test files by
their base name.)"""

import ctypes
import re
from types import SimpleNamespace

import numpy  # noqa: F401  (loaded before the in-process pytest runs: numpy cannot load twice in one process)
import pytest
from gp_testing import KERNELS, fake_gpu_conftest

from pytest_gpuprops import launch_overhead as lo
from pytest_gpuprops import sass, session
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.facts import tomllib
from pytest_gpuprops.stats import StopRule

# ----------------------------------------------------------------------------------------------
# arithmetic and refusals


def test_a_batch_is_its_elapsed_time_per_launch_in_microseconds():
    assert lo.per_launch_us(lo.Batch(elapsed_ms=0.256, launches=128)) == pytest.approx(2.0)
    assert lo.per_launch_us(lo.Batch(elapsed_ms=1.0, launches=1)) == pytest.approx(1000.0)


def test_an_empty_batch_has_no_time_per_launch():
    with pytest.raises(ValueError, match="a batch of 0 launches has no time per launch"):
        lo.per_launch_us(lo.Batch(elapsed_ms=0.1, launches=0))


def test_a_batch_the_gate_did_not_hold_is_refused_saying_what_to_do():
    with pytest.raises(lo.GateTimedOut) as e:
        lo.per_launch_us(lo.Batch(elapsed_ms=2000.3, launches=128, gate_timed_out=True))
    msg = str(e.value)
    assert msg.startswith("the gate opened by itself after 2 s: the host had not queued the batch of 128 launches")
    assert "ran at the host's pace, not the GPU's" in msg and "lower launch_overhead.BATCH" in msg


# ----------------------------------------------------------------------------------------------
# the repeat loop


class Lock:
    def __init__(self):
        self.held, self.entered = False, 0

    def __enter__(self):
        self.held, self.entered = True, self.entered + 1

    def __exit__(self, *exc):
        self.held = False


def _batches(us_values, lock=None):
    """``take`` handing out batches of 100 launches at the given microseconds per launch, in order;
    each taken only while ``lock`` is held."""
    it = iter(us_values)
    taken = []

    def take():
        assert lock is None or lock.held
        us = next(it)
        taken.append(us)
        return lo.Batch(elapsed_ms=us * 100 / 1e3, launches=100)
    return take, taken


def test_the_warm_up_batches_are_taken_under_the_lock_but_not_counted():
    lock = Lock()
    take, taken = _batches([50.0, 40.0] + [2.0] * 10, lock)
    m = lo.measure_batches("launch_stream_back_to_back_us", [take], StopRule(), what="empty", launch={"batch": 100},
                           lock=lock)
    assert taken[:2] == [50.0, 40.0] and m.values == pytest.approx([2.0])  # converged at the minimum of 5
    assert m.launch == {"batch": 100, "streams": 1, "per_stream_batches_us": [[2.0] * 5]}
    assert (m.stop_reason, m.unit, m.name, m.noise_target) == ("converged", "us", "launch_stream_back_to_back_us",
                                                               lo.STREAM_SPREAD_TARGET)
    assert (m.kernel, m.sm_clock_mhz, m.throttle, m.overhead_cycles) == ("empty", None, [], 0.0)
    assert lock.entered == 1 and not lock.held


def test_each_stream_is_measured_in_turn_and_the_reading_is_the_median_over_the_streams():
    """Streams keep rates of their own (the driver's hardware queues): the reading is the median of the
    streams' medians, one slow or fast queue moves it no more than one value of eight."""
    lock = Lock()
    rates = [1.79, 1.83, 1.83, 1.83, 1.89, 1.785, 1.787, 1.65]
    sources = [_batches([9.0] * 2 + [r] * 5, lock) for r in rates]
    m = lo.measure_batches("x", [t for t, _ in sources], StopRule(), what="empty", launch={}, lock=lock)
    assert m.values == pytest.approx(rates) and m.reading == pytest.approx(1.81)
    assert [len(b) for b in m.launch["per_stream_batches_us"]] == [5] * 8 and m.launch["streams"] == 8
    assert all(taken[:2] == [9.0, 9.0] for _, taken in sources)  # each stream's warm-up
    assert m.settled and lock.entered == 1
    # one queue far off the others moves neither the reading nor its noise (interquartile), and the record keeps
    # each batch to 4 decimals
    odd = [_batches([r] * 5)[0] for r in (1.80012345, 1.81, 1.82, 1.80, 1.83, 1.81, 1.82, 3.0)]
    one_off = lo.measure_batches("x", odd, StopRule(), what="empty", launch={}, warmup=0)
    assert one_off.spread == "iqr" and one_off.settled and one_off.reading == pytest.approx(1.815)
    assert one_off.launch["per_stream_batches_us"][0][0] == 1.8001
    # queues out of step with each other by far more than a few percent: the reading is not trusted
    wide = [_batches([r] * 5)[0] for r in (1.0, 1.0, 1.4, 1.4, 1.8, 1.8, 2.2, 2.2)]
    noisy = lo.measure_batches("x", wide, StopRule(), what="empty", launch={}, warmup=0)
    assert not noisy.settled and "over target 10.00%" in noisy.unsettled_reason()


def test_noisy_batches_repeat_until_the_time_budget():
    ticks = iter(range(100))
    take, _ = _batches([2.0, 3.0] * 50)
    m = lo.measure_batches("x", [take], StopRule(noise_target=0.01, time_budget_s=7.5), what="empty", launch={},
                           warmup=0, clock=lambda: float(next(ticks)))
    assert m.stop_reason == "time budget" and len(m.launch["per_stream_batches_us"][0]) == 8
    assert m.median == pytest.approx(2.5)


def test_streams_that_stopped_for_different_reasons_say_how_many_each():
    ticks = iter(range(1000))
    noisy, _ = _batches([2.0, 3.0] * 50)
    steady, _ = _batches([2.0] * 10)
    m = lo.measure_batches("x", [noisy, steady, steady], StopRule(noise_target=0.01, time_budget_s=7.5),
                           what="empty", launch={}, warmup=0, clock=lambda: float(next(ticks)))
    assert m.stop_reason == "2 streams converged, 1 streams time budget"


def test_no_stream_to_measure_on_is_refused():
    with pytest.raises(ValueError, match="no stream to measure on"):
        lo.measure_batches("x", [], StopRule(), what="empty", launch={})


def test_a_timed_out_gate_in_a_warm_up_batch_stops_the_measurement():
    def take():
        return lo.Batch(elapsed_ms=2000.0, launches=128, gate_timed_out=True)
    with pytest.raises(lo.GateTimedOut):
        lo.measure_batches("x", [take], StopRule(), what="empty", launch={})


# ----------------------------------------------------------------------------------------------
# the Launcher's plan of launches on a simulated GPU


class SimLaunchGpu:
    """What Launcher uses of CuPy, on a simulated GPU. Every call the host makes is logged in order. An
    empty kernel takes ``kernel_us`` on the GPU and a graph node ``node_us``; launches issued without
    the gate run at the host's pace, ``host_us`` each. With ``gate_times_out`` the gate opens by itself
    (it writes gate[1] = 1, as launch_overhead.cu does)."""

    def __init__(self, kernel_us=2.0, node_us=1.25, host_us=7.0, gate_times_out=False):
        self.kernel_us, self.node_us, self.host_us, self.gate_times_out = kernel_us, node_us, host_us, gate_times_out
        self.log, self.buffers, self.captures, self.uploads = [], {}, 0, 0
        #: each event's latest ("record", id) entry: its place in the log (an event recorded again, or a
        #: new event under a freed one's id, moves it on)
        self.recorded_at: dict = {}
        gpu = self

        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class Stream:
            def __init__(self, non_blocking=False):
                assert non_blocking, "the batches run on a non-blocking stream"
                self.capturing = None

            @property
            def done(self):  # cudaStreamQuery
                gpu.log.append(("query", gpu.gate_word(0)))
                return True

            def synchronize(self):
                pass

            def begin_capture(self):
                self.capturing = []

            def end_capture(self):
                nodes, self.capturing = self.capturing, None
                gpu.captures += 1
                return Graph(len(nodes))

        class Graph:
            def __init__(self, nodes):
                self.nodes = nodes

            def upload(self, stream):
                gpu.uploads += 1

            def launch(self, stream):
                gpu.log.append(("graph", self.nodes))

        class Event:
            def record(self, stream):
                gpu.recorded_at[id(self)] = len(gpu.log)
                gpu.log.append(("record", id(self)))

            @property
            def done(self):  # wait_for polls it
                gpu.log.append(("wait", gpu.gate_word(0)))
                return True

        class runtime:
            @staticmethod
            def hostAlloc(size, flags):
                assert flags == lo.HOST_ALLOC_MAPPED
                buf = ctypes.create_string_buffer(size)
                gpu.buffers[ctypes.addressof(buf)] = buf
                return ctypes.addressof(buf)

            @staticmethod
            def freeHost(ptr):
                gpu.log.append(("freeHost",))
                del gpu.buffers[ptr]

        self.cuda = SimpleNamespace(Device=Device, Stream=Stream, Event=Event, runtime=runtime,
                                    get_elapsed_time=self.elapsed_ms)

    def gate_word(self, k):
        (ptr,) = self.buffers
        return ctypes.c_uint32.from_address(ptr + 4 * k).value

    def kernel(self, name):
        def run(grid, block, args, stream=None):
            assert (grid, block) == ((1,), (1,))
            if stream.capturing is not None:
                stream.capturing.append(name)
            elif name == "launch_gate":
                ptr, timeout = (int(a) for a in args)
                assert ptr in self.buffers and self.gate_word(0) == 0
                if self.gate_times_out:
                    ctypes.c_uint32.from_address(ptr + 4).value = 1
                self.log.append(("gate", timeout))
            else:
                self.log.append((name,))
        return run

    def elapsed_ms(self, e0, e1):
        """The time between two recorded events, from what the log queued between them. (Each event's
        place is kept as it is recorded: finding it by a pass over the whole log, which grows by every
        launch, was 1.3 s of the file's pytester runs.)"""
        i0, i1 = self.record_of(e0), self.record_of(e1)
        inside = self.log[i0 + 1:i1]
        gated = i0 > 0 and self.log[i0 - 1][0] == "gate"
        us = sum((self.kernel_us if gated else self.host_us) for e in inside if e == ("empty",))
        us += sum(e[1] * self.node_us for e in inside if e[0] == "graph")
        return us / 1e3

    def record_of(self, event) -> int:
        """Where the log holds ``event``'s latest record (a KeyError where it holds none)."""
        k = self.recorded_at.get(id(event))
        if k is None or k >= len(self.log) or self.log[k] != ("record", id(event)):
            raise KeyError(id(event))
        return k

    def clear_log(self):
        self.log.clear()
        self.recorded_at.clear()

    def runner(self, stop=StopRule()):
        compiled = []
        r = SimpleNamespace(cp=self, info=SimpleNamespace(index=0), stop=stop, compiled=compiled,
                            compile=lambda source: compiled.append(source) or SimpleNamespace(cubin=b"cubin"),
                            load=lambda cubin, name: self.kernel(name))
        return r


def _plan(log, n):
    return log[0], log[1][0], log[2:2 + n], log[2 + n][0], log[3 + n:]


def test_a_stream_batch_is_queued_behind_the_gate_which_opens_once_all_of_it_is_queued():
    gpu = SimLaunchGpu()
    runner = gpu.runner()
    launcher = lo.Launcher(runner)
    assert runner.compiled == [lo.SOURCE]
    b = launcher.stream_batch(16)
    gate, first, launches, last, after = _plan(gpu.log, 16)
    assert gate == ("gate", lo.GATE_TIMEOUT_NS) and (first, last) == ("record", "record")
    assert launches == [("empty",)] * 16
    assert after == [("query", 0), ("wait", 1)]  # queued work handed to the GPU, then the gate opened, then waited
    assert b == lo.Batch(elapsed_ms=pytest.approx(0.032), launches=16, gate_timed_out=False)
    assert lo.per_launch_us(b) == pytest.approx(2.0)
    launcher.close()
    assert gpu.log[-1] == ("freeHost",) and not gpu.buffers


def test_a_host_paced_batch_has_no_gate_and_reads_the_host_rate():
    gpu = SimLaunchGpu()
    launcher = lo.Launcher(gpu.runner())
    b = launcher.host_paced_batch(8)
    assert [e[0] for e in gpu.log] == ["record"] + ["empty"] * 8 + ["record", "query", "wait"]
    assert lo.per_launch_us(b) == pytest.approx(7.0)


def test_the_graph_is_captured_and_uploaded_once_and_replayed_behind_the_gate():
    gpu = SimLaunchGpu()
    launcher = lo.Launcher(gpu.runner())
    for _ in range(3):
        b = launcher.graph_batch(32)
    assert (gpu.captures, gpu.uploads) == (1, 1)
    assert gpu.log[-6:] == [("gate", lo.GATE_TIMEOUT_NS), gpu.log[-5], ("graph", 32), gpu.log[-3], ("query", 0),
                            ("wait", 1)]
    assert lo.per_launch_us(b) == pytest.approx(1.25)


def test_the_launcher_makes_its_streams_together_and_runs_a_batch_on_the_one_asked_for():
    gpu = SimLaunchGpu()
    launcher = lo.Launcher(gpu.runner())
    assert len(launcher.streams) == lo.STREAMS == 8
    seen = []
    launcher._launch_empty = lambda stream, n=1: seen.append(stream) or n
    launcher.stream_batch(4, k=5)
    launcher._graph = lambda n: SimpleNamespace(launch=seen.append)
    launcher.graph_batch(4, k=3)
    assert seen == [launcher.streams[5], launcher.streams[3]]


def test_a_gate_that_opened_by_itself_marks_the_batch():
    gpu = SimLaunchGpu(gate_times_out=True)
    b = lo.Launcher(gpu.runner()).stream_batch(4)
    assert b.gate_timed_out
    with pytest.raises(lo.GateTimedOut):
        lo.per_launch_us(b)


def test_the_kernels_the_launcher_loads_are_in_its_source():
    cubin = sass.Cubin(compile_cuda(KERNELS / lo.SOURCE, "sm_90").cubin, "sm_90")
    assert set(cubin.kernels) == {"empty", "launch_gate"}


# ----------------------------------------------------------------------------------------------
# hwtests/test_launch_overhead.py end to end on the simulated GPU


def _run(pytester, monkeypatch, gpu, *args):
    pytester.makeconftest(fake_gpu_conftest("sm_90").replace('"Fake GPU"', '"NVIDIA H100 80GB HBM3"'))
    pytester.makepyfile(test_launches=(KERNELS.parent / "hwtests" / "test_launch_overhead.py").read_text())
    monkeypatch.setattr(session.GpuPropsState, "runner", lambda self, index=None: gpu.runner())
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(pytester.path))
    return pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-rs", *args)


def test_the_packaged_h100_graph_fact_holds_a_gpu_at_its_value_and_the_stream_fact_skips(pytester, monkeypatch):
    """The packaged facts hold the H100's graph node (0.9787 us +- 3 %) but no stream launch (it moves 10 %
    between processes on one unit: the test file says how much): the stream fact skips, saying how to
    record it; a GPU at the recorded graph node passes and becomes its unit's baseline; the same unit 5 % slower
    next time is MOVED (red); a GPU far off the band fails, confirmed."""
    r = _run(pytester, monkeypatch, SimLaunchGpu(node_us=0.979))
    r.assert_outcomes(passed=1, skipped=1)
    assert r.ret == 0
    r.stdout.fnmatch_lines(["*no fact 'launch_stream_back_to_back_us' for the GPU 'NVIDIA H100 80GB HBM3' (sm_90)*"
                            "record it with --gpuprops-record PATH on this GPU*"])
    r = _run(pytester, monkeypatch, SimLaunchGpu(node_us=0.979 * 1.05))
    assert r.ret != 0
    r.stdout.fnmatch_lines(["*launch_graph_node_us*baseline 0.979*(moved +0.049, +5.00%)*MOVED*"])
    r = _run(pytester, monkeypatch, SimLaunchGpu(node_us=1.25), "--gpuprops-baseline", "none")
    r.assert_outcomes(failed=1, skipped=1)
    r.stdout.fnmatch_lines(["*fact launch_graph_node_us on sm_90 does not hold*", "*confirmed: failed 3 of 3*"])


def test_the_launch_facts_record_under_the_gpu_then_hold_and_a_planted_value_fails(pytester, monkeypatch):
    gpu = SimLaunchGpu(kernel_us=2.4, node_us=1.1, host_us=6.5)
    r = _run(pytester, monkeypatch, gpu, "--gpuprops-record", "rec.toml", "--gpuprops-report", "rec.json")
    r.assert_outcomes(passed=2)
    recorded = tomllib.loads((pytester.path / "rec.toml").read_text())
    facts = recorded["gpus"]["NVIDIA H100 80GB HBM3"]
    assert set(facts) == set(lo.FACTS) and set(recorded) == {"arch", "gpu", "gpus"}  # the GPU's, not the arch's
    stream, graph = facts["launch_stream_back_to_back_us"], facts["launch_graph_node_us"]
    assert (stream["value"], stream["unit"], stream["method"]) == (2.4, "us", lo.STREAM_METHOD)
    assert (graph["value"], graph["method"]) == (1.1, lo.GRAPH_METHOD)
    assert stream["source"].startswith("measured on NVIDIA H100 80GB HBM3, driver 580.0, CUDA 13.0")
    report = (pytester.path / "rec.json").read_text()
    assert '"host_paced_us": 6.5' in report  # the host's rate, kept beside the fact
    # the recording holds against itself
    r = _run(pytester, monkeypatch, gpu, "--gpuprops-facts", "rec.toml")
    r.assert_outcomes(passed=2)
    # a stream fact planted 25 % high fails, measured three times; the graph fact still holds
    text = (pytester.path / "rec.toml").read_text()
    planted = re.sub(r"(\[gpus\.\"NVIDIA H100 80GB HBM3\"\.launch_stream_back_to_back_us\]\nvalue = )2\.4",
                     r"\g<1>3.0", text)
    assert planted != text
    (pytester.path / "planted.toml").write_text(planted)
    gpu.clear_log()
    r = _run(pytester, monkeypatch, gpu, "--gpuprops-facts", "planted.toml")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["*fact launch_stream_back_to_back_us on sm_90 does not hold*",
                            "*expected: 3 ± 0.09 us*", "*measured: 2.400 us*", "*confirmed: failed 3 of 3*"])
