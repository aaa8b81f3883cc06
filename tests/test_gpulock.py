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


def test_host_copies_take_the_node_host_link_lock_inside_the_gpu_lock(monkeypatch, tmp_path):
    """A GPU's host copy holds its own lock and the node's host-link lock, one file for every GPU and
    not the power lock's; both are released after."""
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    from pytest_gpuprops import links
    host = gpulock.host_link_lock()
    assert host.lock_file == str(tmp_path / "gpuprops-node-host-link.lock")
    assert host is gpulock.host_link_lock() is not gpulock.power_lock()
    with links.host_copy_lock(1):
        assert gpulock.gpu_lock(1).is_locked and host.is_locked and not gpulock.power_lock().is_locked
    assert not gpulock.gpu_lock(1).is_locked and not host.is_locked


def test_every_host_copy_fact_takes_the_host_link_lock():
    """The hwtests' host-copy facts measure under links.host_copy_lock, not the GPU's lock alone: all three
    from one window (links.Node.host_window), taken under the lock, and no host copy outside it."""
    import re
    from pathlib import Path
    text = (Path(__file__).parents[1] / "hwtests" / "test_node_links.py").read_text()
    assert re.findall(r"with links\.host_copy_lock\(index\):\n\s+(.*)", text) == [
        "windows[index] = node.host_window(index)"]
    assert "node.host_copy" not in text
    assert "links.pair_lock(index, index)" not in text
