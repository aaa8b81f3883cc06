"""What launching a kernel costs on the GPU's side (pytest_gpuprops/launch_overhead.py has the method
and why the host is kept out of it):

* launch_stream_back_to_back_us: empty-kernel launches queued on one stream, per launch;
* launch_graph_node_us: the same kernels as one CUDA graph replayed, per kernel node.

The graph node is recorded for the H100 (0.9778-0.9797 us on two units) and the H200 (0.6895-0.6925 on two;
2026-11-27), the 8 streams of a process within 0.1 % of each other. The stream launch is not recorded (it skips, saying how to record
it): on 8 streams of one process it reads alike within a few %, but the whole process moves, by 10 %
from one process to the next on one unit (H100 GPU-fc37663d: 1.825, 1.827, 1.937, 2.017 us), so no band
could catch a 5 % change; what in a process sets it is not known yet (not the SM clock: 1980 MHz
throughout; not the NUMA node: the machine has one). Before these, 2026-11-26: the graph node read
0.978-0.992 us on three H100s and 0.707-0.709 us on two H200s run one GPU at a time, but 0.531-0.736 us
on one H200 of a second node with the other GPU busy.

Both are the GPU's facts, not the SM arch's: the GPU's front end, its driver and the host memory the
driver's launch queues live in set them (record mode files them under the GPU's section, the driver
in the source). The stream fact's record keeps the host-paced rate of the same launches from Python
(``host_paced_us``), what a Python loop of launches gets where the host is the slower.

The time from the host's launch call to the kernel's first instruction is not a fact here: its error
would be the size of the quantity (launch_overhead.py says why).
"""

import pytest

from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops import gpulock
from pytest_gpuprops import launch_overhead as lo

pytestmark = pytest.mark.gpu
gp_facts.register_gpu_scoped(*lo.FACTS)


def _specs_of(item):
    """No timed builds: the kernels here carry no clock pairs and need no timing patch, so the session's
    prefetch compiles nothing for this file (its two small kernels compile in the first test)."""
    return []


@pytest.fixture(scope="module")
def launcher(gpuprops_state, gpuprops_gpu_index):
    one = lo.Launcher(gpuprops_state.runner(gpuprops_gpu_index))
    yield one
    one.close()


def _measure(gpuprops, name, take, what, extra=None):
    def once():
        try:
            takes = [lambda k=k: take(k=k) for k in range(lo.STREAMS)]
            m = lo.measure_batches(name, takes, gpuprops.runner.stop, what=what, lock=gpulock.gpu_lock(gpuprops.gpu.index),
                                   launch={"kernel": "empty", "grid": 1, "block": 1, "batch": lo.BATCH,
                                           **(extra() if extra else {})})
        except lo.GateTimedOut as exc:
            pytest.fail(f"{name}: {exc}", pytrace=False)
        m.remeasure = once
        return m
    return once()


@pytest.mark.fact("launch_stream_back_to_back_us")
def test_stream_launches_back_to_back(gpuprops, launcher):
    def host_paced():  # the same launches as the host issues them, for the record (not the fact)
        with gpulock.gpu_lock(gpuprops.gpu.index):
            return {"host_paced_us": round(lo.per_launch_us(launcher.host_paced_batch()), 3)}
    m = _measure(gpuprops, gpuprops.fact_name, launcher.stream_batch, "empty (stream, gated)", host_paced)
    gpuprops.check(gpuprops.fact_name, m, method=lo.STREAM_METHOD)


@pytest.mark.fact("launch_graph_node_us")
def test_graph_replay_per_node(gpuprops, launcher):
    m = _measure(gpuprops, gpuprops.fact_name, launcher.graph_batch, "empty (CUDA graph, gated)")
    gpuprops.check(gpuprops.fact_name, m, method=lo.GRAPH_METHOD)
