"""The process Nsight Compute profiles (launch.py): its job read with or without a lock, and the
GPU's lock taken before anything else (a real child process)."""

import json
import os
import subprocess
import sys
import time

from gp_testing import child_processes_outside_mutmut

from pytest_gpuprops import gpulock


def test_a_launch_job_is_read_with_or_without_a_lock():
    from pytest_gpuprops import launch
    one = {"cubin": "x.cubin", "kernel": "k", "grid": 1, "block": 32}
    assert launch.parse(json.dumps({"lock": "/l", "launches": [one]})) == ("/l", [one])
    assert launch.parse(json.dumps([one, one])) == (None, [one, one])
    assert launch.parse(json.dumps(one)) == (None, [one])


def test_the_profiled_process_waits_for_the_gpus_lock(monkeypatch, tmp_path):
    """pytest_gpuprops.launch takes the lock named in its job before anything else: while this
    process holds GPU 0's lock it waits, and it ends once the lock is free."""
    child_processes_outside_mutmut(monkeypatch)
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    job = json.dumps({"lock": str(gpulock.gpu_lock_path(0)), "launches": []})
    with gpulock.gpu_lock(0):
        proc = subprocess.Popen([sys.executable, "-m", "pytest_gpuprops.launch", job], env=os.environ.copy())
        time.sleep(1.0)
        assert proc.poll() is None, "the profiled process went on while another held the GPU's lock"
    assert proc.wait(timeout=30) == 0


def test_the_profiled_process_waits_for_the_lock_as_long_as_a_session_does(tmp_path):
    """One timeout for both takers of a GPU's lock (gpulock.LOCK_TIMEOUT_S); a job without a lock
    takes none."""
    import contextlib

    from pytest_gpuprops import launch
    lock = launch.gpu_lock(str(tmp_path / "gpuprops-gpu0.lock"))
    assert lock.timeout == gpulock.LOCK_TIMEOUT_S == gpulock.gpu_lock(0).timeout == 600.0
    assert isinstance(launch.gpu_lock(None), contextlib.nullcontext)
