"""One process at a time measures on a GPU: a file lock per GPU, taken around every measurement
and by the process Nsight Compute profiles (launch.py), so pytest-xdist workers and ncu's launches
never overlap on one GPU. And one GPU of a node at a time draws its power-bound load (the throughput
layer's rates and stresses): :func:`power_lock`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: how long a process waits for a GPU's lock before it gives up (gpu_lock's default, and launch.py's)
LOCK_TIMEOUT_S = 600.0


def gpu_lock_path(index: int) -> Path:
    """The file of GPU ``index``'s lock ($GPUPROPS_LOCK_DIR, else the temp folder)."""
    return Path(os.environ.get("GPUPROPS_LOCK_DIR", tempfile.gettempdir())) / f"gpuprops-gpu{index}.lock"


_GPU_LOCKS: dict[tuple[str, float], object] = {}


def gpu_lock(index: int, timeout: float = LOCK_TIMEOUT_S):
    """A per-GPU file lock: only one process measures on a GPU at a time. One lock object per file
    and timeout, kept: a session takes it once per measurement (about 1 300 times a run), and a new
    FileLock each time cost 0.1 ms of filelock's instance bookkeeping."""
    from filelock import FileLock
    key = (str(gpu_lock_path(index)), timeout)
    lock = _GPU_LOCKS.get(key)
    if lock is None:
        lock = _GPU_LOCKS[key] = FileLock(key[0], timeout=timeout)
    return lock


def node_lock_path(what: str) -> Path:
    """The file of the node's lock for ``what`` ("power", "host-link"), beside the GPUs' locks."""
    return Path(os.environ.get("GPUPROPS_LOCK_DIR", tempfile.gettempdir())) / f"gpuprops-node-{what}.lock"


def power_lock_path() -> Path:
    """The node's power lock's file."""
    return node_lock_path("power")


def _node_lock(what: str, timeout: float):
    """One lock object per file and timeout, kept, as :func:`gpu_lock`."""
    from filelock import FileLock
    key = (str(node_lock_path(what)), timeout)
    lock = _GPU_LOCKS.get(key)
    if lock is None:
        lock = _GPU_LOCKS[key] = FileLock(key[0], timeout=timeout)
    return lock


def power_lock(timeout: float = LOCK_TIMEOUT_S):
    """The node's lock for power-bound measurements (a sustained clock under its power cap, a rate at the
    peak): a node's GPUs share its power delivery and cooling, and a GPU's clock under its cap fell while
    its neighbour ran the same stress. Two H100s stressed together sustained 1514.7 / 1535.6 MHz under
    the tensor stress, an H100 alone 1582-1591 (2026-11-26, GPU-9db59b7a + GPU-fd48deeb, GPU-ce7928d2);
    GPU 0's L2 read moved to its 1995 MHz state and 2-3 % lower while GPU 1 ran GEMMs. Taken inside the GPU's
    own lock (the order every holder keeps: no two processes wait on each other)."""
    return _node_lock("power", timeout)


def host_link_lock(timeout: float = LOCK_TIMEOUT_S):
    """The node's lock for copies between a GPU and host memory: a node's GPUs share the host's memory
    and, two by two, a PCIe switch, so one GPU's host copy would read what its neighbour's left it.
    (The GPU -> host copy under host -> GPU load is also noisy on a GPU alone, 5-12 % over its 12 copies
    on single-GPU VMs, 2026-11-26: the lock removes the neighbour, not that.) Taken inside the GPUs' own
    locks, as :func:`power_lock`."""
    return _node_lock("host-link", timeout)
