"""The cubin cache's entries and messages and the facts layer's scopes, messages and record text, each
against values written out by hand: what compile_cuda hands the compiler and writes to disk, what a cache
that cannot be written costs, and what a facts file or a missing fact says, to the last character."""

import errno
import linecache
import os
import pathlib
import re
import tempfile
import threading
import warnings
from types import SimpleNamespace

import pytest
from test_oracle_compile import _FakeNvrtc

from pytest_gpuprops import compile as C
from pytest_gpuprops import facts as F

ELF = b"\x7fELF stand-in cubin"
ELF_SHA256 = "a336978560cb893115cc9cce7cb0e61bb846dde1aa0fe07f9d59e2fdb6fb92b7"  # sha256sum of ELF
KERNEL = 'extern "C" __global__ void k(int* p) { p[0] = N; }\n'
CACHE_HINT = ("not a folder; point GPUPROPS_CACHE_DIR (or --gpuprops-cache) at a folder, or unset it to use "
              "~/.cache/gpuprops/cubins")
UNWRITABLE = "compiling without caching. Set GPUPROPS_CACHE_DIR to a folder you can write."


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "k.cu").write_text(KERNEL)
    return d / "k.cu"


@pytest.fixture
def stand_in(monkeypatch):
    """compile_cuda with a stand-in compiler (called with what NVRTC would get) and version."""
    calls = []

    def compile_nvrtc(source, name, opts):
        calls.append((source, name, opts))
        return ELF, "stand-in log XX"
    monkeypatch.setattr(C, "_compile_nvrtc", compile_nvrtc)
    monkeypatch.setattr(C, "compiler_version", lambda backend="nvrtc": "nvrtc 13.5")
    monkeypatch.setattr(C, "_WARNED", set())
    return calls


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _record_warnings():
    cm = warnings.catch_warnings(record=True)
    caught = cm.__enter__()
    warnings.simplefilter("always")
    return cm, caught


# ----------------------------------------------------------------------------------------------
# compile_cuda: what the compiler gets, what the entry holds, hits and misses


