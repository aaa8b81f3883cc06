"""One process at a time measures on a GPU: a file lock per GPU, taken around every measurement
and by the process Nsight Compute profiles (launch.py), so pytest-xdist workers and ncu's launches
never overlap on one GPU.
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
