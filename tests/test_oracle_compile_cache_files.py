"""The cubin cache's files and its failure messages, against values written out by hand: the file
mode follows the umask (as any file the user creates, so a group cache works), a half-written entry
is compiled again, an unwritable cache is warned about once with the full text, and a missing NVRTC
says what to install."""

import builtins
import os
import warnings

import pytest

from pytest_gpuprops import compile as gp_compile


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600), (0o002, 0o664)])
def test_cache_files_get_0666_less_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        assert gp_compile._file_mode() == mode
        gp_compile._write_entry(tmp_path / "c", [(tmp_path / "c" / "x.cubin", b"\x7fELF")])
    finally:
        os.umask(old)
    assert (tmp_path / "c" / "x.cubin").stat().st_mode & 0o777 == mode


def test_without_proc_the_umask_is_asked_and_restored(monkeypatch):
    real_open = builtins.open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc/"):
            raise OSError("no /proc here")
        return real_open(path, *a, **k)
    monkeypatch.setattr(builtins, "open", no_proc)
    old = os.umask(0o027)
    try:
        assert gp_compile._file_mode() == 0o640
        assert os.umask(0o027) == 0o027  # still the caller's umask
    finally:
        os.umask(old)


def test_an_entry_with_one_half_missing_is_compiled_again(tmp_path):
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(b"\x7fELF" + bytes(60))
    assert gp_compile._read_entry(cubin, meta) is None
    cubin.unlink()
    meta.write_text('{"sha256": "0", "log": ""}')
    assert gp_compile._read_entry(cubin, meta) is None


def test_an_entry_without_a_log_reads_as_an_empty_log(tmp_path):
    import hashlib
    data = b"\x7fELF" + bytes(60)
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(data)
    meta.write_text('{"sha256": "%s"}' % hashlib.sha256(data).hexdigest())
    assert gp_compile._read_entry(cubin, meta) == (data, "")
    meta.write_text('{"sha256": "%s", "log": 7}' % hashlib.sha256(data).hexdigest())
    assert gp_compile._read_entry(cubin, meta) == (data, "")


def test_an_unwritable_cache_is_warned_about_once_in_full(tmp_path, monkeypatch):
    monkeypatch.setattr(gp_compile, "_WARNED", set())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = blocker / "cache"  # mkdir below a file: NotADirectoryError
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp_compile._write_entry(cache, [(cache / "a.cubin", b"\x7fELF")])
        gp_compile._write_entry(cache, [(cache / "b.cubin", b"\x7fELF")])
    assert [str(w.message) for w in caught] == [
        f"cubin cache {cache} cannot be written (Not a directory); compiling without caching. Set "
        "GPUPROPS_CACHE_DIR to a folder you can write."]
    assert caught[0].category is RuntimeWarning and gp_compile._WARNED == {cache}


def test_missing_nvrtc_says_what_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_cuda(name, globals=None, locals=None, fromlist=(), level=0):
        if name.startswith("cuda"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, globals, locals, fromlist, level)
    monkeypatch.setattr(builtins, "__import__", no_cuda)
    with pytest.raises(gp_compile.CompileError) as e:
        gp_compile._nvrtc()
    assert str(e.value) == ("NVRTC is not importable: install cuda-bindings and nvidia-cuda-nvrtc "
                            "(pip install 'pytest-gpuprops[dev]' or '[cuda13]'), or pass backend='nvcc'")