def test_a_miss_hands_the_source_over_and_writes_the_entry_in_full(src, tmp_path, stand_in, monkeypatch, umask_022):
    ticks = iter([10.0, 11.23456])
    monkeypatch.setattr(C, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    cache = tmp_path / "not" / "yet" / "cubins"  # its parents are made too
    c = C.compile_cuda(src, "sm_80", {"N": 4}, cache_dir=cache)
    assert stand_in == [(KERNEL.encode(), "k.cu", ["-arch=sm_80", "-std=c++17", f"-I{src.parent.resolve()}", "-DN=4"])]
    assert re.fullmatch(r"k-sm_80-[0-9a-f]{32}\.cubin", c.path.name) and c.path.parent == cache
    assert (c.cubin, c.arch, c.source_name, c.defines, c.compiler, c.log, c.cached) == (
        ELF, "sm_80", "k.cu", (("N", "4"),), "nvrtc 13.5", "stand-in log XX", False)
    meta = c.path.with_suffix(".json")
    assert sorted(p.name for p in cache.iterdir()) == [c.path.name, meta.name]
    assert c.path.read_bytes() == ELF
    assert meta.read_text() == f'''{{
 "source": "{src}",
 "arch": "sm_80",
 "options": [
  "-arch=sm_80",
  "-std=c++17",
  "-DN=4"
 ],
 "compiler": "nvrtc 13.5",
 "sha256": "{ELF_SHA256}",
 "log": "stand-in log XX",
 "seconds": 1.2346
}}'''
    assert c.path.stat().st_mode & 0o777 == 0o644 and meta.stat().st_mode & 0o777 == 0o644


def test_a_hit_reads_the_entry_and_compiles_nothing(src, tmp_path, stand_in):
    a = C.compile_cuda(src, "90", {"N": 1}, cache_dir=tmp_path / "c")
    b = C.compile_cuda(src, "sm_90", {"N": "1"}, cache_dir=tmp_path / "c")
    assert len(stand_in) == 1
    assert (b.cubin, b.path, b.arch, b.source_name, b.defines, b.compiler, b.log, b.cached) == (
        ELF, a.path, "sm_90", "k.cu", (("N", "1"),), "nvrtc 13.5", "stand-in log XX", True)


def test_a_cache_symlinked_to_nowhere_costs_only_the_caching(src, tmp_path, stand_in):
    """A cache that cannot be made (here a dangling link, as to an unmounted volume) is warned about once,
    at the line that asked for the compile; every compile then compiles."""
    cache = tmp_path / "cubins"
    cache.symlink_to(tmp_path / "unmounted" / "cubins")
    cm, caught = _record_warnings()
    try:
        line = _lineno_of_next_line()
        a = C.compile_cuda(src, "sm_80", cache_dir=cache)
        b = C.compile_cuda(src, "sm_80", cache_dir=cache)
    finally:
        cm.__exit__(None, None, None)
    assert (a.cubin, a.cached, b.cached, len(stand_in)) == (ELF, False, False, 2)
    assert [(w.category, str(w.message)) for w in caught] == [
        (RuntimeWarning, f"cubin cache {cache} cannot be written (File exists); {UNWRITABLE}")]
    where = (caught[0].filename, caught[0].lineno)
    assert "warnings.warn(" not in linecache.getline(*where)  # a caller's line, not the warning's own
    if hasattr(C.compile_cuda, "__wrapped__"):  # mutmut's trampolines add frames: the compile layer's caller
        assert where[0] == C.__file__
    else:
        assert where == (__file__, line)
    assert not (tmp_path / "unmounted").exists()


def _lineno_of_next_line():
    import inspect
    return inspect.currentframe().f_back.f_lineno + 1


def test_a_source_that_is_a_folder_or_unreadable_is_refused_in_full(src, tmp_path, stand_in, monkeypatch):
    with pytest.raises(C.CompileError) as e:
        C.compile_cuda(src.parent, "sm_80", cache_dir=tmp_path / "c")
    assert str(e.value) == f"kernel source {src.parent} is a folder; give one .cu file in it"
    real = pathlib.Path.read_bytes
    errors = {src: PermissionError(errno.EACCES, "Permission denied", str(src))}

    def read_bytes(self):
        if self in errors:
            raise errors[self]
        return real(self)
    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    with pytest.raises(C.CompileError) as e:
        C.compile_cuda(src, "sm_80", cache_dir=tmp_path / "c")
    assert str(e.value) == f"cannot read kernel source {src}: Permission denied"
    errors[src] = OSError("the disk went away")  # no strerror: the error itself
    with pytest.raises(C.CompileError) as e:
        C.compile_cuda(src, "sm_80", cache_dir=tmp_path / "c")
    assert str(e.value) == f"cannot read kernel source {src}: the disk went away"
    assert stand_in == [] and not (tmp_path / "c").exists()


# ----------------------------------------------------------------------------------------------
# the compiler's version and log, arch names


@pytest.mark.parametrize("out, version", [
    ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\n", "nvcc 12.4"),
    ("nvcc: NVIDIA (R) Cuda compiler driver\nsome build without a release line\n", "nvcc unknown"),
    ("", "nvcc unknown"),
])
def test_nvcc_version_from_its_output(monkeypatch, out, version):
    runs = []

    def run(cmd, **kw):
        runs.append((cmd, kw))
        return SimpleNamespace(stdout=out, stderr="", returncode=0)
    monkeypatch.setattr(C, "shutil", SimpleNamespace(which=lambda name: f"/opt/cuda/bin/{name}"))
    monkeypatch.setattr(C, "subprocess", SimpleNamespace(run=run))
    assert C.compiler_version("nvcc") == version
    assert runs == [(["/opt/cuda/bin/nvcc", "--version"], {"capture_output": True, "text": True})]


def test_unknown_backend_is_refused_in_full():
    with pytest.raises(C.CompileError) as e:
        C.compiler_version("clang")
    assert str(e.value) == "unknown compiler backend 'clang'; expected 'nvrtc' or 'nvcc'"


def test_nvrtc_log_keeps_its_last_characters(monkeypatch):
    """Only the NUL padding and trailing blanks NVRTC leaves are cut, not a log's own last letters."""
    fake = _FakeNvrtc(log=b"k.cu(1): warning: variable XX\x00 \x00")
    monkeypatch.setattr(C, "_nvrtc", lambda: fake)
    assert C._compile_nvrtc(b"src", "k.cu", ["-arch=sm_90"]) == (b"\x7fELF fake", "k.cu(1): warning: variable XX")


@pytest.mark.parametrize("arch, message", [
    (90, "arch must be a string like 'sm_90', not 90"),
    (None, "arch must be a string like 'sm_90', not None"),
    (b"sm_90", "arch must be a string like 'sm_90', not b'sm_90'"),
])
def test_an_arch_that_is_not_a_string_is_refused_in_full(arch, message):
    with pytest.raises(C.ArchError) as e:
        C.parse_arch(arch)
    assert str(e.value) == message


@pytest.mark.parametrize("given, arch", [("sm_75", "sm_75"), ("100f", "sm_100f"), ("compute_100a", "sm_100a"),
                                         ("SM_120", "sm_120"), ("\tsm_90a\n", "sm_90a")])
def test_parse_arch_edges_accepted(given, arch):
    assert C.parse_arch(given) == arch


@pytest.mark.parametrize("given, message", [
    ("", "'' is not an arch name; expected "),
    ("sm_", "'sm_' is not an arch name; expected "),
    ("sm_90af", "'sm_90af' is not an arch name; expected "),
    ("sm90", "'sm90' is not an arch name; expected "),
    ("sm_74a", "arch 'sm_74a' is older than sm_75: "),
    ("sm_89a", "arch 'sm_89a': arch-specific 'a' variants exist from sm_90 on (sm_90a); use sm_89"),
    ("sm_99f", "arch 'sm_99f': family 'f' variants exist from sm_100 on (sm_100f); use sm_99"),
])
def test_parse_arch_edges_refused(given, message):
    with pytest.raises(C.ArchError) as e:
        C.parse_arch(given)
    assert str(e.value).startswith(message)


# ----------------------------------------------------------------------------------------------
# check_cache_dir: which setting named the folder


def test_a_default_cache_under_a_file_names_the_default(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUPROPS_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").write_text("not a folder")
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(C.CacheError) as e:
        C.check_cache_dir()
    assert str(e.value) == (f"cubin cache {home}/.cache/gpuprops/cubins (the default cache folder) cannot be created: "
                            f"{home}/.cache is a file, {CACHE_HINT}")


def test_a_cache_that_is_a_file_names_the_setting(tmp_path, monkeypatch):
    f = tmp_path / "cubins"
    f.write_text("x")
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(f))
    with pytest.raises(C.CacheError) as e:
        C.check_cache_dir()
    assert str(e.value) == f"cubin cache {f} (GPUPROPS_CACHE_DIR) is a file, {CACHE_HINT}"
    with pytest.raises(C.CacheError) as e:
        C.check_cache_dir(f / "deeper")
    assert str(e.value) == (f"cubin cache {f}/deeper (the cache folder asked for (--gpuprops-cache)) cannot be "
                            f"created: {f} is a file, {CACHE_HINT}")
    assert C.check_cache_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b" and not (tmp_path / "a").exists()


# ----------------------------------------------------------------------------------------------
# _write_entry, _read_entry, _file_mode


def test_an_entry_is_written_where_its_parents_do_not_exist_yet(tmp_path, umask_022):
    cache = tmp_path / "a" / "b" / "cubins"
    C._write_entry(cache, [(cache / "k.cubin", ELF), (cache / "k.json", b"{}")])
    assert sorted(p.name for p in cache.iterdir()) == ["k.cubin", "k.json"]
    assert (cache / "k.cubin").read_bytes() == ELF and (cache / "k.json").read_bytes() == b"{}"
    assert (cache / "k.cubin").stat().st_mode & 0o777 == 0o644


def test_an_entry_never_passes_through_the_system_temporary_folder(tmp_path, monkeypatch):
    """The temporary file is made in the cache itself (a rename from another file system would not be
    atomic): a system temporary folder that does not exist changes nothing."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    monkeypatch.setattr(C, "_WARNED", set())
    cache = tmp_path / "c"
    cm, caught = _record_warnings()
    try:
        C._write_entry(cache, [(cache / "k.cubin", ELF)])
    finally:
        cm.__exit__(None, None, None)
    assert caught == [] and (cache / "k.cubin").read_bytes() == ELF
    assert [p.name for p in cache.iterdir()] == ["k.cubin"] and not (tmp_path / "no-such-tmp").exists()


def test_a_failed_rename_leaves_no_temporary_file_and_warns_in_full(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "_WARNED", set())
    cache = tmp_path / "c"
    (cache / "k.json").mkdir(parents=True)  # a folder where the entry's JSON goes
    cm, caught = _record_warnings()
    try:
        C._write_entry(cache, [(cache / "k.cubin", ELF), (cache / "k.json", b"{}")])
    finally:
        cm.__exit__(None, None, None)
    assert [str(w.message) for w in caught] == [f"cubin cache {cache} cannot be written (Is a directory); {UNWRITABLE}"]
    assert sorted(p.name for p in cache.iterdir()) == ["k.cubin", "k.json"]  # the first file, the folder, no .tmp
    assert (cache / "k.cubin").read_bytes() == ELF and list((cache / "k.json").iterdir()) == []


def test_a_temporary_file_removed_under_the_writer_is_only_warned_about(tmp_path, monkeypatch):
    """Another process (a cache clean-up) may remove the temporary file before the rename: the failed
    rename is warned about, the missing file to remove is no second error."""
    monkeypatch.setattr(C, "_WARNED", set())

    def replace(src, dst):
        os.unlink(src)
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "replace", replace)
    cache = tmp_path / "c"
    cm, caught = _record_warnings()
    try:
        C._write_entry(cache, [(cache / "k.cubin", ELF)])
    finally:
        cm.__exit__(None, None, None)
    assert [str(w.message) for w in caught] == [f"cubin cache {cache} cannot be written (Input/output error); {UNWRITABLE}"]
    assert list(cache.iterdir()) == []


def test_the_umask_is_read_without_changing_it(monkeypatch):
    """Where /proc says the umask, the process's umask is not flipped to read it (another thread making a
    file at that moment would get the wrong mode)."""
    old = os.umask(0o027)
    flips = []
    try:
        monkeypatch.setattr(os, "umask", lambda mask: flips.append(mask) or 0o022)
        mode = C._file_mode()
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert (mode, flips) == (0o640, [])


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o000, 0o666), (0o077, 0o600)])
def test_without_proc_the_mode_is_0666_less_the_umask(monkeypatch, umask, mode):
    real_open = open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc/"):
            raise OSError(errno.ENOENT, "No such file or directory")
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", no_proc)
    old = os.umask(umask)
    try:
        assert C._file_mode() == mode
        assert os.umask(old) == umask
    finally:
        os.umask(old)


def test_an_entry_whose_metadata_is_a_pipe_is_not_read(tmp_path):
    """Only regular files are read: a pipe in the cache (which would block a reader) is recompiled over,
    even when what it would say matches the cubin."""
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(ELF)
    os.mkfifo(meta)
    text = ('{"sha256": "%s", "log": "from the pipe"}' % ELF_SHA256).encode()

    def feed():
        fd = os.open(meta, os.O_WRONLY)  # waits for a reader
        os.write(fd, text)
        os.close(fd)
    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        got = C._read_entry(cubin, meta)
    finally:
        fd = os.open(meta, os.O_RDWR)  # a reader that never waits: lets the feeder finish either way
        t.join()
        os.close(fd)
    assert got is None


def test_an_entry_read_back_in_full(tmp_path):
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(ELF)
    meta.write_text('{"sha256": "%s", "log": "ptxas info"}' % ELF_SHA256)
    assert C._read_entry(cubin, meta) == (ELF, "ptxas info")
    meta.write_text('{"sha256": "%s", "log": null}' % ELF_SHA256)
    assert C._read_entry(cubin, meta) == (ELF, "")
    meta.write_text('["%s"]' % ELF_SHA256)
    assert C._read_entry(cubin, meta) is None


# ----------------------------------------------------------------------------------------------
# facts: check_facts_path, load_file, load_facts messages in full

ONE = '''arch = "{arch}"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"
'''


def test_check_facts_path_messages_in_full(tmp_path):
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(tmp_path / "nope")
    assert str(e.value) == (f"facts path {tmp_path / 'nope'} does not exist; pass a facts .toml file or a folder of "
                            "sm_XX.toml (gpuprops facts lists the packaged ones)")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(empty)
    assert str(e.value) == f"facts folder {empty} holds no sm_XX.toml files (found: nothing)"
    other = tmp_path / "other"
    other.mkdir()
    for name in "ihgfedcba":
        (other / f"{name}.txt").write_text("")
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(other)
    assert str(e.value) == (f"facts folder {other} holds no sm_XX.toml files (found: a.txt, b.txt, c.txt, d.txt, "
                            "e.txt, f.txt, g.txt, h.txt)")


def test_a_file_in_a_folder_must_be_named_for_its_arch(tmp_path):
    (tmp_path / "sm_80.toml").write_text(ONE.format(arch="sm_80"))
    (tmp_path / "sm_86.toml").write_text(ONE.format(arch="sm_90"))
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(tmp_path)
    assert str(e.value) == (f"{tmp_path / 'sm_86.toml'}: arch = 'sm_90', but the file is named sm_86.toml; in a "
                            "folder each file must be named for its arch (rename it, or fix arch)")
    (tmp_path / "sm_86.toml").write_text(ONE.format(arch="sm_86"))
    assert [(f.arch, f.path) for f in F.check_facts_path(tmp_path)] == [
        ("sm_80", tmp_path / "sm_80.toml"), ("sm_86", tmp_path / "sm_86.toml")]
    assert [f.arch for f in F.check_facts_path(tmp_path / "sm_86.toml")] == ["sm_86"]


def test_load_messages_in_full(tmp_path):
    with pytest.raises(F.FactsError) as e:
        F.load_file(tmp_path / "none.toml")
    assert str(e.value) == f"facts file {tmp_path / 'none.toml'} does not exist"
    (tmp_path / "sm_90.toml").write_text(ONE.format(arch="sm_90"))
    (tmp_path / "sm_80.toml").write_text(ONE.format(arch="sm_80"))
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_86", tmp_path)
    assert str(e.value) == (f"no facts for sm_86 in folder {tmp_path} (it has: sm_80, sm_90); record them with "
                            f"--gpuprops-record {tmp_path / 'sm_86.toml'} on a sm_86 GPU")


# ----------------------------------------------------------------------------------------------
# facts: GPU scope

def _fact(name, **kw):
    base = dict(name=name, arch="sm_90", unit="cycles", method="chase", source="s", value=23.0, tolerance_abs=0.25)
    base.update(kw)
    return F.Fact(**base)


@pytest.fixture
def none_registered(monkeypatch):
    monkeypatch.setattr(F, "GPU_SCOPED", set())


def test_register_gpu_scoped_checks_every_name_first(none_registered):
    with pytest.raises(F.FactsError) as e:
        F.register_gpu_scoped("dram_latency_cycles", "L2-Latency")
    assert str(e.value) == "fact name 'L2-Latency' must be lower_snake_case"
    assert F.GPU_SCOPED == set() and not F.is_gpu_scoped("dram_latency_cycles")
    F.register_gpu_scoped("dram_latency_cycles", "l2_bw")
    assert F.GPU_SCOPED == {"dram_latency_cycles", "l2_bw"} and F.is_gpu_scoped("l2_bw")


def test_is_gpu_scoped_by_registration_scope_or_section(none_registered):
    facts = F.Facts("sm_90", None, {"lds": _fact("lds"), "dram": _fact("dram", scope="gpu", gpu="G1")}, {})
    facts.gpu_sections = {"G2": {"l2": _fact("l2", scope="gpu", gpu="G2")}}
    assert not F.is_gpu_scoped("dram") and not F.is_gpu_scoped("lds")  # nothing registered, no file
    assert [F.is_gpu_scoped(n, facts) for n in ("lds", "dram", "l2", "other")] == [False, True, True, False]
    F.register_gpu_scoped("lds")
    assert F.is_gpu_scoped("lds") and F.is_gpu_scoped("lds", facts)


GPU_FILE = '''arch = "sm_90"
gpu = "NVIDIA H200"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"

[gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]
value = 800.0
tolerance_abs = 5.0
unit = "cycles"
method = "cold chase"
source = "s"
'''


def test_need_on_a_gpu_says_the_fact_is_the_gpus(tmp_path, none_registered):
    """A fact only a GPU section holds is the GPU's even when no test module registered it."""
    p = tmp_path / "sm_90.toml"
    p.write_text(GPU_FILE)
    h200 = F.load_facts("sm_90", p, gpu_name="NVIDIA H200")
    with pytest.raises(F.MissingFacts) as e:
        h200.need("dram_latency_cycles")
    assert str(e.value) == (f"no fact 'dram_latency_cycles' for the GPU 'NVIDIA H200' (sm_90) in {p}: it belongs to "
                            "the GPU's memory system; record it with --gpuprops-record PATH on this GPU, or add a "
                            '[gpus."NVIDIA H200".dram_latency_cycles] table')
    with pytest.raises(F.MissingFacts) as e:
        h200.need("l2_bw")
    assert str(e.value) == (f"no fact 'l2_bw' for sm_90 in {p}; record it with --gpuprops-record PATH on a sm_90 GPU, "
                            "or add a [l2_bw] table")
    assert h200.need("lds_latency_cycles").value == 23.0


