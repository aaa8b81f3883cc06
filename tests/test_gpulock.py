"""The per-GPU file lock (gpulock.py): where its file is, its timeout, one lock object per file and
timeout (reentrant in a thread). That another process waits for it: tests/test_launch.py."""

from pathlib import Path

from pytest_gpuprops import gpulock


def test_gpu_lock_is_a_file_lock_per_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    lock = gpulock.gpu_lock(3, timeout=7.0)
    assert lock.lock_file == str(tmp_path / "gpuprops-gpu3.lock") and lock.timeout == 7.0
    assert gpulock.gpu_lock(0).timeout == 600.0
    with lock:
        assert (tmp_path / "gpuprops-gpu3.lock").exists()


def test_gpu_lock_defaults_to_the_temp_folder(monkeypatch):
    import tempfile
    monkeypatch.delenv("GPUPROPS_LOCK_DIR", raising=False)
    assert gpulock.gpu_lock(0).lock_file == str(Path(tempfile.gettempdir()) / "gpuprops-gpu0.lock")


def test_a_gpus_lock_is_one_object_per_file_and_timeout(monkeypatch, tmp_path):
    """The session takes the lock once per measurement: the same FileLock each time (reentrant in
    this thread), another for another folder or timeout."""
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    assert gpulock.gpu_lock(1) is gpulock.gpu_lock(1) is not gpulock.gpu_lock(1, timeout=5.0)
    with gpulock.gpu_lock(1), gpulock.gpu_lock(1):
        pass
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path / "other"))
    assert gpulock.gpu_lock(1).lock_file == str(tmp_path / "other" / "gpuprops-gpu1.lock")


def test_the_power_lock_is_one_file_for_the_node(monkeypatch, tmp_path):
    """Every GPU's power-bound measurement takes the same lock: one file beside the GPUs' locks, not one a GPU."""
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    lock = gpulock.power_lock()
    assert lock.lock_file == str(tmp_path / "gpuprops-node-power.lock") and lock.timeout == 600.0
    assert lock is gpulock.power_lock() is not gpulock.gpu_lock(0)
    with gpulock.gpu_lock(0), lock:
        assert (tmp_path / "gpuprops-node-power.lock").exists()


def test_every_rate_and_stress_of_the_throughput_layer_takes_the_power_lock():
    """measure_rate, measure_placed_rate and stress_clock hold the node's power lock inside the GPU's lock."""
    import inspect

    from pytest_gpuprops import throughput
    for fn in (throughput.measure_rate, throughput.measure_placed_rate, throughput.stress_clock):
        assert "with gpu_lock(info.index), power_lock():" in inspect.getsource(fn), fn.__name__