def test_need_on_a_gpu_without_a_file(none_registered):
    facts = F.Facts("sm_86", None, {}, {})
    facts.gpu_sections = {"G2": {"dram": _fact("dram", arch="sm_86", scope="gpu", gpu="G2")}}
    with pytest.raises(F.MissingFacts) as e:
        F.select_gpu(facts, "RTX A6000").need("dram")
    assert str(e.value) == ("no fact 'dram' for the GPU 'RTX A6000' (sm_86) in (no file): it belongs to the GPU's "
                            "memory system; record it with --gpuprops-record PATH on this GPU, or add a "
                            '[gpus."RTX A6000".dram] table')


def test_select_gpu_keeps_the_file_meta_and_sections(none_registered):
    path = pathlib.Path("/facts/sm_90.toml")
    meta = {"arch": "sm_90", "gpu": "NVIDIA H200", "recorded": 3}
    mine, other = _fact("dram", scope="gpu", gpu="NVIDIA H200"), _fact("old", scope="gpu", gpu="NVIDIA H100")
    facts = F.Facts("sm_90", path, {"lds": _fact("lds"), "dram": mine, "old": other}, meta)
    section = {"l2": _fact("l2", scope="gpu", gpu="nvidia  h200", value=260.0)}
    facts.gpu_sections = {"nvidia  h200": section}
    got = F.select_gpu(facts, " NVIDIA H200")
    assert (got.arch, got.path, got.meta, got.gpu, got.gpu_sections) == (
        "sm_90", path, meta, " NVIDIA H200", {"nvidia  h200": section})
    assert dict(got) == {"lds": _fact("lds"), "dram": mine, "l2": section["l2"]}


def test_split_by_scope(none_registered):
    F.register_gpu_scoped("l2_bw")
    lds, own, h100, reg = (_fact("lds"), _fact("dram", scope="gpu"), _fact("old", scope="gpu", gpu="H100"),
                           _fact("l2_bw"))
    assert F.split_by_scope([lds, own, h100, reg], "H200") == ([lds], {"H200": [own, reg], "H100": [h100]})
    assert F.split_by_scope([lds, own, h100, reg], None) == ([lds, own, reg], {"H100": [h100]})


@pytest.mark.parametrize("value, tol, measured, ok", [
    (0.0, 0.5, 0.5 + 1e-12, True),   # exactly on the edge (the 1e-12 slack included): accepted
    (0.0, 0.5, -(0.5 + 1e-12), True),
    (0.0, 0.5, 0.5 + 2e-12, False),
    (0.0, 0.0, 1e-12, True),
    (0.0, 0.0, 2e-12, False),
])
def test_accepts_at_the_exact_edge(value, tol, measured, ok):
    assert _fact("x", value=value, tolerance_abs=tol).accepts(measured) is ok


# ----------------------------------------------------------------------------------------------
# record mode: text written


def test_dumps_files_gpu_facts_under_their_gpu_without_a_scope_line(none_registered):
    F.register_gpu_scoped("dram_latency_cycles")
    facts = [_fact("lds_latency_cycles"), _fact("dram_latency_cycles", value=801.5, tolerance_abs=5.0,
                                                method="cold chase")]
    assert F.dumps("sm_90", facts, meta={"gpu": "NVIDIA H100 80GB HBM3"}) == '''arch = "sm_90"
gpu = "NVIDIA H100 80GB HBM3"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"

[gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]
value = 801.5
tolerance_abs = 5.0
unit = "cycles"
method = "cold chase"
source = "s"
'''
    assert F.dumps("sm_90", [_fact("dram", scope="gpu", tolerance_abs=0.0, tolerance_rel=0.02)]) == '''arch = "sm_90"

[dram]
scope = "gpu"
value = 23.0
tolerance_rel = 0.02
unit = "cycles"
method = "chase"
source = "s"
'''


def test_write_facts_text_and_a_refused_record(tmp_path, none_registered):
    p = F.write_facts(tmp_path / "rec.toml", "sm_90", [_fact("old", scope="gpu", gpu="H100", value=7)])
    assert p.read_text() == '''arch = "sm_90"

[gpus."H100".old]
value = 7
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"
'''
    bad = tmp_path / "new" / "bad.toml"
    with pytest.raises(F.FactsError) as e:
        F.write_facts(bad, "sm_90", [_fact("x", unit="")])
    assert str(e.value) == f"{bad}: fact [x] unit must be a non-empty string, not ''\n  (see the facts TOML schema in README.md)"
    assert not bad.parent.exists()


def test_parse_text_check_names_the_record(tmp_path):
    p = tmp_path / "rec.toml"
    with pytest.raises(F.FactsError) as e:
        F._parse_text_check("x = \n", p)
    assert str(e.value) == f"internal error: record for {p} is not valid TOML: Invalid value (at line 1, column 5)"
    with pytest.raises(F.FactsError) as e:
        F._parse_text_check('gpu = "G"\n', p)
    assert str(e.value) == f'{p}: top-level key arch = "sm_XX" is missing (see the facts TOML schema in README.md)'
